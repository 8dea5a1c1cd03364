"""Dependence-token insertion: the pass that lets load, compute and store overlap safely.

The lowering emits instructions without dependence flags. This pass walks them in program
order with their static footprints and, whenever an instruction touches scratchpad rows that
another stage wrote (RAW) or still has to read or write (WAR, WAW), makes it wait for the
latest such instruction: that one pushes a token toward it and it pops the token. A vector
clock per stage records what each instruction already waits for (directly, or transitively
through the third stage), so only the edges that add ordering are inserted. Edges in one
direction have increasing producers and consumers, so tokens pair up in FIFO order exactly as
the hardware queues pair them. FINISH waits for the last STORE (the last DRAM write).
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.footprint import SRAMS, accesses
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Opcode, Stage, insn_table, uop_table

# (from stage, to stage) -> (producer's push flag, consumer's pop flag)
EDGES = {
    (Stage.LOAD, Stage.COMPUTE): ("push_next", "pop_prev"),
    (Stage.COMPUTE, Stage.LOAD): ("push_prev", "pop_next"),
    (Stage.COMPUTE, Stage.STORE): ("push_next", "pop_prev"),
    (Stage.STORE, Stage.COMPUTE): ("push_prev", "pop_next"),
}


class RowHistory:
    """Per scratchpad row and stage: the latest (stage-local) reader and writer index."""

    def __init__(self, cfg: HwConfig):
        self.writer = {s: {b: np.full(cfg.depth(b), -1) for b in SRAMS} for s in Stage}
        self.reader = {s: {b: np.full(cfg.depth(b), -1) for b in SRAMS} for s in Stage}

    def needs(self, access) -> dict[Stage, int]:
        """Latest stage-local index on each other stage this access must follow."""
        need: dict[Stage, int] = {}
        for other in Stage:
            if other == access.stage:
                continue
            latest = -1
            for buf, rows in access.reads.items():
                latest = max(latest, _max(self.writer[other][buf], rows))
            for buf, rows in access.writes.items():
                latest = max(latest, _max(self.writer[other][buf], rows))
                latest = max(latest, _max(self.reader[other][buf], rows))
            if latest >= 0:
                need[other] = latest
        return need

    def record(self, access, local: int) -> None:
        for buf, rows in access.reads.items():
            self.reader[access.stage][buf][rows] = local
        for buf, rows in access.writes.items():
            self.writer[access.stage][buf][rows] = local


def insert_tokens(cfg: HwConfig, insns: list, uops: list, uop_region: int) -> list:
    """`insns` with dependence flags set (any flags they had are recomputed)."""
    plain = [
        i.with_flags(pop_prev=False, pop_next=False, push_prev=False, push_next=False)
        for i in insns
    ]
    table = insn_table(plain)
    flags: list[dict[str, bool]] = [{} for _ in plain]
    history = RowHistory(cfg)
    local_count = dict.fromkeys(Stage, 0)
    global_of: dict[Stage, list[int]] = {s: [] for s in Stage}
    clock_after: list[np.ndarray] = []  # per instruction: what is complete once it completes
    last = {s: np.full(3, -1) for s in Stage}  # clock of each stage's latest instruction
    for a in accesses(cfg, table, uop_table(uops), uop_region):
        if a.problems:
            raise ScheduleError(f"instruction {a.index}: " + "; ".join(a.problems))
        s, k = a.stage, a.index
        need = history.needs(a)
        if table[k]["opcode"] == Opcode.FINISH and local_count[Stage.STORE]:
            need[Stage.STORE] = local_count[Stage.STORE] - 1
        clock = last[s].copy()
        for other, local in sorted(need.items()):
            if clock[other] >= local:
                continue  # already ordered, directly or through the third stage
            if (other, s) not in EDGES:
                raise ScheduleError(
                    f"instruction {k} ({s.name.lower()}) depends on the {other.name.lower()} "
                    f"stage, which has no token queue to it"
                )
            producer = global_of[other][local]
            push, pop = EDGES[other, s]
            flags[producer][push] = True
            flags[k][pop] = True
            clock = np.maximum(clock, clock_after[producer])
        local = local_count[s]
        clock[s] = local
        clock_after.append(clock)
        last[s] = clock
        global_of[s].append(k)
        local_count[s] += 1
        history.record(a, local)
    return [i.with_flags(**f) if f else i for i, f in zip(plain, flags)]


def _max(history: np.ndarray, rows: np.ndarray) -> int:
    return int(history[rows].max()) if rows.size else -1
