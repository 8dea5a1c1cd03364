"""Host kernels on the machine that runs the model, and the `cpu` device built on them.

Prebuilt kernels (a board's ARM core, or this machine) are a shared object and its manifest
(`compiler.llvm.library`), loaded with ctypes; the target is checked twice before anything
runs, from the manifest and from the object's own ELF header. `CpuDevice` runs what the
accelerator would (each program's computations, bit-exact with `ops.reference`) on a
`ComputeKernels` backend: JIT-compiled here (the `jit` kernel compiler the compiler registers,
`runtime.device.KERNEL_COMPILERS`) or from a library on a board (`LibraryCompute`). numpy
only."""

from __future__ import annotations

import ctypes
import json
import platform
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from tilecraft.errors import DeviceError, KernelError
from tilecraft.ops.reference import RESULT
from tilecraft.runtime.check import chain_outputs, logical_constants
from tilecraft.runtime.device import RunResult, check_inputs
from tilecraft.runtime.kernels import (
    ComputeKernels,
    HostStepKernels,
    NativeKernel,
    bind_arguments,
    computation_key,
    hashable,
    kernel_arguments,
)
from tilecraft.runtime.layout import pack, unpack
from tilecraft.runtime.program import Program

MANIFEST_FORMAT = "tilecraft-kernels-1"
_MACHINES = {40: "armv7", 183: "aarch64", 62: "x86_64"}  # ELF e_machine
_UNAMES = {
    "armv7l": "armv7",
    "armv7": "armv7",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "x86_64": "x86_64",
    "amd64": "x86_64",
}


def this_machine() -> str:
    """This machine's kernel target name (armv7, aarch64, x86_64), from `uname -m`."""
    m = platform.machine().lower()
    return _UNAMES.get(m, m)


def elf_target(data: bytes) -> str:
    """The target an ELF object is for, read from its header; a KernelError if it is not a
    little-endian ELF file of a known machine."""
    if len(data) < 20 or data[:4] != b"\x7fELF":
        raise KernelError("not an ELF shared object")
    machine = int.from_bytes(data[18:20], "little")
    bits = {1: 32, 2: 64}.get(data[4])
    name = _MACHINES.get(machine)
    if name is None or bits != (32 if name == "armv7" else 64):
        raise KernelError(f"an ELF object for machine {machine} ({bits}-bit) is no kernel target")
    return name


class KernelLibrary:
    """The kernels of one shared object, by symbol: `library[symbol](*inputs)`."""

    def __init__(self, manifest: str | Path, machine: str | None = None):
        path = Path(manifest)
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise KernelError(f"cannot read kernel manifest {str(path)!r}: {exc}") from None
        if not isinstance(meta, dict) or meta.get("format") != MANIFEST_FORMAT:
            raise KernelError(
                f"{str(path)!r} is not a kernel manifest of format {MANIFEST_FORMAT!r}"
            )
        here = machine or this_machine()
        if meta.get("target") != here:
            raise KernelError(
                f"kernels built for {meta.get('triple')} ({meta.get('target')}) "
                f"cannot run on this {here} machine"
            )
        so = path.parent / meta["shared_object"]
        try:
            built_for = elf_target(so.read_bytes())
        except OSError as exc:
            raise KernelError(f"cannot read {str(so)!r}: {exc.strerror or exc}") from None
        if built_for != meta["target"]:
            raise KernelError(
                f"{so.name} is a {built_for} object; its manifest says "
                f"{meta['target']} ({meta['triple']})"
            )
        self.target, self.triple = meta["target"], meta["triple"]
        self._dll = ctypes.CDLL(str(so.resolve()))
        self.host = {e["key"]: e for e in meta.get("host", [])}
        self.compute = {e["key"]: e for e in meta.get("compute", [])}
        self.layouts = {e["key"]: e for e in meta.get("layouts", [])}  # none in older ones
        self.kernels = {}
        for sig in meta["kernels"]:
            address = ctypes.cast(getattr(self._dll, sig["symbol"]), ctypes.c_void_p).value
            self.kernels[sig["symbol"]] = NativeKernel(sig, address, owner=self._dll)

    def __getitem__(self, symbol: str) -> NativeKernel:
        try:
            return self.kernels[symbol]
        except KeyError:
            raise KernelError(
                f"no kernel {symbol!r} in this library ({len(self.kernels)} kernels)"
            ) from None


def load_library(manifest: str | Path) -> KernelLibrary:
    return KernelLibrary(manifest)


class LibraryKernels(HostStepKernels):
    """`HostKernels` from a prebuilt library (a board): each host step's kernel is found by
    its operator and input shapes (`host_key`) in the manifest's `host` table. A step with no
    kernel there is an error naming it. A layout's packing or unpacking is found in its
    `layouts` table (`layout_key`)."""

    name = "library"

    def __init__(self, library: KernelLibrary):
        super().__init__()
        self.library = library
        self.table = library.host

    def find(self, op, shapes, key):
        entry = self.table.get(key)
        if entry is None:
            raise KernelError(
                f"the kernel library has no kernel for {type(op).__name__} on "
                f"inputs {[list(s) for s in shapes]} (rebuild it for this "
                f"model)"
            )
        return self.library[entry["symbol"]], entry["bind"]

    def find_layout_kernel(self, record, key):
        """The library's kernel for this packing or unpacking; None (numpy does it, the same
        bytes) in a library built before layouts had kernels."""
        entry = self.library.layouts.get(key)
        return None if entry is None else self.library[entry["symbol"]]


# ---- accelerator computations on the CPU ----------------------------------------------------
class LibraryCompute:
    """`ComputeKernels` from a prebuilt library: each computation's kernel found in the
    manifest's `compute` table."""

    def __init__(self, library: KernelLibrary):
        self.library = library
        self._found: dict = {}  # each computation's (kernel, operands), by the record itself

    def outputs(self, comp, tensors):
        kernel, operands = self._kernel(comp)
        return {RESULT[type(comp.op)]: kernel(*kernel_arguments(comp, operands, tensors))}

    def bind(self, comp, fixed: dict) -> tuple:
        """`outputs` made ready for every run of one program (`bind_arguments`): the buffers
        each run passes and the call that returns the result tensor."""
        kernel, operands = self._kernel(comp)
        return bind_arguments(comp, kernel, operands, fixed)

    def _kernel(self, comp) -> tuple:
        """(kernel, its operands) for `comp`, from the manifest's `compute` table."""
        found = self._found.get(comp) if hashable(comp) else None
        if found is None:
            entry = self.library.compute.get(computation_key(comp))
            if entry is None:
                raise KernelError(
                    f"the kernel library has no kernel for {comp.op.describe()} "
                    f"(rebuild it for this model)"
                )
            found = (self.library[entry["symbol"]], entry["operands"])
            if hashable(comp):
                self._found[comp] = found
        return found


class StagedCompute:
    """A `ComputeKernels` backend that runs a computation of several stages (a conv2d and its
    max pool: `Computation.stages`) stage by stage on `inner`, each taking the one before's
    result as its input."""

    def __init__(self, inner: ComputeKernels):
        self.inner = inner
        if hasattr(inner, "bind"):
            self.bind = self._bind
        if hasattr(inner, "prepare"):
            self.prepare = self._prepare

    def outputs(self, comp, tensors):
        result = None
        for k, stage in enumerate(comp.stages()):
            given = tensors if k == 0 else {"input": result}
            result = self.inner.outputs(stage, given)[RESULT[type(stage.op)]]
        return {RESULT[type(comp.op)]: result}

    def _bind(self, comp, fixed: dict) -> tuple:
        first, *rest = comp.stages()
        given, call = self.inner.bind(first, fixed)
        for stage in rest:
            _, then = self.inner.bind(stage, {})
            call = _then(call, then)
        return given, call

    def _prepare(self, computations) -> None:
        self.inner.prepare([s for c in computations for s in c.stages()])


def _then(first, then):
    return lambda *args: then(first(*args))


@dataclass
class CpuReport:
    seconds: float
    cycles: None = None  # no accelerator cycles: the graph executor reports host time


class CpuDevice:
    """The `cpu` device: runs a program's computation (or a chained program's layers) on host
    kernels, with the accelerator devices' `run` API (packed buffers in and out) and
    `run_layers` for the graph executor (logical tensors)."""

    def __init__(self, compute: ComputeKernels, name: str = "cpu"):
        self.compute = StagedCompute(compute)
        self.name = name  # "gpu" for the same device on GPU kernels
        # each program's constants unpacked once (ResNet-18's weights: 11 MB, ~10 ms a run),
        # by the program's id while it lives (weakly held: a dropped program frees them)
        self._constants: dict[int, tuple[weakref.ref, dict]] = {}
        self._prepared: dict[int, weakref.ref] = {}  # the models whose kernels are ready
        self._plans: dict[int, tuple] = {}  # each program's layers made ready (`_plan`)

    def run(self, program: Program, inputs: dict, *, trace: bool = False) -> RunResult:
        if program.computation is None:
            raise DeviceError(
                f"program {program.name!r} does not say what it computes; the "
                f"cpu device runs a program by its computation"
            )
        start = time.perf_counter()
        packed = check_inputs(program, inputs)
        logical = {}
        for name, value in packed.items():
            layout = program.buffer(name).layout
            if layout is not None and layout.kind == "im2col":
                raise DeviceError(
                    f"the cpu device cannot take input {name!r} of program "
                    f"{program.name!r} packed as im2col (its taps overlap); run "
                    f"it through the graph executor, which passes tensors as "
                    f"they are"
                )
            logical[name] = unpack(program.config, layout, value) if layout else value
        outs = self.run_layers(program, (), logical)
        result = {}
        for b in program.outputs:
            result[b.name] = (
                pack(program.config, b.layout, outs[b.name]) if b.layout else outs[b.name]
            )
        return RunResult(result, CpuReport(time.perf_counter() - start))

    def prepare(self, model) -> None:
        """Ready the kernels of `model`'s accelerator steps before its first run, where the
        backend can build them all at once (`prepare`); once per model."""
        prepare = getattr(self.compute, "prepare", None)
        if prepare is None or _alive(self._prepared, model):
            return
        prepare([c for c in model.computations() if c is not None])
        _hold(self._prepared, model, None)

    def run_layers(self, program: Program, layers, logical: dict, every: bool = False) -> dict:
        """The outputs (logical) of `program` from logical inputs: its `layers` in order
        (`runtime.model.ChainLayer`), or its own computation when there are none."""
        constants = _alive(self._constants, program)
        if constants is None:
            constants = logical_constants(program)
            for name, value in constants.items():
                if value is program.constants[name]:  # the program's own: a read-only view
                    value = constants[name] = value.view()
                elif value.base is not None:  # unpacked here, a view of a scratch array: ours
                    value = constants[name] = value.copy()
                value.setflags(write=False)  # shared by every run: no kernel may write them
            _hold(self._constants, program, constants)
        bind = getattr(self.compute, "bind", None)
        if bind is None or not layers:
            return chain_outputs(
                program, layers, logical, self.compute.outputs, every, constants=constants
            )
        values = dict(logical)
        for layer, needs, call, output in self._plan(program, layers, constants, bind):
            missing = [t for t in needs if t not in values]
            if missing:
                raise KernelError(f"{layer.computation.op.describe()} needs tensor {missing[0]!r}")
            values[output] = call(*[values[t] for t in needs])
        if every:
            inner = {b.name for b in program.buffers if b.role.value in ("output", "scratch")}
            return {k: v for k, v in values.items() if k in inner}
        return {b.name: values[b.name] for b in program.outputs}

    def _plan(self, program: Program, layers, constants: dict, bind) -> list[tuple]:
        """`layers` made ready for every run (the backend's `bind`: each kernel found, its
        constant arguments converted and packed once), kept while the program lives: per
        layer, the tensors each run passes (by their names in the program) and where the
        result goes. The chain's result is `chain_outputs`'s, with its per-run lookups once."""
        held = _alive(self._plans, program)
        if held is not None and held[0] is layers:
            return held[1]
        plan = []
        for layer in layers:
            comp = layer.computation
            result = RESULT[type(comp.op)]
            fixed = {b.buffer: constants[b.tensor] for b in layer.buffers if b.tensor in constants}
            given, call = bind(comp, fixed)
            tensors = {b.buffer: b.tensor for b in layer.buffers}
            plan.append((layer, [tensors.get(g, g) for g in given], call, tensors[result]))
        _hold(self._plans, program, (layers, plan))
        return plan


def _alive(table: dict, key_object):
    """What `table` keeps for `key_object` (by id, while that object lives), else None; True
    for an entry that keeps nothing but the object's being there."""
    held = table.get(id(key_object))
    if held is None or held[0]() is not key_object:
        return None
    return True if held[1] is None else held[1]


def _hold(table: dict, key_object, value) -> None:
    """Keep `value` for `key_object` while it lives (dropped with it)."""
    key = id(key_object)
    table[key] = (weakref.ref(key_object), value)
    weakref.finalize(key_object, table.pop, key, None)


def cpu_device(library: str | Path | None = None) -> CpuDevice:
    """`get_device("cpu")`: kernels from a prebuilt `library` (a manifest path: a board), or
    JIT-compiled here by the registered `jit` kernel compiler (the compiler's llvmlite code
    generator)."""
    from tilecraft.runtime.device import KERNEL_COMPILERS, load_plugin

    if library is not None:
        return CpuDevice(LibraryCompute(load_library(library)))
    try:
        return CpuDevice(load_plugin(KERNEL_COMPILERS, "jit", "kernel compiler")())
    except (DeviceError, KernelError) as exc:
        raise DeviceError(
            f"the cpu device compiles its kernels with llvmlite here ({exc}); install "
            f"tilecraft[llvm], or on a board give library=<kernels.json> built for it"
        ) from None
