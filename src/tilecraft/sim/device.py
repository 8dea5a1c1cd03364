"""The behavioral simulator as a runtime device (`get_device("sim")`)."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np

from tilecraft.errors import DeviceError
from tilecraft.hw.config import HwConfig, require_config
from tilecraft.hw.timing import Timing
from tilecraft.runtime.device import RunResult, check_inputs, check_program, require_program
from tilecraft.runtime.program import Program
from tilecraft.sim.report import SimReport
from tilecraft.sim.simulator import replay, run_image

REPLAY_STEPS_KEPT = 100_000  # instructions (decoded, about 1 kB each) a device keeps to replay


class SimDevice:
    """Runs programs on the simulator. `config=None` takes each program's own config (a board's
    config runs the same program with that board's timing).

    A program's first run is timed: the cycle model, the race check and the semantics together.
    Neither its cycles nor the order its instructions ran in depend on data, so a later run of
    the same program (by digest) on this device replays that order on the semantics alone and
    reports the first run's figures: the same outputs on the new data, without the cycle model
    (a dataset through the simulator pays for the model once). A traced run is always timed.
    The device keeps the latest programs' runs up to `REPLAY_STEPS_KEPT` instructions (and
    the latest program's whatever its size)."""

    name = "sim"

    def __init__(
        self,
        config: HwConfig | None = None,
        timing: Timing | None = None,
        check_races: bool = True,
    ):
        self.config = None if config is None else require_config(config, "the sim device's config")
        if timing is not None and not isinstance(timing, Timing):
            raise DeviceError(f"timing must be a tilecraft.hw.timing.Timing, not {timing!r}")
        self.timing = timing
        self.check_races = check_races
        self._timed: OrderedDict[tuple, tuple[list, SimReport, list]] = OrderedDict()

    def run(
        self, program: Program, inputs: dict[str, np.ndarray], *, trace: bool = False
    ) -> RunResult:
        config = self.config or require_program(program).config
        check_program(program, config)
        dram = program.dram_image(check_inputs(program, inputs))
        key = (program.digest, config.digest, self.timing, self.check_races)
        timed = None if trace else self._timed.get(key)
        if timed is not None:
            self._timed.move_to_end(key)
            report = dataclasses.replace(timed[1])
            replay(config, dram, timed[0], timed[2])
        else:
            ran: list[tuple[int, dict]] = []
            report, machine = run_image(
                config,
                dram,
                program.insn_offset,
                len(program.insns),
                timing=self.timing,
                trace=trace,
                check_races=self.check_races,
                order=ran,
            )
            self._timed[key] = (ran, dataclasses.replace(report, trace=None), machine.plans)
            while len(self._timed) > 1 and (
                sum(len(steps) for steps, *_ in self._timed.values()) > REPLAY_STEPS_KEPT
            ):
                self._timed.popitem(last=False)
        outputs = {b.name: program.read(dram, b.name) for b in program.outputs}
        return RunResult(outputs, report)

    def cycles(self, program: Program) -> int:
        """`program`'s cycles on the cycle model alone (timing does not depend on data): the
        compiler's `Timer` (`runtime.device.cycle_model`)."""
        config = self.config or require_program(program).config
        check_program(program, config)
        report, _ = run_image(
            config,
            program.dram_image(),
            program.insn_offset,
            len(program.insns),
            timing=self.timing,
            functional=False,
            check_races=False,
        )
        return report.cycles
