"""What the accelerator computes, on the host's generated kernels: each `ops.Computation`
(conv2d, depthwise conv, dense, max pool, global average pool, scaled add, with the
accelerator's epilogue and 32-bit steps) becomes a kernel record (`computation_kernel`), so
the `cpu` device runs a network's accelerator steps bit-exactly as `ops.reference` defines
them: the baseline to compare the accelerator against, and the fallback when there is none."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from tilecraft.compiler.llvm.kernels import conv, dense, window
from tilecraft.compiler.llvm.kernels import direct as D
from tilecraft.compiler.llvm.kernels import elementwise as EW
from tilecraft.compiler.llvm.kernels.dot_conv import DotConv2d, for_target
from tilecraft.compiler.llvm.kernels.epilogue import vector_buffers
from tilecraft.compiler.llvm.spec import Spec
from tilecraft.compiler.llvm.targets import Target
from tilecraft.errors import KernelError
from tilecraft.ops import operators as O
from tilecraft.ops.reference import RESULT
from tilecraft.runtime.kernels import (
    bind_arguments,
    computation_key,
    hashable,
    kernel_arguments,
)


def computation_kernel(
    comp: O.Computation, gpu: bool = False, target: Target | None = None
) -> tuple[Spec, list[str]]:
    """The kernel record computing `comp`, and the tensor (by its program name) each of the
    kernel's inputs is; with `gpu`, one whose iterations are threads (`kernels.direct`). A conv
    runs on integer dot products where `target` (the CPU it is built for) has them."""
    op, ep = comp.op, comp.epilogue or O.Epilogue()
    if gpu and isinstance(op, (O.Conv2d, O.DepthwiseConv2d, O.Dense, O.MaxPool2d)):
        return _direct(comp, op, ep)
    if isinstance(op, O.Conv2d):
        (ph, pw) = op.pad
        shared = bool(ep.offset) and not ep.on_unit  # the offset an input: one kernel a shape
        spec = conv.Conv2d(
            op.input_shape,
            op.oc,
            op.kernel,
            op.stride,
            (ph, pw, ph, pw),
            "int8",
            epilogue=replace(ep, offset=0) if shared else ep,
            pad_value=op.pad_value,
            offset_input=shared,
        )
        spec = spec if target is None else for_target(spec, target)
        return spec, _operands(ep, op.oc, shared)
    if isinstance(op, O.DepthwiseConv2d):
        (ph, pw) = op.pad
        if ep.residual:
            raise KernelError("a depthwise conv with a residual add has no host kernel")
        spec = window.DepthwiseConv(
            op.input_shape, op.kernel, op.stride, (ph, pw, ph, pw), ep, op.pad_value
        )
        return spec, _operands(ep, op.c)
    if isinstance(op, O.Dense):
        return dense.Dense(op.m, op.k, op.n, "int8", epilogue=ep), _operands(ep, op.n)
    if isinstance(op, O.MaxPool2d):
        spec = window.MaxPool(op.input_shape, op.kernel, op.stride, op.pads, "int8", op.pad_value)
        return spec, ["input"]
    if isinstance(op, O.GlobalAvgPool2d):
        spec = window.WrappedGlobalAvgPool(
            op.input_shape,
            op.multiplier,
            op.shift,
            op.input_zero,
            op.output_zero,
            op.pre_shift,
            op.weight,
            op.scale,
        )
        return spec, ["input"]
    if isinstance(op, O.ScaledAdd):
        spec = EW.WrappedScaledAdd(
            op.input_shape,
            op.weight_a,
            op.multiplier_a,
            op.weight_b,
            op.multiplier_b,
            op.pre_shift,
            op.shift,
            op.zero_a,
            op.zero_b,
            op.zero_y,
            op.clip,
        )
        return spec, ["input", "residual"]
    raise KernelError(f"no host kernel computes {op.describe()}")


def _direct(comp, op, ep) -> tuple[Spec, list[str]]:
    if isinstance(op, O.MaxPool2d):
        return D.DirectMaxPool(
            op.input_shape, op.kernel, op.stride, op.pads, "int8", op.pad_value
        ), ["input"]
    if isinstance(op, O.Dense):
        return D.DirectDense(op.m, op.k, op.n, "int8", epilogue=ep), _operands(ep, op.n)
    (ph, pw), depthwise = op.pad, isinstance(op, O.DepthwiseConv2d)
    out = op.c if depthwise else op.oc
    spec = D.DirectConv2d(
        op.input_shape,
        out,
        op.kernel,
        op.stride,
        (ph, pw, ph, pw),
        "int8",
        epilogue=ep,
        pad_value=op.pad_value,
        depthwise=depthwise,
    )
    return spec, _operands(ep, out)


def _operands(ep: O.Epilogue, channels: int, offset_input: bool = False) -> list[str]:
    vectors = [b.name for b in vector_buffers(ep, channels, offset_input)]
    return ["input", "weight", *vectors] + (["residual"] if ep.residual else [])


class JitCompute:
    """`runtime.cpu.ComputeKernels` on this machine: each computation's kernel JIT-compiled on
    first use (and cached on disk). With `direct`, the GPU's thread-per-output kernels,
    compiled for the CPU (how their arithmetic is checked without a GPU)."""

    def __init__(self, jit=None, direct: bool = False):
        from tilecraft.compiler.llvm.jit import Jit

        self.jit = jit or Jit()
        self.direct = direct
        self._kernels: dict = {}  # by `_key`
        self._packed: dict[tuple, tuple] = {}  # (pack record, id(weight)): packed

    def outputs(self, comp: O.Computation, tensors: dict) -> dict[str, np.ndarray]:
        kernel, names, pack = self._found(comp)
        args = kernel_arguments(comp, names, tensors)
        if pack is not None:
            args[1:2] = self._pack(pack, args[1])
        return {RESULT[type(comp.op)]: kernel(*args)}

    def bind(self, comp: O.Computation, fixed: dict) -> tuple[list[str], Callable]:
        """`outputs` made ready for every run of one program (`bind_arguments`): `comp`'s
        kernel found, and the arguments `fixed` (the program's constants, by buffer name) or
        `comp` give converted, and its weights packed, once (weights that are not constants
        packed at each run). Returns the buffers each run passes and the call that takes them
        and returns the result tensor: the same result as `outputs`."""
        kernel, names, pack = self._found(comp)
        weight = (lambda w: list(self._pack(pack, w))) if pack is not None else None
        return bind_arguments(comp, kernel, names, fixed, weight)

    def _found(self, comp: O.Computation) -> tuple:
        """(kernel, its operands, the record packing its weights or None) for `comp`, found
        by the record itself (hashed once) or its JSON (`_key`), built on first use."""
        try:
            key, found = comp, self._kernels.get(comp)
        except TypeError:
            key = computation_key(comp)
            found = self._kernels.get(key)
        if found is None:
            spec, pack, names = self._records(comp)
            found = self._kernels[key] = (self.jit.kernel(spec), names, pack)
        return found

    def prepare(self, computations) -> None:
        """Compile the kernels of `computations` all at once (`jit.Jit.build`: on every core),
        before their first use."""
        specs = []
        for comp in computations:
            if _key(comp) not in self._kernels:
                specs.append(self._records(comp)[0])
        self.jit.build(specs)

    def _records(self, comp: O.Computation) -> tuple:
        """(the kernel record, the record packing its weights or None, its operands): a
        dot-product conv takes its weights packed once (`_pack`, in numpy: no kernel to
        compile)."""
        spec, names = computation_kernel(comp, gpu=self.direct, target=self.jit.target)
        if isinstance(spec, DotConv2d):
            return replace(spec, packed=True), spec.weights, names
        return spec, None, names

    def _pack(self, pack, weight: np.ndarray) -> tuple:
        """`weight` packed by `pack` (`DotWeights.pack`: wq, and wsum for vnni or wpair for
        neon); kept while the array cannot change (read-only down to the memory it views: the
        cpu device's constants), packed again each call if it can. Kept no longer than the
        array lives."""
        if not _frozen(weight):
            return pack.pack(weight)
        key = (pack, id(weight))  # the record itself (hashed fast), not its digest
        held = self._packed.get(key)
        if held is None or held[0]() is not weight:
            held = self._packed[key] = (weakref.ref(weight), pack.pack(weight))
            weakref.finalize(weight, self._packed.pop, key, None)
        return held[1]


def _key(comp: O.Computation):
    """What JitCompute finds a computation's kernel by: the record itself where it can be
    hashed (`runtime.kernels.hashable`), else its JSON (`computation_key`)."""
    return comp if hashable(comp) else computation_key(comp)


def _frozen(a: np.ndarray) -> bool:
    """Whether `a` and every array whose memory it views are read-only (numpy refuses to make
    a view writable again over a read-only base)."""
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        a = a.base
    return True


class GpuCompute:
    """`runtime.cpu.ComputeKernels` on the GPU: each computation's thread-per-output kernel
    generated as PTX (NVPTX) on first use and launched through cuda.core."""

    def __init__(self):
        self._kernels: dict[str, tuple] = {}

    def outputs(self, comp: O.Computation, tensors: dict) -> dict[str, np.ndarray]:
        from tilecraft.compiler.llvm.build import assembly
        from tilecraft.compiler.llvm.targets import NVPTX
        from tilecraft.runtime.gpu import load_ptx

        key = computation_key(comp)
        found = self._kernels.get(key)
        if found is None:
            spec, names = computation_kernel(comp, gpu=True)
            kernels = load_ptx(assembly([spec], NVPTX), [spec.signature()])
            found = self._kernels[key] = (kernels[spec.symbol], names)
        kernel, names = found
        return {RESULT[type(comp.op)]: kernel(*kernel_arguments(comp, names, tensors))}


def compute_entries(computations, target: Target | None = None) -> list[tuple[Spec, dict]]:
    """The kernel records of a model's computations (for `target`) with the manifest entries
    a board finds them by (`runtime.cpu.LibraryCompute`)."""
    out = []
    for comp in computations:
        spec, names = computation_kernel(comp, target=target)
        out.append((spec, {"key": computation_key(comp), "symbol": spec.symbol, "operands": names}))
    return out
