"""The static verifier: checks a program before anything runs it.

Rules, each a `VerifyError` naming the instruction:
- ``range``: every scratchpad index, micro-op range and micro-op load is in bounds;
- ``empty-load``: a LOAD of x_size 0 (which writes nothing) names no rows or padding;
- ``dram``: LOADs read inside the program's region, STOREs write only output/scratch buffers;
- ``token-balance``: every queue's pushes are all popped (a token left over means a missing
  pop; more pops than pushes shows up as a deadlock);
- ``deadlock``: the stages, run abstractly with the configured token and command queue depths
  (fetch routes in program order), all reach the end;
- ``raw`` / ``war`` / ``waw``: when two stages touch the same scratchpad rows, the later one in
  program order is ordered after the earlier one by the tokens (happens-before, with vector
  clocks), and nothing reads a row no instruction has written;
- ``finish``: FINISH starts only once every other instruction is complete;
- ``requant-bank``: a requantizing STORE's data rows and parameter rows lie in one accumulator
  bank (the unit reads them through that bank's read port, holding it from the STORE's start
  to its end, see sim.engine);
- ``unit-overlap``: a GEMM and an ALU instruction the compute stage may run at the same time
  (their first micro-ops write different accumulator halves, see sim.engine) each keep every
  accumulator row they read or write in their own half (the halves are banks);
- ``dataflow``: a conv2d or dense program stores each output from exactly the products its
  operator needs, each input element the one the convolution reads there, not a row left by
  an earlier tile (`compiler/analysis/dataflow.py`).
"""

from __future__ import annotations

import hashlib

import numpy as np

from tilecraft.compiler.analysis.completion import ALU_LANE, GEMM_LANE, Completion, covers
from tilecraft.compiler.analysis.dataflow import dataflow_problem
from tilecraft.compiler.analysis.dram_order import dram_order_problem
from tilecraft.compiler.analysis.footprint import accesses, footprint_key
from tilecraft.errors import VerifyError
from tilecraft.hw.config import SCRATCHPADS
from tilecraft.hw.isa import (
    POP_QUEUES,
    PUSH_QUEUES,
    Opcode,
    Stage,
    TokenQueue,
    Unit,
    format_row,
    stage_of,
    unit_of,
)
from tilecraft.runtime.program import Program


def verify(program: Program, dataflow: bool = True) -> dict:
    """Raise `VerifyError` on the first broken rule; return counts on success. Without
    `dataflow`, every rule but that one (half the time of a convolution's verification)."""
    cfg = program.config
    table = program.table()
    uops = program.uop_table()
    key = None if dataflow else _key(program, table, uops)
    if key in _passed:
        return _passed[key]
    region = program.uop_offset // cfg.uop_bytes
    acc = list(accesses(cfg, table, uops, region))
    for a in acc:
        if a.problems:
            _fail("range", a.problems[0], table, a.index)
    _check_empty_loads(table)
    _check_requant_banks(cfg, acc, table)
    _check_dram(program, table, acc)
    stages = [a.stage for a in acc]
    pops, pushes = _token_lists(table, stages)
    order = _check_deadlock(cfg, table, stages, pops, pushes)
    _check_balance(table, pops, pushes)
    clocks, lanes = _clocks(cfg, table, acc, pops, pushes, order)
    local = _stage_local(acc)
    _check_finish(table, clocks, lanes, local)
    args = (cfg, table, acc, clocks, lanes, local)
    _check_hazards(*args)
    _check_unit_overlap(*args)
    _check_dram_order(*args)
    problem = dataflow_problem(program, table, uops) if dataflow else None
    if problem:
        _fail("dataflow", problem[1], table, problem[0])
    counts = {
        "instructions": len(table),
        "tokens": {q.name: len(pushes[q]) for q in TokenQueue},
    }
    if key is not None:
        _passed[key] = counts
        if len(_passed) > PASSED_KEPT:
            del _passed[next(iter(_passed))]
    return counts


# Programs that passed every rule but dataflow, by `_key`: a network's layers of one shape
# differ only in their requantization's immediates, which no other rule reads.
PASSED_KEPT = 16
_passed: dict[bytes, dict] = {}


def _key(program: Program, table, uops) -> bytes:
    """What every rule but dataflow reads: the instructions (an ALU immediate only as whether
    it clears the row, `footprint.footprint_key`), micro-ops, buffers, region and config."""
    h = hashlib.blake2b(footprint_key(program.config, table).tobytes())
    h.update(uops.tobytes())
    h.update(
        repr(
            (
                program.config,
                program.buffers,
                program.dram_size,
                program.uop_offset,
                program.insn_offset,
            )
        ).encode()
    )
    return h.digest()


def verify_queues(program: Program, table: np.ndarray | None = None) -> None:
    """The rules over the whole instruction stream that need no footprints: empty loads, token
    balance and deadlock (`table`: the program's, if already decoded). A chain of verified
    layers is checked with these and its junctions (`graph/chain.verify_chain`)."""
    table = program.table() if table is None else table
    stages = [stage_of(op, mem) for op, mem in zip(table["opcode"].tolist(), table["mem"].tolist())]
    _check_empty_loads(table)
    pops, pushes = _token_lists(table, stages)
    _check_deadlock(program.config, table, stages, pops, pushes)
    _check_balance(table, pops, pushes)


def _check_dram_order(cfg, table, acc, clocks, lanes, local) -> None:
    problem = dram_order_problem(acc, clocks, lanes, local)
    if problem:
        k, what, g = problem
        _fail(
            "dram-order",
            f"{what} instruction {g} ({format_row(table[g])}) with no token ordering them",
            table,
            k,
        )


def _fail(rule: str, message: str, table, index: int | None):
    insn = format_row(table[index]) if index is not None else None
    raise VerifyError(rule, message, index, insn)


def _check_requant_banks(cfg, acc, table) -> None:
    """A requantizing STORE reads every accumulator row it needs (its data and its parameter
    rows) through one bank's read port."""
    if "requant" not in table.dtype.names:  # a config without the unit
        return
    stores = (table["opcode"] == Opcode.STORE) & (table["requant"] != 0)
    for k in np.flatnonzero(stores):
        rows = acc[k].reads.get("acc")
        if rows is None or not len(rows):
            continue
        banks = np.unique(np.asarray(rows) // cfg.acc_bank_rows)
        if len(banks) > 1:
            _fail(
                "requant-bank",
                f"requantizes from accumulator rows in banks {', '.join(map(str, banks))} "
                f"(rows {int(np.min(rows))}..{int(np.max(rows))}, banks of "
                f"{cfg.acc_bank_rows} rows): its data rows and parameter rows must lie in one "
                f"bank, the one whose read port the unit holds",
                table,
                int(k),
            )


def _check_empty_loads(table) -> None:
    """A LOAD of x_size 0 moves nothing and pads nothing: it only carries tokens. One that also
    names rows or padding was meant to write them (e.g. a window that is all padding), and the
    instructions after it would read whatever an earlier one left there."""
    meant = ("y_size", "y_pad0", "y_pad1", "x_pad0", "x_pad1")
    loads = np.flatnonzero((table["opcode"] == Opcode.LOAD) & (table["x_size"] == 0))
    for k in loads:
        named = [f"{f}={int(table[f][k])}" for f in meant if table[f][k]]
        if named:
            _fail(
                "empty-load",
                f"has x_size 0, so it writes nothing, but names {', '.join(named)}: a LOAD "
                f"of nothing only carries tokens (y_size 0, no padding); rows meant to be "
                f"zeros need x_size >= 1 (padding is written only around data)",
                table,
                int(k),
            )


def _check_dram(program: Program, table, acc) -> None:
    size = program.dram_size
    writable = [
        (b.offset, b.offset + b.nbytes, b.name)
        for b in program.buffers
        if b.role in ("output", "scratch")
    ]
    for a in acc:
        for lo, hi in a.dram_reads:
            if lo < 0 or hi > size:
                _fail(
                    "dram",
                    f"reads DRAM bytes [{lo}, {hi}) outside the program's {size}-byte region",
                    table,
                    a.index,
                )
        for lo, hi in a.dram_writes:
            if not any(blo <= lo and hi <= bhi for blo, bhi, _ in writable):
                names = ", ".join(f"{n} [{blo}, {bhi})" for blo, bhi, n in writable) or "none"
                _fail(
                    "dram",
                    f"writes DRAM bytes [{lo}, {hi}) outside every output buffer ({names})",
                    table,
                    a.index,
                )


def _check_finish(table, clocks, lanes, local) -> None:
    """FINISH raises done: every other instruction must be complete when it starts, or a
    transfer would still run after the host was told the program ended (and the next
    program, or a chain's next layer, would run alongside it)."""
    finish = np.flatnonzero(table["opcode"] == Opcode.FINISH)
    if not finish.size:
        return  # the simulator refuses a program without FINISH
    f = int(finish[-1])
    last: dict[int, int] = {}  # lane -> its last instruction before FINISH
    for k in range(f):
        last[lanes[k]] = k
    for lane, g in sorted(last.items(), key=lambda item: item[1]):
        if not covers(clocks[f], lane, local[g]):
            _fail(
                "finish",
                f"raises done while instruction {g} ({format_row(table[g])}) may "
                "still run: no token orders it before FINISH",
                table,
                f,
            )


def _token_lists(table, stages):
    """Per queue: the instructions that pop and push it, in program order."""
    pops = {q: [] for q in TokenQueue}
    pushes = {q: [] for q in TokenQueue}
    stage_arr = np.array([int(s) for s in stages], np.int64)
    illegal = []  # (first instruction, flag, stage) of each flag set where it has no queue
    for queues, found in ((POP_QUEUES, pops), (PUSH_QUEUES, pushes)):
        for s, flags in queues.items():
            for flag, q in flags.items():
                marked = np.flatnonzero((stage_arr == int(s)) & (table[flag] != 0))
                if not marked.size:
                    continue
                if q is None:
                    illegal.append((int(marked[0]), flag, s))
                else:
                    found[q].extend(marked.tolist())
    if illegal:
        k, flag, s = min(illegal)
        _fail("range", f"flag {flag} has no queue on the {s.name.lower()} stage", table, k)
    for found in (pops, pushes):
        for q in found:
            found[q].sort()
    return pops, pushes


def _check_balance(table, pops, pushes) -> None:
    for q in TokenQueue:
        if len(pushes[q]) > len(pops[q]):
            k = pushes[q][len(pops[q])]
            _fail(
                "token-balance",
                f"pushes a {q.name} token that no instruction pops "
                f"({len(pushes[q])} pushes, {len(pops[q])} pops)",
                table,
                k,
            )


def _check_deadlock(cfg, table, stages, pops, pushes) -> list[int]:
    n = len(stages)
    queue = {s: [] for s in Stage}
    for k, s in enumerate(stages):
        queue[s].append(k)
    pop_of: list[list] = [[] for _ in range(n)]
    push_of: list[list] = [[] for _ in range(n)]
    for q, ks in pops.items():
        for k in ks:
            pop_of[k].append(q)
    for q, ks in pushes.items():
        for k in ks:
            push_of[k].append(q)
    tokens = dict.fromkeys(TokenQueue, 0)
    pos = dict.fromkeys(Stage, 0)
    routed = dict.fromkeys(Stage, 0)
    pending: dict[Stage, int | None] = dict.fromkeys(Stage)
    fetched = 0
    order: list[int] = []  # instructions in the order they start: a topological order
    depth, cmd = cfg.dep_queue_depth, cfg.cmd_queue_depth
    stage_list = tuple(Stage)  # iterating the enum itself is slow
    progress = True
    while progress:
        progress = False
        while fetched < n and routed[stages[fetched]] - pos[stages[fetched]] < cmd:
            routed[stages[fetched]] += 1
            fetched += 1
            progress = True
        for s in stage_list:
            if pending[s] is not None:
                k = pending[s]
                if all(tokens[q] < depth for q in push_of[k]):
                    for q in push_of[k]:
                        tokens[q] += 1
                    pending[s] = None
                    progress = True
                continue
            if pos[s] >= routed[s]:
                continue
            k = queue[s][pos[s]]
            if any(tokens[q] == 0 for q in pop_of[k]):
                continue
            for q in pop_of[k]:
                tokens[q] -= 1
            pos[s] += 1
            order.append(k)
            pending[s] = k
            progress = True
    if fetched == n and all(pos[s] == len(queue[s]) and pending[s] is None for s in Stage):
        return order
    lines = []
    first = None
    for s in Stage:
        if pending[s] is not None:
            k, why = pending[s], "cannot push: token queue full"
        elif pos[s] < len(queue[s]):
            k = queue[s][pos[s]]
            if pos[s] >= routed[s]:
                why = "not fetched: fetch is stuck behind a full command queue"
            else:
                why = "waits for a token on " + ", ".join(
                    q.name for q in pop_of[k] if tokens[q] == 0
                )
        else:
            continue
        first = k if first is None else first
        lines.append(
            f"{s.name.lower()} stage blocked at instruction {k} ({why}): {format_row(table[k])}"
        )
    _fail(
        "deadlock",
        f"no stage can make progress at token queue depth {depth}:\n  " + "\n  ".join(lines),
        table,
        first,
    )


def _clocks(cfg, table, acc, pops, pushes, order) -> tuple[list[np.ndarray], list[int]]:
    """Vector clock of each instruction at its start (`completion.py`: what is certainly
    complete: stage order, the compute units' overlap, tokens), and each one's lane. `order`
    is the order the abstract run started them in, so producers come before consumers."""
    source: dict[int, list[int]] = {}
    for q in TokenQueue:
        for producer, consumer in zip(pushes[q], pops[q]):
            source.setdefault(consumer, []).append(producer)
    n = len(acc)
    done: list[np.ndarray | None] = [None] * n
    start: list[np.ndarray | None] = [None] * n
    lanes = [0] * n
    completion = Completion(cfg)
    for k in order:
        a = acc[k]
        local, lanes[k], clock = completion.start(a.stage, table["opcode"][k], a.first_dst)
        for p in source.get(k, ()):
            clock = np.maximum(clock, done[p])
        start[k] = clock
        done[k] = completion.finish(a.stage, local, lanes[k], a.first_dst, clock)
    return start, lanes


def _stage_local(acc) -> list[int]:
    """Each instruction's index among its stage's instructions."""
    local = []
    count = dict.fromkeys(Stage, 0)
    for a in acc:
        local.append(count[a.stage])
        count[a.stage] += 1
    return local


def _check_hazards(cfg, table, acc, clocks, lanes, local) -> None:
    """raw/war/waw on every scratchpad."""
    stages = [a.stage for a in acc]
    order = _Order(stages, lanes, local)
    writer = {b: np.full(cfg.depth(b), -1) for b in SCRATCHPADS}  # global index, program order
    reader = {s: {b: np.full(cfg.depth(b), -1) for b in SCRATCHPADS} for s in Stage}
    writer_by = {s: {b: np.full(cfg.depth(b), -1) for b in SCRATCHPADS} for s in Stage}
    others = {s: [t for t in Stage if t != s] for s in Stage}
    index: dict[int, slice | np.ndarray] = {}  # id(rows) -> a slice where the rows are a range
    for a in acc:
        k, s, clock = a.index, a.stage, clocks[a.index]
        reads = [(buf, _as_index(rows, index)) for buf, rows in a.reads.items() if rows.size]
        writes = [(buf, _as_index(rows, index)) for buf, rows in a.writes.items() if rows.size]
        earlier = []
        for buf, at in reads:
            w = writer[buf][at]
            if w.min() < 0:
                row = int(np.arange(writer[buf].size)[at][np.argmin(w)])
                _fail("raw", f"reads {buf} row {row} before any instruction writes it", table, k)
            earlier.append(w)
        earlier += [
            table_[s_][buf][at]
            for buf, at in writes
            for table_ in (reader, writer_by)
            for s_ in others[s]
        ]
        if earlier and order.unordered(k, clock, np.concatenate(earlier)):
            _name_hazard(table, a, clock, order, writer, reader, writer_by)
        for buf, at in reads:
            reader[s][buf][at] = k
        for buf, at in writes:
            writer[buf][at] = k
            writer_by[s][buf][at] = k


def _as_index(rows: np.ndarray, known: dict) -> slice | np.ndarray:
    """`rows` (distinct) as a slice when they are one range: a view, not a copy (the same set
    of rows, which is all the checks look at). Footprints share their row arrays
    (`footprint.accesses`), so each is looked at once."""
    at = known.get(id(rows))
    if at is None:
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        at = known[id(rows)] = slice(lo, hi) if hi - lo == rows.size else rows
    return at


class _Order:
    """Whether a program's instructions (global indices) are certainly complete when another
    starts, for many at once: one numpy pass per instruction checked."""

    def __init__(self, stages, lanes, local):
        self.stages, self.lanes, self.local = stages, lanes, local
        self.stage_arr = np.array([int(s) for s in stages])
        self.lane_arr = np.array(lanes)  # BARRIER_LANE (-1) picks the clock's last entry
        self.local_arr = np.array(local)

    def unordered(self, k: int, clock: np.ndarray, others: np.ndarray) -> bool:
        """Whether any of `others` (-1: none) on another stage than k may still run."""
        g = others[others >= 0]
        g = g[self.stage_arr[g] != self.stage_arr[k]]
        if not g.size:
            return False
        limit = np.append(clock, max(clock[GEMM_LANE], clock[ALU_LANE]))  # [-1]: a barrier
        return bool((self.local_arr[g] > limit[self.lane_arr[g]]).any())


def _name_hazard(table, a, clock, order: _Order, writer, reader, writer_by) -> None:
    """The rule access `a` breaks and the instruction it is not ordered after (the slow path,
    taken once the fast check found something)."""
    k, s = a.index, a.stage
    args = (table, k, clock, order.stages, order.lanes, order.local)
    for buf, rows in a.reads.items():
        _ordered(*args, writer[buf][rows], "raw", f"reads {buf} rows written by")
    for buf, rows in a.writes.items():
        for other in Stage:
            if other == s:
                continue
            _ordered(
                *args, reader[other][buf][rows], "war", f"overwrites {buf} rows still to be read by"
            )
            _ordered(
                *args, writer_by[other][buf][rows], "waw", f"overwrites {buf} rows also written by"
            )
    raise AssertionError(f"instruction {k}: the hazard check found a race it cannot name")


def _check_unit_overlap(cfg, table, acc, clocks, lanes, local) -> None:
    """An instruction can overlap only the latest instruction of the other unit issued since
    the last LOAD UOP/ACC or FINISH (anything older on that unit finished before it), and not
    even that one when what it waited for at its start (its clock: the interlock of earlier
    instructions, tokens) says that one is complete."""
    last: dict[Unit, object] = dict.fromkeys(Unit)
    for a in acc:
        if a.stage != Stage.COMPUTE:
            continue
        unit = unit_of(int(table["opcode"][a.index]))
        if unit is None:  # waits for both units
            last = dict.fromkeys(Unit)
            continue
        other = last[Unit.ALU if unit == Unit.GEMM else Unit.GEMM]
        last[unit] = a
        if other is None or cfg.acc_bank(a.first_dst) == cfg.acc_bank(other.first_dst):
            continue
        if covers(clocks[a.index], lanes[other.index], local[other.index]):
            continue  # certainly complete before `a` starts
        for x in (a, other):
            own = cfg.acc_bank(x.first_dst)
            for verb, touched in (("reads", x.reads), ("writes", x.writes)):
                rows = touched.get("acc")
                stray = [] if rows is None else rows[rows // cfg.acc_bank_rows != own]
                if len(stray):
                    lo, hi = own * cfg.acc_bank_rows, (own + 1) * cfg.acc_bank_rows - 1
                    _fail(
                        "unit-overlap",
                        f"may run alongside instruction {other.index} "
                        f"({format_row(table[other.index])}) on the other compute unit "
                        f"(their first micro-ops write different accumulator banks), but "
                        f"instruction {x.index} {verb} acc row {int(stray[0])} outside its "
                        f"bank (rows {lo}..{hi}, "
                        f"a bank the other unit may be using)",
                        table,
                        a.index,
                    )


def _ordered(table, k, clock, stages, lanes, local, others, rule, what) -> None:
    """Every instruction in `others` (global indices, -1 none) on another stage than k must be
    complete before k starts."""
    for g in np.unique(others):
        g = int(g)
        if g < 0 or stages[g] == stages[k]:
            continue
        if not covers(clock, lanes[g], local[g]):
            _fail(
                rule,
                f"{what} instruction {g} ({format_row(table[g])}) with no token ordering them",
                table,
                k,
            )
