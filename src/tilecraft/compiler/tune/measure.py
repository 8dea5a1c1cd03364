"""Measurers: how many cycles a schedule takes, behind one interface. `CycleModel` builds the
layer's program with the schedule and runs the cycle model (the default, cheap and exact for
the model); `Rtl` runs the program on the generated Verilog; `Board` on the accelerator in a
PYNQ overlay (the `pynq` device: its CYCLES register). A measurement that fails or times out is
a result with its error, never an exception out of the tuner."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tilecraft.errors import TilecraftError


@dataclass(frozen=True)
class Result:
    cycles: int | None
    error: str | None
    seconds: float
    note: str = ""  # how it was measured, when that matters (retried elsewhere)

    @property
    def ok(self) -> bool:
        return self.cycles is not None


class Measurer(Protocol):
    name: str

    def measure(self, task, schedule) -> Result: ...


def unit_params(task) -> dict:
    """Compile-time parameters a layer on the requantization unit must have (its parameter
    rows are built from them); none for another. Their values do not change a cycle."""
    ep = task.epilogue
    if not ep.on_unit:
        return {}
    from tilecraft.compiler.operator.params import random_scales

    rng = np.random.default_rng(0)
    channels = task.op.channels
    out = {"multiplier": random_scales(rng, channels)}
    if ep.bias:
        out["bias"] = np.zeros(channels, np.int32)
    return out


def _timed(run) -> Result:
    """`run()`'s cycles as a result, its error (a TilecraftError) as a failed one."""
    start = time.perf_counter()
    try:
        cycles = run()
    except TilecraftError as exc:  # e.g. more micro-op kernels than fit
        return Result(None, f"{type(exc).__name__}: {exc}", time.perf_counter() - start)
    return Result(int(cycles), None, time.perf_counter() - start)


class CycleModel:
    """The cycle model (the `sim` device's, `runtime.device.cycle_model`, or another `Timer`)
    on the program the schedule builds."""

    name = "cycle-model"

    def __init__(self, timer=None):
        self.timer = timer

    def measure(self, task, schedule) -> Result:
        from tilecraft.compiler.operator.pipeline import compile_operator
        from tilecraft.runtime.device import cycle_model

        def run():
            program = compile_operator(
                task.config,
                task.op,
                task.epilogue,
                schedule=schedule,
                fold=task.mapped.folded,
                check=False,
                **unit_params(task),
            ).program
            return (self.timer or cycle_model())(program)

        return _timed(run)


class Rtl:
    """The generated Verilog under cocotb + Verilator (the `rtl` device), random inputs."""

    name = "rtl"

    def measure(self, task, schedule) -> Result:
        import numpy as np

        from tilecraft.compiler.operator.pipeline import compile_operator
        from tilecraft.runtime import get_device
        from tilecraft.runtime.layout import pack_inputs, random_inputs

        def run():
            program = compile_operator(
                task.config,
                task.op,
                task.epilogue,
                schedule=schedule,
                fold=task.mapped.folded,
                **unit_params(task),
            ).program
            x = pack_inputs(program, random_inputs(program, np.random.default_rng(0)))
            return get_device("rtl").run(program, x).report.cycles

        return _timed(run)


class Board:
    """The accelerator in a PYNQ overlay, on the board this runs on: the overlay's `.bit` is
    `bitfile` or, on a fleet's worker, its TILECRAFT_BITFILE. A run longer than `timeout_s` is
    a failed measurement (the device dumps its registers and resets itself)."""

    name = "pynq"

    def __init__(self, bitfile: str | None = None, timeout_s: float = 10.0):
        import os

        self.bitfile = bitfile or os.environ.get("TILECRAFT_BITFILE")
        if not self.bitfile:
            raise TilecraftError(
                "the pynq measurer needs the overlay's bitstream: --bitfile FILE.bit, or "
                "TILECRAFT_BITFILE on the board's worker"
            )
        self.timeout_s = timeout_s
        self._device = None

    def measure(self, task, schedule) -> Result:
        import numpy as np

        from tilecraft.compiler.operator.pipeline import compile_operator
        from tilecraft.runtime import get_device
        from tilecraft.runtime.layout import pack_inputs, random_inputs

        def run():
            if self._device is None:
                self._device = get_device(
                    "pynq", bitfile=self.bitfile, config=task.config, timeout_s=self.timeout_s
                )
            program = compile_operator(
                task.config,
                task.op,
                task.epilogue,
                schedule=schedule,
                fold=task.mapped.folded,
                **unit_params(task),
            ).program
            x = pack_inputs(program, random_inputs(program, np.random.default_rng(0)))
            return self._device.run(program, x).report.cycles

        return _timed(run)


MEASURERS = {"sim": CycleModel, "rtl": Rtl, "pynq": Board}


def measurer(name: str, **options) -> Measurer:
    """A measurer by name: sim (the cycle model), rtl or pynq (`options`: Board's)."""
    if name not in MEASURERS:
        raise TilecraftError(f"unknown measurer {name!r}; valid: {', '.join(MEASURERS)}")
    return MEASURERS[name](**options)
