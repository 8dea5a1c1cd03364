"""Dependence-token insertion: the pass that lets load, compute and store overlap safely.

The lowering emits instructions without dependence flags. This pass walks them in program
order with their static footprints and, whenever an instruction touches scratchpad rows that
another stage wrote (RAW) or still has to read or write (WAR, WAW), makes it wait for the
latest such instruction: that one pushes a token toward it and it pops the token. Vector clocks
(`completion.py`) record what each instruction already waits for (directly, or transitively
through the third stage), so only the edges that add ordering are inserted. The compute
stage's two units finish out of order: when an instruction needs a GEMM and a younger ALU
instruction (or the reverse) that may have overlapped, no single token vouches for both, and
a compute no-op (a LOAD of nothing, which waits for both units) goes in to push it. Edges in
one direction have increasing producers and consumers, so tokens pair up in FIFO order exactly
as the hardware queues pair them. FINISH waits for the last STORE (the last DRAM write).
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.completion import (
    ALU_LANE,
    BARRIER,
    GEMM_LANE,
    LOAD_LANE,
    STORE_LANE,
    Completion,
    covers,
)
from tilecraft.compiler.footprint import accesses
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import SCRATCHPADS, HwConfig
from tilecraft.hw.isa import Load, MemId, Opcode, Stage, insn_table, queue_between, uop_table


class RowHistory:
    """Per scratchpad row, and per lane (a stage, or one of the compute stage's units or its
    barriers): the stage-local index of the latest instruction that read it and that wrote it."""

    LANES = (
        (Stage.LOAD, LOAD_LANE),
        (Stage.COMPUTE, GEMM_LANE),
        (Stage.COMPUTE, ALU_LANE),
        (Stage.COMPUTE, BARRIER),
        (Stage.STORE, STORE_LANE),
    )

    def __init__(self, cfg: HwConfig):
        def rows():
            return {b: np.full(cfg.depth(b), -1) for b in SCRATCHPADS}

        self.writer = {key: rows() for key in self.LANES}
        self.reader = {key: rows() for key in self.LANES}

    def needs(self, access) -> dict[Stage, list[tuple[int, int]]]:
        """Per other stage, the (lane, stage-local index) of the latest instruction on each of
        its lanes that wrote a row this access touches or read a row it writes. Only the latest
        matters: older ones on the same lane are complete before it (see `insert_tokens`)."""
        need: dict[Stage, list[tuple[int, int]]] = {}
        for key in self.LANES:
            stage, lane = key
            if stage == access.stage:
                continue
            latest = -1
            for buf, rows in access.reads.items():
                if rows.size:
                    latest = max(latest, int(self.writer[key][buf][rows].max()))
            for buf, rows in access.writes.items():
                if rows.size:
                    latest = max(
                        latest,
                        int(self.writer[key][buf][rows].max()),
                        int(self.reader[key][buf][rows].max()),
                    )
            if latest >= 0:
                need.setdefault(stage, []).append((lane, latest))
        return need

    def record(self, access, lane: int, local: int) -> None:
        key = (access.stage, lane)
        for buf, rows in access.reads.items():
            self.reader[key][buf][rows] = local
        for buf, rows in access.writes.items():
            self.writer[key][buf][rows] = local


def compute_nop():
    """A compute-stage LOAD that moves nothing: it waits for both units, so its token vouches
    for every older compute instruction (VTA's dependence no-op)."""
    return Load(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0)


def insert_tokens(cfg: HwConfig, insns: list, uops: list, uop_region: int) -> list:
    """`insns` with dependence flags set (any flags they had are recomputed), and a compute
    no-op before an instruction that needs two compute instructions no one token vouches for
    (the older may still run on the other unit when the younger completes)."""
    plain = [
        i.with_flags(pop_prev=False, pop_next=False, push_prev=False, push_next=False)
        for i in insns
    ]
    table = insn_table(plain)
    out: list = []  # the instructions, no-ops included
    flags: list[dict[str, bool]] = []
    stage_of: list[Stage] = []
    done_of: list[np.ndarray] = []  # completion clocks
    global_of: dict[Stage, list[int]] = {s: [] for s in Stage}  # stage-local -> index in out
    history = RowHistory(cfg)
    completion = Completion(cfg)

    def emit(insn, stage: Stage, opcode: int, first_dst, producers: list[int]):
        local, lane, clock = completion.start(stage, opcode, first_dst)
        k = len(out)
        out.append(insn)
        flags.append({})
        for p in producers:
            q = queue_between(stage_of[p], stage)
            flags[p][q.push_flag] = True
            flags[k][q.pop_flag] = True
            clock = np.maximum(clock, done_of[p])
        done_of.append(completion.finish(stage, local, lane, first_dst, clock))
        stage_of.append(stage)
        global_of[stage].append(k)
        return lane, local

    for a in accesses(cfg, table, uop_table(uops), uop_region):
        if a.problems:
            raise ScheduleError(f"instruction {a.index}: " + "; ".join(a.problems))
        s, k = a.stage, a.index
        opcode = int(table[k]["opcode"])
        need = history.needs(a)
        if opcode == Opcode.FINISH and global_of[Stage.STORE]:
            need[Stage.STORE] = [(STORE_LANE, len(global_of[Stage.STORE]) - 1)]
        clock = completion.start(s, opcode, a.first_dst)[2]
        producers = []
        for other in sorted(need):
            missing = [w for w in need[other] if not covers(clock, *w)]
            if not missing:
                continue  # already ordered, directly or through the third stage
            if queue_between(other, s) is None:
                raise ScheduleError(
                    f"instruction {k} ({s.name.lower()}) depends on the {other.name.lower()} "
                    f"stage, which has no token queue to it"
                )
            p = global_of[other][max(x for _, x in missing)]
            if not all(covers(np.maximum(clock, done_of[p]), *w) for w in missing):
                # two compute instructions, the older maybe still running: s is not the
                # compute stage, so the no-op changes nothing it inherits
                emit(compute_nop(), Stage.COMPUTE, int(Opcode.LOAD), None, [])
                p = len(out) - 1
            producers.append(p)
            clock = np.maximum(clock, done_of[p])
        history.record(a, *emit(plain[k], s, opcode, a.first_dst, producers))
    return [i.with_flags(**f) if f else i for i, f in zip(out, flags)]
