"""Dependence-token insertion: the pass that lets load, compute and store overlap safely.

The lowering emits instructions without dependence flags. This pass walks them in program
order with their static footprints and, whenever an instruction touches scratchpad rows that
another stage wrote (RAW) or still has to read or write (WAR, WAW), makes it wait for the
latest such instruction: that one pushes a token toward it and it pops the token. Vector clocks
(`completion.py`) record what each instruction already waits for (directly, or transitively
through the third stage), so only the edges that add ordering are inserted. The compute
stage's two units finish out of order: when an instruction needs a GEMM and a younger ALU
instruction (or the reverse) that may have overlapped, no single token vouches for both, and
a compute no-op (a LOAD of nothing, which waits for both units) goes in to push it; one also
relays a token between the load and store stages, which have no queue between them (both write
INP where a STORE goes into INP, `HwConfig.store_to_inp`). Edges in
one direction have increasing producers and consumers, so tokens pair up in FIFO order exactly
as the hardware queues pair them. FINISH waits for the last STORE (the last DRAM write).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

from tilecraft.compiler.analysis.completion import (
    ALU_LANE,
    BARRIER_LANE,
    GEMM_LANE,
    LOAD_LANE,
    STORE_LANE,
    Completion,
    covers,
)
from tilecraft.compiler.analysis.footprint import accesses, footprint_key
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import SCRATCHPADS, HwConfig
from tilecraft.hw.isa import Load, MemId, Opcode, Stage, insn_table, queue_between, uop_table


class RowHistory:
    """Per scratchpad row, and per lane (a stage, or one of the compute stage's units or its
    barriers): the stage-local index of the latest instruction that read it and that wrote it.
    The lanes are the rows of one array per buffer, so one gather answers for all of them."""

    LANES = (
        (Stage.LOAD, LOAD_LANE),
        (Stage.COMPUTE, GEMM_LANE),
        (Stage.COMPUTE, ALU_LANE),
        (Stage.COMPUTE, BARRIER_LANE),
        (Stage.STORE, STORE_LANE),
    )

    def __init__(self, cfg: HwConfig):
        # per buffer, one table: the writers' lanes, then the readers' lanes
        n = len(self.LANES)
        self.n = n
        self.rows = {b: np.full((2 * n, cfg.depth(b)), -1) for b in SCRATCHPADS}
        self.index = {key: i for i, key in enumerate(self.LANES)}
        self.others = {
            s: [(i, *self.LANES[i]) for i, (stage, _) in enumerate(self.LANES) if stage != s]
            for s in Stage
        }

    def needs(self, access) -> dict[Stage, list[tuple[int, int]]]:
        """Per other stage, the (lane, stage-local index) of the latest instruction on each of
        its lanes that wrote a row this access touches or read a row it writes. Only the latest
        matters: older ones on the same lane are complete before it (see `insert_tokens`)."""
        n, latest = self.n, None
        writes = access.writes
        for buf, rows in access.reads.items():
            if rows.size and buf not in writes:
                m = _lanes(self.rows[buf], rows, slice(0, n)).max(axis=1)
                latest = m if latest is None else np.maximum(latest, m)
        for buf, rows in writes.items():
            if not rows.size:
                continue
            read = access.reads.get(buf)
            if read is not None and read is not rows and read.size:
                m = _lanes(self.rows[buf], read, slice(0, n)).max(axis=1)
                latest = m if latest is None else np.maximum(latest, m)
            m = _lanes(self.rows[buf], rows).max(axis=1)
            m = np.maximum(m[:n], m[n:])
            latest = m if latest is None else np.maximum(latest, m)
        need: dict[Stage, list[tuple[int, int]]] = {}
        if latest is None:
            return need
        latest = latest.tolist()
        for i, stage, lane in self.others[access.stage]:
            if latest[i] >= 0:
                need.setdefault(stage, []).append((lane, latest[i]))
        return need

    def record(self, access, lane: int, local: int) -> None:
        i = self.index[(access.stage, lane)]
        for buf, rows in access.reads.items():
            _lanes(self.rows[buf], rows, self.n + i)[...] = local
        for buf, rows in access.writes.items():
            _lanes(self.rows[buf], rows, i)[...] = local


def _lanes(table: np.ndarray, rows: np.ndarray, lane=slice(None)) -> np.ndarray:
    """`table[lane, rows]` for ascending distinct `rows`: a view when they are one range (the
    common case), so that it can be assigned to."""
    if rows.size and int(rows[-1]) - int(rows[0]) + 1 == rows.size:
        return table[lane, int(rows[0]) : int(rows[-1]) + 1]
    return _Scatter(table, lane, rows)


class _Scatter:
    """`table[lane, rows]` for rows that are not one range: reads gather, `[...] = v` writes."""

    def __init__(self, table, lane, rows):
        self.table, self.lane, self.rows = table, lane, rows

    def max(self, axis):
        return self.table[self.lane][..., self.rows].max(axis=axis)

    def __setitem__(self, key, value) -> None:
        self.table[self.lane, self.rows] = value


def compute_nop(**flags) -> Load:
    """A compute-stage LOAD that moves nothing: it waits for both units, so its token vouches
    for every older compute instruction (VTA's dependence no-op); `flags`, its dependence
    flags (pop_prev, push_next, ...)."""
    return Load(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0, **flags)


def load_nop(**flags) -> Load:
    """A load-stage LOAD that moves nothing: where the load stage waits for, or hands over,
    a token (`flags`)."""
    return Load(mem=MemId.INP, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0, **flags)


PLANS_KEPT = 16  # token plans a process remembers (`insert_tokens`)
_plans: OrderedDict[tuple, tuple] = OrderedDict()


def insert_tokens(cfg: HwConfig, insns: list, uops: list, uop_region: int) -> list:
    """`insns` with dependence flags set (any flags they had are recomputed), and a compute
    no-op before an instruction that needs two compute instructions no one token vouches for
    (the older may still run on the other unit when the younger completes).

    The flags depend on the footprints alone, so the plan (where the no-ops go, which flags
    each instruction gets) is kept for the last PLANS_KEPT footprint keys: a network's layers
    of one shape, which differ only in their requantization's immediates, share one."""
    plain = [
        i.with_flags(pop_prev=False, pop_next=False, push_prev=False, push_next=False)
        if i.pop_prev or i.pop_next or i.push_prev or i.push_next
        else i
        for i in insns
    ]
    table = insn_table(plain)
    uop_rows = uop_table(uops)
    digest = hashlib.blake2b(footprint_key(cfg, table).tobytes())
    digest.update(uop_rows.tobytes())
    key = (cfg, uop_region, digest.digest())
    plan = _plans.get(key)
    if plan is None:
        plan = _plan(cfg, table, uop_rows, uop_region)
        _plans[key] = plan
        if len(_plans) > PLANS_KEPT:
            _plans.popitem(last=False)
    else:
        _plans.move_to_end(key)
    sources, flags = plan
    made = [compute_nop() if k is None else plain[k] for k in sources]
    return [i.with_flags(**f) if f else i for i, f in zip(made, flags)]


def clear_plans() -> None:
    """Forget every kept token plan."""
    _plans.clear()


def _plan(cfg: HwConfig, table: np.ndarray, uops: np.ndarray, uop_region: int) -> tuple:
    """(per instruction of the result: the index in `table` it comes from, None for a compute
    no-op; its flags)."""
    opcodes = table["opcode"].tolist()
    out: list = []  # where each instruction comes from: an index in table, or None (a no-op)
    flags: list[dict[str, bool]] = []
    stage_of: list[Stage] = []
    done_of: list[np.ndarray] = []  # completion clocks
    global_of: dict[Stage, list[int]] = {s: [] for s in Stage}  # stage-local -> index in out
    history = RowHistory(cfg)
    completion = Completion(cfg)

    def emit(source, stage: Stage, opcode: int, first_dst, producers: list[int], started=None):
        local, lane, clock = started or completion.start(stage, opcode, first_dst)
        k = len(out)
        out.append(source)
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

    for a in accesses(cfg, table, uops, uop_region):
        if a.problems:
            raise ScheduleError(f"instruction {a.index}: " + "; ".join(a.problems))
        s, k = a.stage, a.index
        opcode = opcodes[k]
        need = history.needs(a)
        if opcode == Opcode.FINISH and global_of[Stage.STORE]:
            need[Stage.STORE] = [(STORE_LANE, len(global_of[Stage.STORE]) - 1)]
        started = completion.start(s, opcode, a.first_dst)
        clock = started[2]
        producers = []
        for other in sorted(need):
            missing = [w for w in need[other] if not covers(clock, *w)]
            if not missing:
                continue  # already ordered, directly or through the third stage
            p = global_of[other][max(x for _, x in missing)]
            if queue_between(other, s) is None:
                # the load and store stages (both write INP where a STORE goes into INP) have
                # no queue between them: a compute no-op hands the order on, taking the token
                # itself unless the compute stage already waited for a later instruction there
                # (tokens pair in FIFO order: its pop may not reach behind an earlier one's)
                nop = completion.start(Stage.COMPUTE, int(Opcode.LOAD), None)[2]
                ordered = all(covers(nop, *w) for w in missing)
                emit(None, Stage.COMPUTE, int(Opcode.LOAD), None, [] if ordered else [p])
                p = len(out) - 1
                started = None
            elif not all(covers(np.maximum(clock, done_of[p]), *w) for w in missing):
                # two compute instructions, the older maybe still running: s is not the
                # compute stage, so the no-op changes nothing it inherits
                emit(None, Stage.COMPUTE, int(Opcode.LOAD), None, [])
                p = len(out) - 1
                started = None  # the no-op moved the compute stage on
            producers.append(p)
            clock = np.maximum(clock, done_of[p])
        history.record(a, *emit(k, s, opcode, a.first_dst, producers, started))
    return out, flags
