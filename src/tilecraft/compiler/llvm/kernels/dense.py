"""Dense layers: x (M, K) @ w (K, N), float32 (+ bias, + ReLU) or int8 (int32 accumulation,
wrapping, then the accelerator's epilogue with the channels along N: `ops.reference.dense`).

Written as rows of axpy: for each input row, for each k, acc[:] += x[m, k] * w[k, :], with the
accumulator row in scratch space (it fits in L1) and the loop over N vectorised by LLVM. Each
weight is read once per input row, which is what a batch-1 layer is bound by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from llvmlite import ir

from tilecraft.compiler.llvm.irgen import F32, I8, I32, Kernel
from tilecraft.compiler.llvm.kernels import epilogue as E
from tilecraft.compiler.llvm.spec import Buffer, Spec, dtype_of, positive_shape
from tilecraft.errors import KernelError
from tilecraft.ops.operators import Epilogue


@dataclass(frozen=True)
class Dense(Spec):
    m: int
    k: int
    n: int
    dtype: str = "float32"
    bias: bool = False  # float32 only
    relu: bool = False  # float32 only
    epilogue: Epilogue = Epilogue()  # int8 only
    kind: ClassVar[str] = "dense"
    compile_cost: ClassVar[int] = 10

    def __post_init__(self):
        positive_shape("dense (m, k, n)", (self.m, self.k, self.n), 3)
        object.__setattr__(self, "dtype", dtype_of("dense", self.dtype, ("float32", "int8")))
        if self.dtype == "float32" and self.epilogue != Epilogue():
            raise KernelError("a float32 dense takes bias and relu, not an int8 epilogue")
        if self.dtype == "int8" and (self.bias or self.relu):
            raise KernelError("an int8 dense states bias and ReLU in its epilogue")

    def buffers(self):
        t = self.dtype
        ins = [Buffer("x", (self.m, self.k), t), Buffer("weight", (self.k, self.n), t)]
        if t == "float32":
            ins += [Buffer("bias", (self.n,), "float32")] if self.bias else []
        else:
            ins += E.vector_buffers(self.epilogue, self.n)
            ins += [Buffer("residual", (self.m, self.n), "int8")] if self.epilogue.residual else []
        acc = "float32" if t == "float32" else "int32"
        return (
            *ins,
            Buffer("y", (self.m, self.n), t, "out"),
            Buffer("acc", (self.n,), acc, "work"),
        )

    def emit(self, k: Kernel) -> None:
        b = k.b
        integer = self.dtype == "int8"
        t, at = (I8, I32) if integer else (F32, F32)
        zero = ir.Constant(at, 0 if integer else 0.0)
        with k.loop(self.m, name="m") as m:
            with k.loop(self.n, name="z") as j:
                k.store(zero, k.arg["acc"], j)
            # four rows of the weight per pass over the accumulator row (a quarter of its
            # loads and stores), then the rest one by one
            step = 4 if self.k >= 4 else 1
            with k.loop(self.k // step * step, step=step, name="k") as kk:
                self._axpy(k, m, [b.add(kk, k.i(r)) for r in range(step)], integer, t, at)
            for r in range(self.k // step * step, self.k):
                self._axpy(k, m, [k.i(r)], integer, t, at)
            with k.loop(self.n, name="e") as j:  # the epilogue
                out = b.add(b.mul(m, k.i(self.n)), j)
                y = k.load(k.arg["acc"], at, j)
                if integer:
                    res = k.load(k.arg["residual"], I8, out) if self.epilogue.residual else None
                    y = E.emit(k, self.epilogue, y, j, res)
                else:
                    if self.bias:
                        y = b.fadd(y, k.load(k.arg["bias"], F32, j))
                    if self.relu:
                        y = k.fmax(y, k.fconst(F32, 0.0))
                k.store(y, k.arg["y"], out)

    def _axpy(self, k: Kernel, m, rows: list, integer: bool, t, at) -> None:
        """acc[:] += sum over `rows` r of x[m, r] * w[r, :]."""
        b = k.b
        xs = []
        for r in rows:
            xv = k.load(k.arg["x"], t, b.add(b.mul(m, k.i(self.k)), r))
            xs.append(b.sext(xv, I32) if integer else xv)
        with k.loop(self.n, name="j") as j:
            acc = k.load(k.arg["acc"], at, j)
            for r, xv in zip(rows, xs):
                w = k.load(k.arg["weight"], t, b.add(b.mul(r, k.i(self.n)), j))
                acc = b.add(acc, b.mul(xv, b.sext(w, I32))) if integer else k.fmuladd(xv, w, acc)
            k.store(acc, k.arg["acc"], j)
