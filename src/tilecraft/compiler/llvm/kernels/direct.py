"""Kernels with one independent iteration per output element: a GPU runs each as a thread
(`Kernel.parallel`), a CPU as a loop. Convolution (dense or depthwise, float32 or int8 with
the accelerator's epilogue), dense layers and max pooling, computed directly from the inputs
with the padding checked per tap. They are the GPU fallback's operators; on a CPU they are
slower than the tiled kernels, and compiling them there is how their arithmetic is tested on
machines without a GPU (the IR is the same but for the thread index)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from llvmlite import ir

from tilecraft.compiler.llvm.irgen import F32, I8, I32, Kernel
from tilecraft.compiler.llvm.kernels import epilogue as E
from tilecraft.compiler.llvm.kernels.conv import Conv2d
from tilecraft.compiler.llvm.kernels.dense import Dense
from tilecraft.compiler.llvm.spec import Buffer, Spec, dtype_of, positive_shape
from tilecraft.errors import KernelError


def _split(k: Kernel, index, dims: tuple[int, ...]) -> list:
    """The coordinates of flat `index` in an array of shape `dims` (row-major)."""
    out = []
    for d in reversed(dims):
        out.append(k.b.urem(index, k.i(d)))
        index = k.b.udiv(index, k.i(d))
    return out[::-1]


@dataclass(frozen=True)
class DirectConv2d(Conv2d):
    """NCHW conv2d, one output per iteration; `depthwise` for groups = channels (weight
    (C, 1, KH, KW), out_channels = C). float32 takes bias and ReLU, int8 the epilogue."""

    depthwise: bool = False
    kind: ClassVar[str] = "direct_conv2d"
    gpu: ClassVar[bool] = True

    def __post_init__(self):
        super().__post_init__()
        if self.depthwise and self.out_channels != self.shape[1]:
            raise KernelError(
                f"a depthwise conv has as many outputs as inputs ({self.shape[1]})"
                f", not {self.out_channels}"
            )

    def buffers(self):
        oc, c = self.out_channels, 1 if self.depthwise else self.shape[1]
        ins = [
            Buffer("x", self.shape, self.dtype),
            Buffer("weight", (oc, c, *self.kernel), self.dtype),
        ]
        if self.dtype == "float32":
            ins += [Buffer("bias", (oc,), "float32")] if self.bias else []
        else:
            ins += E.vector_buffers(self.epilogue, oc)
            ins += [Buffer("residual", self.out_shape, "int8")] if self.epilogue.residual else []
        return (*ins, Buffer("y", self.out_shape, self.dtype, "out"))

    def emit(self, k: Kernel) -> None:
        b = k.b
        n_count, c_count, h, w = self.shape
        _, oc_count, oh, ow = self.out_shape
        (kh, kw), (sh, sw), (top, left) = self.kernel, self.stride, self.pads[:2]
        integer = self.dtype == "int8"
        t, at = (I8, I32) if integer else (F32, F32)
        total = n_count * oc_count * oh * ow
        with k.parallel(total, name="o") as o:
            n, oc, oy, ox = _split(k, o, (n_count, oc_count, oh, ow))
            acc = k.local(at)
            b.store(ir.Constant(at, 0 if integer else 0.0), acc)
            inputs = 1 if self.depthwise else c_count
            with (
                k.loop(inputs, name="c") as dc,
                k.loop(kh, name="ki") as i,
                k.loop(kw, name="kj") as j,
            ):
                c = oc if self.depthwise else dc
                y = b.add(b.mul(oy, k.i(sh)), b.sub(i, k.i(top)))
                x = b.add(b.mul(ox, k.i(sw)), b.sub(j, k.i(left)))
                inside = b.and_(
                    b.and_(b.icmp_signed(">=", y, k.i(0)), b.icmp_signed("<", y, k.i(h))),
                    b.and_(b.icmp_signed(">=", x, k.i(0)), b.icmp_signed("<", x, k.i(w))),
                )
                src = b.add(
                    b.mul(b.add(b.mul(n, k.i(c_count)), c), k.i(h)), b.select(inside, y, k.i(0))
                )
                src = b.add(b.mul(src, k.i(w)), b.select(inside, x, k.i(0)))
                v = b.select(
                    inside,
                    k.load(k.arg["x"], t, src),
                    ir.Constant(t, self.pad_value if integer else 0.0),
                )
                w_at = b.add(b.mul(b.add(b.mul(oc, k.i(inputs)), dc), k.i(kh)), i)
                wv = k.load(k.arg["weight"], t, b.add(b.mul(w_at, k.i(kw)), j))
                if integer:
                    b.store(b.add(b.load(acc), b.mul(b.sext(v, I32), b.sext(wv, I32))), acc)
                else:
                    b.store(k.fmuladd(v, wv, b.load(acc)), acc)
            _finish(k, self, b.load(acc), oc, o)


def _finish(k: Kernel, spec, acc, channel, out) -> None:
    """Bias and ReLU (float32) or the epilogue (int8) on one output, stored at `out`."""
    b = k.b
    if spec.dtype == "int8":
        res = k.load(k.arg["residual"], I8, out) if spec.epilogue.residual else None
        k.store(E.emit(k, spec.epilogue, acc, channel, res), k.arg["y"], out)
        return
    if spec.bias:
        acc = b.fadd(acc, k.load(k.arg["bias"], F32, channel))
    if spec.relu:
        acc = k.fmax(acc, k.fconst(F32, 0.0))
    k.store(acc, k.arg["y"], out)


@dataclass(frozen=True)
class DirectDense(Dense):
    """x (M, K) @ w (K, N), one output per iteration; float32 (+ bias, ReLU) or int8 with the
    epilogue (channels along N)."""

    kind: ClassVar[str] = "direct_dense"
    gpu: ClassVar[bool] = True

    def buffers(self):
        return super().buffers()[:-1]  # no accumulator row: each output sums its own

    def emit(self, k: Kernel) -> None:
        b = k.b
        integer = self.dtype == "int8"
        t, at = (I8, I32) if integer else (F32, F32)
        with k.parallel(self.m * self.n, name="o") as o:
            m, j = _split(k, o, (self.m, self.n))
            acc = k.local(at)
            b.store(ir.Constant(at, 0 if integer else 0.0), acc)
            with k.loop(self.k, name="kk") as kk:
                xv = k.load(k.arg["x"], t, b.add(b.mul(m, k.i(self.k)), kk))
                wv = k.load(k.arg["weight"], t, b.add(b.mul(kk, k.i(self.n)), j))
                if integer:
                    b.store(b.add(b.load(acc), b.mul(b.sext(xv, I32), b.sext(wv, I32))), acc)
                else:
                    b.store(k.fmuladd(xv, wv, b.load(acc)), acc)
            _finish(k, self, b.load(acc), j, o)


@dataclass(frozen=True)
class DirectMaxPool(Spec):
    """Max pooling, one output per iteration; int8 padding holds `pad_value`, float32's is
    never taken."""

    shape: tuple[int, int, int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dtype: str = "int8"
    pad_value: int = -128
    kind: ClassVar[str] = "direct_maxpool"
    gpu: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape("maxpool", self.shape, 4))
        object.__setattr__(self, "dtype", dtype_of("maxpool", self.dtype, ("int8", "float32")))
        object.__setattr__(self, "pads", tuple(int(p) for p in self.pads))

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        (h, w), (kh, kw), (sh, sw) = self.shape[2:], self.kernel, self.stride
        t, left, bottom, r = self.pads
        return (*self.shape[:2], (h + t + bottom - kh) // sh + 1, (w + left + r - kw) // sw + 1)

    def buffers(self):
        return (Buffer("x", self.shape, self.dtype), Buffer("y", self.out_shape, self.dtype, "out"))

    def emit(self, k: Kernel) -> None:
        b = k.b
        integer = self.dtype == "int8"
        t = I8 if integer else F32
        _, _, h, w = self.shape
        nc, (oh, ow) = self.shape[0] * self.shape[1], self.out_shape[2:]
        (kh, kw), (sh, sw), (top, left) = self.kernel, self.stride, self.pads[:2]
        low = ir.Constant(I8, -128) if integer else ir.Constant(F32, float("-inf"))
        pad = ir.Constant(I8, self.pad_value) if integer else low
        with k.parallel(nc * oh * ow, name="o") as o:
            plane, oy, ox = _split(k, o, (nc, oh, ow))
            best = k.local(t)
            b.store(low, best)
            for i in range(kh):
                for j in range(kw):
                    y = b.add(b.mul(oy, k.i(sh)), k.i(i - top))
                    x = b.add(b.mul(ox, k.i(sw)), k.i(j - left))
                    inside = b.and_(
                        b.and_(b.icmp_signed(">=", y, k.i(0)), b.icmp_signed("<", y, k.i(h))),
                        b.and_(b.icmp_signed(">=", x, k.i(0)), b.icmp_signed("<", x, k.i(w))),
                    )
                    src = b.add(
                        b.mul(b.add(b.mul(plane, k.i(h)), b.select(inside, y, k.i(0))), k.i(w)),
                        b.select(inside, x, k.i(0)),
                    )
                    v = b.select(inside, k.load(k.arg["x"], t, src), pad)
                    bigger = k.smax(b.load(best), v) if integer else k.fmax(b.load(best), v)
                    b.store(bigger, best)
            k.store(b.load(best), k.arg["y"], o)
