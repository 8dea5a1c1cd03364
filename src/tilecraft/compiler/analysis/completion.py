"""What is certainly complete when an instruction starts and when it completes: the vector
clocks the token pass and the verifier share.

A clock has one entry per lane: the load stage, the compute stage's GEMM unit and ALU unit, and
the store stage. Entry v means every instruction of that lane with a stage-local index <= v is
complete (compute instructions are numbered across both units and the compute barriers, LOAD
UOP/ACC and FINISH, which wait for both units and so count on either lane). The load and store
stages run one instruction at a time. The compute stage issues in order, but a GEMM/ALU
instruction may start while the latest older instruction on the other unit is still running,
when their first micro-ops write different accumulator halves (sim/engine.py): then neither
its start nor its completion vouches for that one.
"""

from __future__ import annotations

import numpy as np

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import BARRIER, Stage, Unit, unit_of

LOAD_LANE, GEMM_LANE, ALU_LANE, STORE_LANE = range(4)
BARRIER_LANE = -1  # a compute LOAD/FINISH (hw.isa BARRIER): on both compute lanes (the last
# row of a lane table)
UNIT_LANES = (GEMM_LANE, ALU_LANE)
_UNIT_LANE = {Unit.GEMM: GEMM_LANE, Unit.ALU: ALU_LANE}


def lane_of(stage: Stage, opcode: int) -> int:
    if stage == Stage.LOAD:
        return LOAD_LANE
    if stage == Stage.STORE:
        return STORE_LANE
    unit = unit_of(opcode)
    return BARRIER_LANE if unit is BARRIER else _UNIT_LANE[unit]


def covers(clock: np.ndarray, lane: int, local: int) -> bool:
    """Whether `clock` says instruction (lane, stage-local index) is complete."""
    if lane == BARRIER_LANE:
        return local <= max(clock[GEMM_LANE], clock[ALU_LANE])
    return local <= clock[lane]


def empty() -> np.ndarray:
    return np.full(4, -1, np.int64)


class Completion:
    """Feed instructions in an order each stage sees in program order (program order itself,
    or the order an abstract run starts them in), `start` then `finish` for each."""

    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.count = dict.fromkeys(Stage, 0)
        self.prev_done = {Stage.LOAD: empty(), Stage.STORE: empty()}
        self.compute_start = empty()  # what the previous compute instruction started with
        self.latest: dict[int, tuple[int, int | None, np.ndarray] | None] = dict.fromkeys(
            (GEMM_LANE, ALU_LANE, BARRIER_LANE)
        )  # lane -> (local, half, completion clock) of its latest instruction

    def start(self, stage: Stage, opcode: int, first_dst: int | None) -> tuple:
        """(stage-local index, lane, the clock its stage's own order gives it at its start) of
        the stage's next instruction; the caller adds what the tokens it pops vouch for, then
        calls `finish` (until then this only looks)."""
        lane = lane_of(stage, opcode)
        local = self.count[stage]
        return local, lane, self._inherited(stage, lane, first_dst, local)

    def finish(self, stage: Stage, local: int, lane: int, first_dst, start: np.ndarray):
        """The completion clock of the instruction `start` returned (local, lane, _) for, given
        the clock it really started with (`start`, tokens included)."""
        self.count[stage] += 1
        done = start.copy()
        if stage != Stage.COMPUTE:
            done[lane] = local
            self.prev_done[stage] = done
            return done
        self.compute_start = start.copy()
        if lane == BARRIER_LANE:
            done[GEMM_LANE] = done[ALU_LANE] = local
            self.latest = dict.fromkeys(self.latest)
        else:
            done[lane] = local
        half = None if first_dst is None else self.cfg.acc_bank(first_dst)
        self.latest[lane] = (local, half, done)
        return done

    def _inherited(self, stage, lane, first_dst, local) -> np.ndarray:
        """What the stage's own order guarantees at the start of instruction `local`."""
        if stage != Stage.COMPUTE:
            return self.prev_done[stage].copy()
        clock = self.compute_start.copy()
        if self.latest[BARRIER_LANE] is not None:
            clock = np.maximum(clock, self.latest[BARRIER_LANE][2])
        if lane == BARRIER_LANE:  # waits for both units
            for u in UNIT_LANES:
                if self.latest[u] is not None:
                    clock = np.maximum(clock, self.latest[u][2])
            clock[GEMM_LANE] = clock[ALU_LANE] = local - 1
            return clock
        other = ALU_LANE if lane == GEMM_LANE else GEMM_LANE
        if self.latest[lane] is not None:  # its own unit is idle
            clock = np.maximum(clock, self.latest[lane][2])
        clock[lane] = max(clock[lane], local - 1)
        j = self.latest[other]
        half = self.cfg.acc_bank(first_dst)
        if j is None or j[1] == half:  # the interlock waited for the other unit's instruction
            if j is not None:
                clock = np.maximum(clock, j[2])
            clock[other] = max(clock[other], local - 1)
        else:  # it may still run: vouch only for what came before it
            clock[other] = max(clock[other], j[0] - 1)
        return clock
