"""One Device API over every backend: run a Program with named numpy inputs, get named outputs
and a report. Backends are found by name (`get_device("sim")` is the behavioral simulator,
`"rtl"` the generated Verilog, `"cpu"` the host's generated kernels, `"gpu"` the same on PTX
kernels, `"pynq"` the accelerator in a PYNQ overlay); `register_device` adds one.

Each backend registers itself, as a `tilecraft.devices` entry point in pyproject.toml
(`name = "module:factory"`), loaded on first use: the runtime names no backend's package, so
a board needs neither the simulators nor the compiler, and nothing below imports what is
above it. The same way, the `cpu` and `gpu` devices find the code that compiles their kernels
(`tilecraft.kernel_compilers`: `jit`, `ptx`). A device that counts cycles without computing
(the simulator's cycle model) has `cycles(program)`: a `Timer`, what the compiler measures
schedule candidates with (`cycle_model`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tilecraft.errors import DeviceError
from tilecraft.hw.config import HwConfig
from tilecraft.runtime.program import Program
from tilecraft.runtime.tensors import check_names, check_tensor


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    report: Any  # backend-specific; the sim returns a tilecraft.sim.SimReport


class Device(Protocol):
    name: str

    def run(
        self, program: Program, inputs: dict[str, np.ndarray], *, trace: bool = False
    ) -> RunResult: ...


def check_program(program: Program, config: HwConfig) -> None:
    """Refuse a program built for an architecturally different config (or not a Program)."""
    require_program(program).check_config(config)


def require_program(program) -> Program:
    """`program` if it is a Program; a DeviceError otherwise (a path: Program.load reads one)."""
    if not isinstance(program, Program):
        raise DeviceError(
            f"a device runs a Program (Program.load(PATH) reads a .tcp file), not "
            f"{type(program).__name__} {program!r}"
        )
    return program


def check_inputs(program: Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs by name, converted to their buffers' dtypes; clear errors for anything else."""
    check_names(program.name, [b.name for b in program.inputs], inputs)
    return {b.name: check_tensor(b.name, inputs[b.name], b.shape, b.dtype) for b in program.inputs}


Timer = Callable[[Program], int]  # a program's cycles (timing never depends on data)

DEVICES = "tilecraft.devices"  # entry-point groups: the backends, by name
KERNEL_COMPILERS = "tilecraft.kernel_compilers"  # what the cpu and gpu devices compile with
_REGISTERED: dict[str, Callable[..., Device]] = {}


@functools.cache
def plugins(group: str) -> dict[str, Any]:
    """The entry points of `group` (installed packages' registrations), by name."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=group)}


def load_plugin(group: str, name: str, what: str):
    """The object `name` registers in `group`; a DeviceError naming what is available, or why
    it cannot load here (a missing extra)."""
    found = plugins(group).get(name)
    if found is None:
        known = ", ".join(sorted(plugins(group))) or "none (is tilecraft installed?)"
        raise DeviceError(f"unknown {what} {name!r}; available: {known}")
    try:
        return found.load()
    except ImportError as exc:
        raise DeviceError(
            f"the {name!r} {what} cannot be loaded here: {exc} (is its extra installed?)"
        ) from None


def register_device(name: str, factory: Callable[..., Device]) -> None:
    """Make `get_device(name, **options)` call `factory(**options)` (a new backend)."""
    if not name or not isinstance(name, str):
        raise DeviceError(f"a device name must be a non-empty string, not {name!r}")
    _REGISTERED[name] = factory


def get_device(name: str = "sim", **options) -> Device:
    """A device by backend name (available: see `device_names()`)."""
    factory = _REGISTERED.get(name)
    if factory is None:
        if name not in plugins(DEVICES):
            raise DeviceError(f"unknown device {name!r}; available: {', '.join(device_names())}")
        factory = load_plugin(DEVICES, name, "device")
    return factory(**options)


def cycle_model() -> Timer:
    """The cycle model (the `sim` device's `cycles`): what a schedule search measures with
    unless it is given another `Timer`."""
    return get_device("sim").cycles


def device_names() -> list[str]:
    return sorted(set(plugins(DEVICES)) | set(_REGISTERED))
