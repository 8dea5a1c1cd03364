"""A chain's weights loaded ahead: a layer's first weights come into WGT while the layer before
it still computes, instead of after the junction between them.

At a junction the next layer waits for the previous one's last STORE (its input is in DRAM only
then); its first weights waited too, though nothing stores them: a few thousand cycles of DRAM
transfer on the path of every junction (ResNet-18 has 21). Here a layer's first load group's
LOAD WGTs from constant buffers (`first_weights`) move to just after the previous layer's last
load-stage instruction, where they overlap that layer's last tiles. Their rows must be ones no
instruction of the previous layer touches; to find such rows a layer's WGT addressing may move
by a whole number of rows (`Ahead.shift`: every LOAD WGT, DEPTHWISE and micro-op weight index
of the layer moves together, a renaming that changes nothing else) next to the previous
layer's rows.

Why it is safe (`check_early` checks it on the chain): an early load writes rows no instruction
of the previous layer reads or writes (disjoint from its WGT rows); the layer before that is
complete before the previous layer's load stage starts (their junction); the early loads run
in the load stage's order before the rest of their layer's first load group, so its first GEMM,
which pops that group's token, sees them as before; and they read constant buffers, which no
STORE writes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.compiler.analysis.tokens import load_nop
from tilecraft.errors import VerifyError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import MemId, Opcode, Stage, format_row, insn_table, stage_of
from tilecraft.runtime.buffers import Role
from tilecraft.runtime.program import Program

FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


@dataclass(frozen=True)
class Ahead:
    """How a chained layer's weights load ahead: `shift`, rows its WGT addressing moves by;
    `early`, the rows of its instruction table that load during the layer before it."""

    shift: int = 0
    early: tuple[int, ...] = ()


def _load_rows_of(rows: np.ndarray) -> np.ndarray:
    return (rows["y_size"] + rows["y_pad0"] + rows["y_pad1"]) * (
        rows["x_size"] + rows["x_pad0"] + rows["x_pad1"]
    )


def _load_rows(row) -> int:
    return int(_load_rows_of(row))


def _constant_spans(program: Program) -> list[tuple[int, int]]:
    """[first, one past the last) DRAM byte of each constant buffer: nothing stores there."""
    return [(b.offset, b.offset + b.nbytes) for b in program.buffers if b.role == Role.CONSTANT]


def _is_wgt_load(table: np.ndarray) -> np.ndarray:
    return (
        (table["opcode"] == Opcode.LOAD)
        & (table["mem"] == MemId.WGT)
        & (table["x_size"] != 0)
        & (table["y_size"] != 0)
    )


def wgt_span(program: Program, rows=None, table=None, uop_wgt=None) -> tuple[int, int] | None:
    """[lowest, one past the highest) WGT row a program's instructions touch (those at `rows`
    of its table, or all; `table` and `uop_wgt`, its instruction table and its micro-ops'
    weight indices where the caller has them decoded): what its LOAD WGTs write, its GEMMs
    read through the micro-ops in the UOP buffer (which its LOAD UOPs fill) and their loops,
    its DEPTHWISEs read. None where they touch none."""
    cfg = program.config
    table = program.table() if table is None else table
    keep = np.zeros(len(table), bool)
    keep[np.arange(len(table)) if rows is None else np.asarray(rows, np.int64)] = True
    op, mem = table["opcode"], table["mem"]
    lo, hi = [], []
    loads = np.flatnonzero(keep & _is_wgt_load(table))
    if loads.size:
        starts = table["sram_base"][loads]
        lo.append(int(starts.min()))
        hi.append(int((starts + _load_rows_of(table[loads])).max()))
    dw = np.flatnonzero(keep & (op == Opcode.DEPTHWISE))
    if dw.size:
        lo.append(int(table["wgt_base"][dw].min()))
        hi.append(int(table["wgt_base"][dw].max()) + cfg.depthwise_passes)
    gemm = keep & (op == Opcode.GEMM) & (table["reset"] == 0)
    gemm &= table["uop_end"] > table["uop_bgn"]
    if gemm.any():  # each through the micro-ops the UOP buffer holds when it runs
        words = program.uop_table()["wgt"] if uop_wgt is None else uop_wgt
        first = program.uop_offset // cfg.uop_bytes
        sram = np.zeros(cfg.depth("uop"), np.int64)
        fills = np.flatnonzero((op == Opcode.LOAD) & (mem == MemId.UOP) & (table["x_size"] > 0))
        fills = fills[fills < np.flatnonzero(gemm)[-1]]
        edges = [0, *fills.tolist(), len(table)]
        for k, end in zip(edges, edges[1:]):
            r = table[k]
            if k in fills:  # as the LOAD places them (`sim/semantics.load`), pads of 0
                y0, x0, y, x = (int(r[f]) for f in ("y_pad0", "x_pad0", "y_size", "x_size"))
                block = np.zeros((y0 + y + int(r["y_pad1"]), x0 + x + int(r["x_pad1"])), np.int64)
                at, stride = int(r["dram_base"]) - first, int(r["x_stride"])
                for j in range(y):
                    block[y0 + j, x0 : x0 + x] = words[at + j * stride : at + j * stride + x]
                sram[int(r["sram_base"]) : int(r["sram_base"]) + block.size] = block.ravel()
            g = table[k:end][gemm[k:end]]
            if not g.size:
                continue
            pairs, back = np.unique(
                np.stack([g["uop_bgn"], g["uop_end"]], 1), axis=0, return_inverse=True
            )
            w_lo = np.array([sram[a:b].min() for a, b in pairs])[back.ravel()]
            w_hi = np.array([sram[a:b].max() for a, b in pairs])[back.ravel()]
            out = (g["iter_out"] - 1) * g["wgt_out"]
            inner = (g["iter_in"] - 1) * g["wgt_in"]
            lo.append(int((w_lo + np.minimum(out, 0) + np.minimum(inner, 0)).min()))
            hi.append(int((w_hi + np.maximum(out, 0) + np.maximum(inner, 0)).max()) + 1)
    return (min(lo), max(hi)) if lo else None


def first_weights(program: Program, table=None) -> tuple[int, ...]:
    """Rows of a layer's first load-stage group (up to its first token, popping none) that load
    WGT from a constant buffer (`table`: its instruction table, where decoded already)."""
    table = program.table() if table is None else table
    eb = program.config.elem_bytes("wgt")
    spans = _constant_spans(program)
    group = []
    wgt = _is_wgt_load(table)
    for k, row in enumerate(table):
        if stage_of(row["opcode"], row["mem"]) != Stage.LOAD:
            continue
        if row["pop_next"] or row["pop_prev"]:
            break
        if wgt[k]:
            group.append(k)
        if row["push_next"] or row["push_prev"]:
            break
    rows = {k: (int(table["sram_base"][k]), int(table["sram_base"][k]) + _load_rows(table[k]))
            for k in group}  # fmt: skip
    early = [k for k in group if _inside(table[k], eb, spans)]
    # one that shares rows with another WGT load of the group stays: moved ahead of it, the
    # rows would end with the other's data
    return tuple(k for k in early if not any(j != k and _overlap(rows[j], rows[k]) for j in group))


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _inside(row, eb: int, spans) -> bool:
    lo = int(row["dram_base"]) * eb
    hi = lo + ((int(row["y_size"]) - 1) * int(row["x_stride"]) + int(row["x_size"])) * eb
    return any(a <= lo and hi <= b for a, b in spans)


def plan_ahead(cfg: HwConfig, programs: list[Program]) -> list[Ahead]:
    """Per layer of a chain, how its weights load ahead: the least shift (none where it can)
    that puts its early rows clear of the previous layer's rows with all its own rows, and
    every micro-op's weight index, inside WGT; layers with no such shift, no constant weights
    in their first group, or after a layer that touches no WGT row, load as before."""
    depth = cfg.depth("wgt")
    plans = [Ahead()]
    prev = wgt_span(programs[0]) if programs else None
    for p in programs[1:]:
        table = p.table()
        span = wgt_span(p, table=table)
        early = first_weights(p, table)
        chosen = None
        if early and span is not None and prev is not None:
            e_lo = min(int(table["sram_base"][k]) for k in early)
            e_hi = max(int(table["sram_base"][k]) + _load_rows(table[k]) for k in early)
            uops = p.uop_table()["wgt"]  # every micro-op moves (an ALU's weight index too)
            lo = min(span[0], int(uops.min())) if uops.size else span[0]
            hi = max(span[1], int(uops.max()) + 1) if uops.size else span[1]
            for shift in sorted({0, prev[1] - e_lo, prev[0] - e_hi}, key=abs):
                clear = e_hi + shift <= prev[0] or e_lo + shift >= prev[1]
                if clear and lo + shift >= 0 and hi + shift <= depth:
                    chosen = Ahead(shift, early)
                    break
        plans.append(chosen or Ahead())
        shift = chosen.shift if chosen else 0
        prev = None if span is None else (span[0] + shift, span[1] + shift)
    return plans


def shift_table(table: np.ndarray, shift: int) -> np.ndarray:
    """A layer's instruction table with its WGT addressing moved by `shift` rows (in place)."""
    if shift:
        table["sram_base"][_is_wgt_load(table)] += shift
        table["wgt_base"][table["opcode"] == Opcode.DEPTHWISE] += shift
    return table


def shift_uops(uops: np.ndarray, shift: int) -> np.ndarray:
    """A layer's micro-op table with its weight indices moved by `shift` rows (a copy)."""
    out = uops.copy()
    out["wgt"] += shift
    return out


def split_early(body: np.ndarray, early: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(the early loads with their flags dropped, the body without them: one that pushed
    leaves an empty LOAD with its flags in its place)."""
    ahead = body[list(early)].copy()
    rest = body.copy()
    keep = np.ones(len(body), bool)
    for k in early:
        flags = {f: bool(body[k][f]) for f in FLAGS}
        if any(flags.values()):
            rest[k] = insn_table([load_nop(**flags)])[0]
        else:
            keep[k] = False
    for f in FLAGS:
        ahead[f] = 0
    return ahead, rest[keep]


def last_load(table: np.ndarray) -> int:
    """Where loads go after a table's last load-stage instruction (0 where it has none)."""
    loads = np.flatnonzero(_load_stage(table))
    return int(loads[-1]) + 1 if loads.size else 0


def _load_stage(table: np.ndarray) -> np.ndarray:
    return (table["opcode"] == Opcode.LOAD) & (
        (table["mem"] == MemId.INP) | (table["mem"] == MemId.WGT)
    )


def check_early(
    program: Program, table: np.ndarray, early: range, before: range, name: str, uop_wgt=None
):
    """The early loads at chain rows `early`, inserted among the previous layer's rows
    `before` (its own early loads sit in the layer before it, but its GEMMs read their rows):
    LOAD WGTs with no flags, from constant buffers, into rows none of the previous layer's
    instructions touch, after every one of its load-stage instructions. Which loads went
    ahead and how far the layer's rows moved is the chain's to state (`verify_chain` compares
    the program with the chain it rebuilds); this checks that what it stated is safe.
    `uop_wgt`: the chain's micro-ops' weight indices, where decoded already."""
    eb = program.config.elem_bytes("wgt")
    spans = _constant_spans(program)
    if not (before.start <= early.start and early.stop <= before.stop):
        raise VerifyError(
            "junction",
            f"loads ahead of layer {name}'s junction at rows {early.start}..{early.stop - 1} "
            f"are not among that layer's rows {before.start}..{before.stop - 1}",
            None,
            None,
        )
    part = table[before.start : before.stop]  # its micro-op loads are among its rows
    own = np.arange(len(part))
    own = own[(own < early.start - before.start) | (own >= early.stop - before.start)]
    span = wgt_span(program, own, part, uop_wgt) if own.size else None
    after = _load_stage(table[early.stop : before.stop]).any()
    for k in early:
        row = table[k]
        lo = int(row["sram_base"])
        why = (
            "is not a LOAD WGT"
            if not _is_wgt_load(table[k : k + 1])[0]
            else "carries a token flag"
            if any(int(row[f]) for f in FLAGS)
            else "reads outside the constant buffers"
            if not _inside(row, eb, spans)
            else f"writes WGT rows that layer touches ({span[0]}..{span[1] - 1})"
            if span is not None and lo < span[1] and span[0] < lo + _load_rows(row)
            else "comes before that layer's last load"
            if after
            else None
        )
        if why:
            raise VerifyError(
                "junction", f"a load ahead of layer {name}'s junction {why}", k, format_row(row)
            )
