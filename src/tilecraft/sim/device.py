"""The behavioral simulator as a runtime device (`get_device("sim")`)."""

from __future__ import annotations

import numpy as np

from tilecraft.hw.config import HwConfig
from tilecraft.runtime.device import RunResult, check_inputs, check_program
from tilecraft.runtime.program import Program
from tilecraft.sim.simulator import simulate
from tilecraft.sim.timing import Timing


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
