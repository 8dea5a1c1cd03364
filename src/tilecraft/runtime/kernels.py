"""The host kernels' ABI, one home for every side that builds or calls them (the compiler's
code generator, the `cpu` and `gpu` devices, a board's prebuilt library): every kernel is
`void f(void **args)`, one pointer per buffer of its signature, in order. `NativeKernel`
checks the inputs against the signature, allocates the outputs and the scratch space, and
calls it. A host step's kernel is found by `host_key` and called in its binding's order
(`call_host`, `HostStepKernels`); an accelerator computation's by `computation_key`, its
arguments from the program's tensors (`kernel_arguments`). numpy and ctypes only."""

from __future__ import annotations

import ctypes
import json
import threading
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tilecraft.errors import DeviceError, KernelError
from tilecraft.ops import host as host_ops
from tilecraft.serial import to_json


@dataclass(frozen=True)
class BufferSig:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    role: str  # "in", "out", "work"

    @classmethod
    def from_dict(cls, d: dict) -> BufferSig:
        return cls(d["name"], tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"]), d["role"])


class NativeKernel:
    """A callable kernel: `kernel(*inputs)` returns its output (or a tuple of outputs).
    `bound`: arrays passed after the signature's buffers on every call (the sizes of one
    shape, where the code at `address` serves several)."""

    def __init__(self, signature: dict, address: int, owner=None, bound: tuple = ()):
        self.symbol = signature["symbol"]
        self.kind = signature["kind"]
        self.buffers = tuple(BufferSig.from_dict(b) for b in signature["buffers"])
        self.inputs = [b for b in self.buffers if b.role == "in"]
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
        self._owner = owner  # keeps the code the address points into alive
        # the scratch space, kept between calls (a thread's own): fresh megabytes every call
        # cost page faults (ResNet-18's 512-channel conv: 3 ms a call against 1 ms kept)
        self._scratch = threading.local()
        self._bound = tuple(np.ascontiguousarray(a) for a in bound)
        self._slots = [(i, b) for i, b in enumerate(self.buffers) if b.role != "work"]

    def _held(self) -> ctypes.Array:
        """This thread's argument array: the scratch space's and the bound arrays' pointers
        set once (the arrays kept with it), the inputs' and outputs' set by each call."""
        held = getattr(self._scratch, "pointers", None)
        if held is None:
            work = {
                i: np.empty(b.shape if b.shape else (1,), b.dtype)
                for i, b in enumerate(self.buffers)
                if b.role == "work"
            }
            held = (ctypes.c_void_p * (len(self.buffers) + len(self._bound)))()
            for i, a in [*work.items(), *enumerate(self._bound, len(self.buffers))]:
                held[i] = a.ctypes.data
            self._scratch.arrays, self._scratch.pointers = work, held
        return held

    def __call__(self, *inputs: np.ndarray):
        if len(inputs) != len(self.inputs):
            names = ", ".join(b.name for b in self.inputs)
            raise DeviceError(
                f"kernel {self.symbol} takes {len(self.inputs)} inputs ({names}), not {len(inputs)}"
            )
        given, pointers = iter(inputs), self._held()
        arrays, outputs = [], []  # held until the call returns
        for i, b in self._slots:
            if b.role == "in":
                a = np.asarray(next(given))
                if a.shape != b.shape or a.dtype != b.dtype:
                    raise DeviceError(
                        f"kernel {self.symbol}: input {b.name!r} is {a.dtype}{list(a.shape)}, "
                        f"expected {b.dtype}{list(b.shape)}"
                    )
                a = np.ascontiguousarray(a)
                arrays.append(a)
            else:
                a = np.empty(b.shape if b.shape else (1,), b.dtype)
                outputs.append(a)
            pointers[i] = a.ctypes.data
        self._fn(ctypes.addressof(pointers))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


# ---- host steps ------------------------------------------------------------------------------
def host_key(op, shapes) -> str:
    """How a host step's kernel is found: its operator record and its input shapes."""
    return json.dumps([to_json(op), [list(map(int, s)) for s in shapes]], sort_keys=True)


def call_host(kernel, op, bind: list, inputs: list, constants: dict) -> np.ndarray:
    """Call a host step's `kernel` with its arguments in the kernel's order: `bind` names, per
    kernel input, the step's input position or a constant's name (floats go in as float32)."""
    args = []
    for source in bind:
        if isinstance(source, int):
            value = inputs[source]
            args.append(
                np.asarray(value, np.float32) if isinstance(op, host_ops.Quantize) else value
            )
        else:
            args.append(constants[source])
    return kernel(*args)


class HostStepKernels:
    """The graph executor's `HostKernels` on compiled kernels: each host step's kernel found
    once per operator and input shapes (`find`, by `host_key`), then called in its binding's
    order (`call_host`). Flatten is a view and needs none. Subclasses say where kernels come
    from: JIT-compiled here (`compiler.llvm.host.LlvmKernels`), or a board's prebuilt library
    (`runtime.cpu.LibraryKernels`). An accelerator step's input or output whose layout has a
    kernel (`packer`, `unpacker`: `LAYOUT_KERNELS`) is packed or unpacked by it too; every
    other one by numpy."""

    name = "kernels"

    def __init__(self) -> None:
        self._kernels: dict[str, tuple] = {}
        self._found: dict[tuple, tuple] = {}  # (op, input shapes): what `find` found
        self._layouts: dict = {}  # layout_record(...) (or its key): a kernel or None

    def find(self, op, shapes: list[tuple[int, ...]], key: str) -> tuple:
        """(kernel, binding) for `op` on inputs of `shapes`."""
        raise NotImplementedError

    def find_layout_kernel(self, record: tuple, key: str):
        """The kernel for `record` (`layout_record`: a direction, a layout, its blocks and
        element type) found by `key` (`layout_key`), or None where numpy does it."""
        return None

    def packer(self, config, buf):
        """The kernel that packs input buffer `buf` of a program for `config`, or None
        (numpy packs it: `runtime.layout.pack_inputs`)."""
        return self._layout_kernel("pack", config, buf)

    def unpacker(self, config, buf):
        """The kernel that unpacks output buffer `buf`, or None (numpy unpacks it)."""
        return self._layout_kernel("unpack", config, buf)

    def _layout_kernel(self, direction: str, config, buf):
        if buf.layout is None or buf.layout.kind not in LAYOUT_KERNELS[direction]:
            return None
        record = layout_record(direction, config, buf)
        held = record if hashable(record) else layout_key(record)  # a layout given lists
        if held not in self._layouts:
            self._layouts[held] = self.find_layout_kernel(record, layout_key(record))
        return self._layouts[held]

    def run(self, op, inputs, constants):
        if isinstance(op, host_ops.Flatten):
            return host_ops.run(op, inputs, constants)
        shapes = [tuple(np.shape(x)) for x in inputs]
        record = (op, tuple(shapes))  # found again by the record itself, not its JSON
        found = self._found.get(record) if hashable(record) else None
        if found is None:
            key = host_key(op, shapes)
            found = self._kernels.get(key)
            if found is None:
                found = self._kernels[key] = self.find(op, shapes, key)
            if hashable(record):
                self._found[record] = found
        kernel, bind = found
        return call_host(kernel, op, bind, inputs, constants)


# the layouts whose packing (inputs) and unpacking (outputs) can have a generated kernel
LAYOUT_KERNELS = {"pack": ("im2col", "activation"), "unpack": ("activation",)}


def layout_record(direction: str, config, buf) -> tuple:
    """What a buffer's layout kernel depends on: the direction, the layout record, the
    batch and lanes of its blocks (the stored array's last two sizes) and its element type."""
    batch, lanes = buf.layout.stored_shape(config)[-2:]
    return (direction, buf.layout, int(batch), int(lanes), np.dtype(buf.dtype).name)


def layout_key(record: tuple) -> str:
    """How a layout kernel is found (a board's library: its manifest's `layouts` table)."""
    direction, layout, batch, lanes, dtype = record
    found = {"direction": direction, "layout": to_json(layout), "batch": batch, "lanes": lanes}
    return json.dumps({**found, "dtype": dtype}, sort_keys=True)


def hashable(record) -> bool:
    """Whether `record` can key a dict: a frozen record is found again by itself in well
    under a microsecond, where its JSON key (`host_key`, `computation_key`) takes tens of
    microseconds, every call of every step."""
    try:
        hash(record)
    except TypeError:
        return False
    return True


# ---- accelerator computations ----------------------------------------------------------------
def computation_key(comp) -> str:
    """How a computation's kernel is found: the computation record (shapes included)."""
    return json.dumps(to_json(comp), sort_keys=True)


def kernel_arguments(comp, names: list[str], tensors: dict) -> list:
    """A computation kernel's inputs from the program's tensors, by name (`kernel_argument`),
    the reshape of a flatten the compiler left out undone."""
    args = [kernel_argument(comp, name, tensors) for name in names]
    return [unflattened(comp, args[0]), *args[1:]] if args else args


def kernel_argument(comp, name: str, tensors: dict) -> np.ndarray:
    """One input of a computation's kernel from the program's tensors: a per-tensor multiplier
    is the computation's own value, and so is an epilogue's offset; epilogue vectors go in as
    int32, a FLOAT32 epilogue's scales as float32."""
    if name == "multiplier" and comp.multiplier is not None:
        return np.array([comp.multiplier], np.int32)
    if name == "offset":  # the epilogue's offset, an input of a kernel shared by layers
        return np.array([comp.epilogue.offset], np.int32)
    if name not in tensors:
        raise KernelError(f"{comp.op.describe()} needs tensor {name!r}")
    value = np.asarray(tensors[name])
    if name not in TENSOR_OPERANDS:
        floats = name == "multiplier" and _float32_scales(comp)
        value = value.astype(np.float32 if floats else np.int32, copy=False)
    return value


TENSOR_OPERANDS = ("input", "weight", "residual")  # a computation's operands not epilogue vectors


def own_argument(comp, name: str) -> bool:
    """Whether the kernel input `name` is the computation's own value (`kernel_argument`),
    not a tensor of the program."""
    return name == "offset" or (name == "multiplier" and comp.multiplier is not None)


def unflattened(comp, x: np.ndarray) -> np.ndarray:
    """A computation's input reshaped to the operator's input shape where it holds the same
    values in another shape (a flatten the compiler left out)."""
    shape = getattr(comp.op, "input_shape", None)
    if shape is not None and x.shape != shape and x.size == np.prod(shape):
        return x.reshape(shape)
    return x


def bind_arguments(comp, kernel, names: list[str], fixed: dict, weight=None) -> tuple:
    """`kernel` made ready to compute `comp` on every run of one program: the arguments that
    `fixed` (the program's constants, by buffer name) or `comp` itself give converted once
    (`kernel_argument`; a weight through `weight`, which gives the arguments it becomes: a
    packing). Returns the buffers each run passes, in order, and the call that takes them and
    returns the kernel's result: `kernel(*kernel_arguments(...))`'s, without its per-run
    lookups and conversions."""
    weight = weight or (lambda value: [value])
    given = [n for n in names if n not in fixed and not own_argument(comp, n)]
    plan = []  # per kernel input: ("fixed", its arguments) or ("given", its name)
    for name in names:
        if name in given:
            plan.append(("given", name))
            continue
        value = kernel_argument(comp, name, fixed)
        plan.append(("fixed", weight(value) if name == "weight" else [value]))
    first = names[0] if names else None

    def call(*values):
        args, run = [], iter(values)
        for how, what in plan:
            if how == "fixed":
                args += what
                continue
            value = kernel_argument(comp, what, {what: next(run)})
            if what == first:
                value = unflattened(comp, value)
            args += weight(value) if what == "weight" else [value]
        return kernel(*args)

    return given, call


def _float32_scales(comp) -> bool:
    ep = getattr(comp, "epilogue", None)
    return ep is not None and ep.on_unit


class ComputeKernels(Protocol):
    """Runs one accelerator computation on host kernels: `outputs` as `ops.reference.outputs`
    (the result tensor by its program name), bit for bit. A backend may also have `bind(comp,
    fixed)` (`bind_arguments`: the buffers each run passes, and a call returning the result
    tensor); the cpu device then runs a chain's layers through it, not through `outputs`, so
    a backend that has both computes the same in each."""

    def outputs(self, comp, tensors: dict) -> dict[str, np.ndarray]: ...
