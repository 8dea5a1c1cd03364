"""The behavioral simulator as a runtime device (`get_device("sim")`)."""

from __future__ import annotations

import numpy as np

from tilecraft.hw.config import HwConfig
from tilecraft.hw.timing import Timing
from tilecraft.runtime.device import RunResult, check_inputs, check_program
from tilecraft.runtime.program import Program
from tilecraft.sim.simulator import run_image, simulate


class SimDevice:
    """Runs programs on the simulator. `config=None` takes each program's own config (a board's
    config runs the same program with that board's timing)."""

    name = "sim"

    def __init__(
        self,
        config: HwConfig | None = None,
        timing: Timing | None = None,
        check_races: bool = True,
    ):
        self.config = config
        self.timing = timing
        self.check_races = check_races

    def run(
        self, program: Program, inputs: dict[str, np.ndarray], *, trace: bool = False
    ) -> RunResult:
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

    def cycles(self, program: Program) -> int:
        """`program`'s cycles on the cycle model alone (timing does not depend on data): the
        compiler's `Timer` (`runtime.device.cycle_model`)."""
        config = self.config or program.config
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
