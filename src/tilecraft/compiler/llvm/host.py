"""The host operators of a compiled network (`ops.host`) on generated kernels: each record and
its input shapes become a kernel record (`host_kernel`), compiled once and cached; so do the
packing and unpacking of an accelerator step's inputs and outputs that have one
(`layout_kernel`: an im2col input, int8 activations in blocks of 16).
`LlvmKernels` is the graph executor's `HostKernels` on this machine (JIT); the same records,
built ahead of time for a board, are what `runtime.cpu.LibraryKernels` calls there."""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence

import numpy as np

from tilecraft.compiler.llvm.kernels import elementwise as EW
from tilecraft.compiler.llvm.kernels import window as W
from tilecraft.compiler.llvm.kernels.epilogue import vector_buffers
from tilecraft.compiler.llvm.kernels.layout import PackActivation, PackIm2col, UnpackActivation
from tilecraft.compiler.llvm.spec import Spec
from tilecraft.errors import KernelError
from tilecraft.ops import host as H
from tilecraft.runtime.kernels import HostStepKernels, host_key, layout_key, layout_record

Bind = list  # per input buffer of the kernel: an input's position, or a constant's name


def host_kernel(op: H.HostOp, shapes: Sequence[tuple[int, ...]]) -> tuple[Spec, Bind] | None:
    """The kernel record for `op` on inputs of `shapes`, and where each of its inputs comes
    from; None for an operator that needs no kernel (Flatten is a view)."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    x = shapes[0]
    if isinstance(op, H.Flatten):
        return None
    if isinstance(op, H.Quantize):
        return EW.Quantize(x, op.scale, op.zero), [0]
    if isinstance(op, H.Dequantize):
        return EW.Dequantize(x, op.scale, op.zero), [0]
    if isinstance(op, H.Add):
        if shapes[1] != x:
            raise KernelError(
                f"the add kernel takes equal shapes, not {x} and {shapes[1]} "
                f"(broadcasting has no kernel)"
            )
        spec = EW.ScaledAdd(
            x, op.ratio_a, op.ratio_b, op.clip, op.zero_a, op.zero_b, op.zero_y, op.fixed
        )
        return spec, [0, 1]
    if isinstance(op, H.MaxPool):
        return W.MaxPool(x, op.kernel, op.stride, op.pads, "int8"), [0]
    if isinstance(op, H.GlobalAvgPool):
        spec = W.GlobalAvgPool(
            x,
            "int8",
            op.multiplier,
            op.shift,
            op.input_zero,
            op.output_zero,
            op.pre_shift,
            op.scale,
        )
        return spec, [0]
    if isinstance(op, H.DepthwiseConv):
        spec = W.DepthwiseConv(x, op.kernel, op.stride, op.pads, op.epilogue, op.pad_value)
        names = [b.name for b in vector_buffers(op.epilogue, x[1])]
        return spec, [0, "weight", *names]
    raise KernelError(f"no host kernel for {type(op).__name__}")


class LlvmKernels(HostStepKernels):
    """`HostKernels` on this machine: kernels JIT-compiled on first use (`jit.Jit`, cached on
    disk), bit-exact with `ops.host.run`."""

    name = "llvm"

    def __init__(self, jit=None):
        from tilecraft.compiler.llvm.jit import Jit

        super().__init__()
        self.jit = jit or Jit()
        self._prepared: dict[tuple, weakref.ref] = {}  # (model id, layouts): kernels built

    def find(self, op, shapes, key):
        spec, bind = host_kernel(op, shapes)
        return self.jit.kernel(spec), bind

    def find_layout_kernel(self, record, key):
        spec = layout_kernel(*record)
        return None if spec is None else self.jit.kernel(spec)

    def prepare(self, model, layouts: bool = True) -> None:
        """Compile the kernels of `model`'s host steps all at once (`jit.Jit.build`), and
        with `layouts` its accelerator steps' layout kernels (not for a device that runs on
        logical tensors, the `cpu` device, which never packs), once per model."""
        from tilecraft.runtime.model import HostStep

        held = self._prepared.get((id(model), layouts))
        if held is not None and held() is model:
            return
        steps = [
            (s.op, [model.tensor(i).shape for i in s.inputs])
            for s in model.steps
            if isinstance(s, HostStep)
        ]
        entries = host_entries(steps) + (layout_entries(model) if layouts else [])
        self.jit.build([spec for spec, _ in entries])
        self._prepared[(id(model), layouts)] = weakref.ref(model)
        weakref.finalize(model, self._prepared.pop, (id(model), layouts), None)


def host_entries(steps) -> list[tuple[Spec, dict]]:
    """The kernel records of a model's host steps, each with the manifest entry that lets a
    board find it (`runtime.cpu.LibraryKernels`): the step's key and its binding. `steps` are
    (op, input shapes) pairs."""
    out = []
    for op, shapes in steps:
        made = host_kernel(op, shapes)
        if made is not None:
            spec, bind = made
            out.append((spec, {"key": host_key(op, shapes), "symbol": spec.symbol, "bind": bind}))
    return out


# a kernel's call costs about 5.5 us here (ctypes, the signature's checks), numpy's transposes
# of a small tensor less: (1, 128, 8, 8) packed in 7.6 us by numpy, 6.3 by the kernel; its
# unpacking 5.0 and 6.2 (scratch timings, fastest of 200)
KERNEL_BYTES = 16384


def layout_kernel(direction: str, layout, batch: int, lanes: int, dtype: str) -> Spec | None:
    """The kernel that packs a logical tensor into `layout` (direction "pack") or unpacks it
    ("unpack"), with the blocks and element type of `runtime.kernels.layout_record`; None
    where numpy does it as fast: an im2col input of one-byte elements, and int8 activations
    of KERNEL_BYTES or more in blocks of 16 lanes (`PackActivation.transposing`) have one."""
    if direction == "pack" and layout.kind == "im2col" and np.dtype(dtype).itemsize == 1:
        return PackIm2col(
            layout.logical,
            layout.kernel,
            layout.stride,
            layout.pad,
            layout.pad_value,
            batch,
            lanes,
            np.dtype(dtype).name,
        )
    big = math.prod(layout.logical) >= KERNEL_BYTES
    if layout.kind == "activation" and dtype == "int8" and lanes == 16 and big:
        made = PackActivation if direction == "pack" else UnpackActivation
        return made(layout.logical, batch, lanes, dtype)
    return None


def layout_entries(model) -> list[tuple[Spec, dict]]:
    """The layout kernels of a model's accelerator steps (their inputs' packing, their
    outputs' unpacking), each with the manifest entry that lets a board find it
    (`runtime.cpu.LibraryKernels.find_layout_kernel`)."""
    from tilecraft.runtime.model import HostStep

    out, seen = [], set()
    for step in model.steps:
        if isinstance(step, HostStep):
            continue
        program = model.programs[step.program]
        buffers = [("pack", b) for b in program.inputs] + [("unpack", b) for b in program.outputs]
        for direction, buf in buffers:
            if buf.layout is None:
                continue
            record = layout_record(direction, program.config, buf)
            spec, key = layout_kernel(*record), layout_key(record)
            if spec is not None and key not in seen:
                seen.add(key)
                out.append((spec, {"key": key, "symbol": spec.symbol}))
    return out
