"""One Device API over every backend: run a Program with named numpy inputs, get named outputs
and a report. Backends register by name; `get_device("sim")` is the behavioral simulator."""

from __future__ import annotations

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


class SimDevice:
    """The behavioral simulator as a device. `config=None` takes each program's own config."""

    name = "sim"

    def __init__(self, config: HwConfig | None = None, timing=None, check_races: bool = True):
        self.config = config
        self.timing = timing
        self.check_races = check_races

    def run(
        self, program: Program, inputs: dict[str, np.ndarray], *, trace: bool = False
    ) -> RunResult:
        from tilecraft.sim import simulate

        config = self.config or program.config
        check_program(program, config)
        dram = program.dram_image(check_inputs(program, inputs))
        report = simulate(
            config,
            dram,
            program.insn_offset,
            len(program.insns),
            timing=self.timing,
            trace=trace,
            check_races=self.check_races,
        )
        outputs = {b.name: program.read(dram, b.name) for b in program.outputs}
        return RunResult(outputs, report)


def _rtl_device(**options):
    """The generated Verilog under cocotb + Verilator (needs the `rtl` extra)."""
    from tilecraft.sim.rtl.device import RtlDevice

    return RtlDevice(**options)


_BACKENDS = {"sim": SimDevice, "rtl": _rtl_device}


def get_device(name: str = "sim", **options) -> Device:
    """A device by backend name (available: see `device_names()`)."""
    if name not in _BACKENDS:
        raise DeviceError(f"unknown device {name!r}; available: {', '.join(device_names())}")
    return _BACKENDS[name](**options)


def device_names() -> list[str]:
    return sorted(_BACKENDS)
