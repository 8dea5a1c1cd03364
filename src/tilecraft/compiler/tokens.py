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

from tilecraft.compiler.completion import LOAD_LANE, STORE_LANE, Completion, covers
from tilecraft.compiler.footprint import accesses
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import SCRATCHPADS, HwConfig
from tilecraft.hw.isa import Load, MemId, Opcode, Stage, insn_table, queue_between, uop_table


class RowHistory:
    """Per scratchpad row and stage: the latest (stage-local) reader and writer index."""

    def __init__(self, cfg: HwConfig):
        self.writer = {s: {b: np.full(cfg.depth(b), -1) for b in SCRATCHPADS} for s in Stage}
        self.reader = {s: {b: np.full(cfg.depth(b), -1) for b in SCRATCHPADS} for s in Stage}

    def needs(self, access) -> dict[Stage, np.ndarray]:
        """Stage-local indices on each other stage this access must follow (the latest writer
        or reader of each row it touches: older ones are done before it, see `insert_tokens`)."""
        need: dict[Stage, np.ndarray] = {}
        for other in Stage:
            if other == access.stage:
                continue
            found = []
            for buf, rows in access.reads.items():
                found.append(self.writer[other][buf][rows])
            for buf, rows in access.writes.items():
                found += [self.writer[other][buf][rows], self.reader[other][buf][rows]]
            latest = np.unique(np.concatenate(found)) if found else np.empty(0, np.int64)
            latest = latest[latest >= 0]
            if latest.size:
                need[other] = latest
        return need

    def record(self, access, local: int) -> None:
        for buf, rows in access.reads.items():
            self.reader[access.stage][buf][rows] = local
        for buf, rows in access.writes.items():
            self.writer[access.stage][buf][rows] = local


def compute_nop():
    """A compute-stage LOAD that moves nothing: it waits for both units, so its token vouches
    for every older compute instruction (VTA's dependence no-op)."""
    return Load(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=1, x_size=0, x_stride=0)


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
    lanes: list[int] = []  # compute-local -> lane
    history = RowHistory(cfg)
    completion = Completion(cfg)

    def emit(insn, stage: Stage, opcode: int, first_dst, producers: list[int]) -> int:
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
        if stage == Stage.COMPUTE:
            lanes.append(lane)
        return local

    for a in accesses(cfg, table, uop_table(uops), uop_region):
        if a.problems:
            raise ScheduleError(f"instruction {a.index}: " + "; ".join(a.problems))
        s, k = a.stage, a.index
        opcode = int(table[k]["opcode"])
        need = history.needs(a)
        if opcode == Opcode.FINISH and global_of[Stage.STORE]:
            need[Stage.STORE] = np.array([len(global_of[Stage.STORE]) - 1])
        clock = completion.start(s, opcode, a.first_dst)[2]
        producers = []
        for other in sorted(need):
            wanted = [(_lane(other, lanes, x), int(x)) for x in need[other]]
            missing = [w for w in wanted if not covers(clock, *w)]
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
        history.record(a, emit(plain[k], s, opcode, a.first_dst, producers))
    return [i.with_flags(**f) if f else i for i, f in zip(out, flags)]


def _lane(stage: Stage, lanes: list[int], local: int) -> int:
    if stage == Stage.LOAD:
        return LOAD_LANE
    if stage == Stage.STORE:
        return STORE_LANE
    return lanes[local]
