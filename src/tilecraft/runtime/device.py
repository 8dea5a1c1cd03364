"""One Device API over every backend: run a Program with named numpy inputs, get named outputs
and a report. Backends are found by name (`get_device("sim")` is the behavioral simulator,
`"rtl"` the generated Verilog, `"cpu"` the host's generated kernels, `"pynq"` the accelerator
in a PYNQ overlay); `register_device` adds one."""

from __future__ import annotations

import importlib
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
    """Refuse a program built for an architecturally different config."""
    program.check_config(config)


def check_inputs(program: Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs by name, converted to their buffers' dtypes; clear errors for anything else."""
    check_names(program.name, [b.name for b in program.inputs], inputs)
    return {b.name: check_tensor(b.name, inputs[b.name], b.shape, b.dtype) for b in program.inputs}


# Backends by name: "module:attribute" of a factory taking the device's options, imported on
# first use (so a board needs neither the simulators nor the compiler), plus any registered.
_BUILTIN = {
    "sim": "tilecraft.sim.device:SimDevice",
    "rtl": "tilecraft.sim.rtl.device:RtlDevice",
    "cpu": "tilecraft.runtime.cpu:cpu_device",
    "gpu": "tilecraft.runtime.gpu:gpu_device",
    "pynq": "tilecraft.runtime.pynq:pynq_device",
}
_REGISTERED: dict[str, Callable[..., Device]] = {}


def register_device(name: str, factory: Callable[..., Device]) -> None:
    """Make `get_device(name, **options)` call `factory(**options)` (a new backend)."""
    if not name or not isinstance(name, str):
        raise DeviceError(f"a device name must be a non-empty string, not {name!r}")
    _REGISTERED[name] = factory


def get_device(name: str = "sim", **options) -> Device:
    """A device by backend name (available: see `device_names()`)."""
    factory = _REGISTERED.get(name)
    if factory is None:
        if name not in _BUILTIN:
            raise DeviceError(f"unknown device {name!r}; available: {', '.join(device_names())}")
        module, attr = _BUILTIN[name].split(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            raise DeviceError(
                f"the {name!r} device cannot be loaded here: {exc} (is its extra installed?)"
            ) from None
    return factory(**options)


def device_names() -> list[str]:
    return sorted(set(_BUILTIN) | set(_REGISTERED))
