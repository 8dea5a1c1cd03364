"""One Device API over every backend: run a Program with named numpy inputs, get named outputs
and a report. Backends are found by name (`get_device("sim")` is the behavioral simulator,
`"rtl"` the generated Verilog); `register_device` adds one."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tilecraft.errors import DeviceError
from tilecraft.hw.config import HwConfig
from tilecraft.runtime.program import Program


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
    expected = {b.name: b for b in program.inputs}
    missing = sorted(set(expected) - set(inputs))
    unknown = sorted(set(inputs) - set(expected))
    if missing or unknown:
        raise DeviceError(
            f"program {program.name!r} takes inputs {sorted(expected)}; "
            + (f"missing {missing}" if missing else "")
            + ("; " if missing and unknown else "")
            + (f"unknown {unknown}" if unknown else "")
        )
    out = {}
    for name, value in inputs.items():
        b = expected[name]
        arr = np.asarray(value)
        if arr.shape != b.shape:
            raise DeviceError(
                f"input {name!r} has shape {arr.shape}; the program expects {b.shape}"
            )
        dtype = np.dtype(b.dtype)
        if arr.dtype != dtype:
            info = np.iinfo(dtype) if dtype.kind in "iu" else None
            fits = (
                arr.dtype.kind in "iub"
                and info is not None
                and (arr.size == 0 or (arr.min() >= info.min and arr.max() <= info.max))
            )
            if not fits:
                raise DeviceError(
                    f"input {name!r} is {arr.dtype}; the program expects {dtype} and its values "
                    f"do not all fit"
                )
            arr = arr.astype(dtype)
        out[name] = arr
    return out


# Backends by name: "module:attribute" of a factory taking the device's options, imported on
# first use (so a board needs neither the simulators nor the compiler), plus any registered.
_BUILTIN = {
    "sim": "tilecraft.sim.device:SimDevice",
    "rtl": "tilecraft.sim.rtl.device:RtlDevice",
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
