"""Several compiled layers as one program: one submission, activations handed from layer to layer
in DRAM in the accelerator's blocked layout (never unpacked on the host).

Each layer's buffers are bound to network tensors by name; a tensor one layer stores and a later
one loads becomes one buffer, placed in an activation arena by liveness (`arena.plan_arena`), so
buffers whose lives do not overlap share bytes. Instructions are relocated (`dram_base` of
LOAD/STORE: each buffer by its new offset, micro-op loads by the concatenated micro-op region;
and a layer's WGT rows where its weights go ahead), and each layer boundary becomes a barrier:
the layer's FINISH is replaced by an empty compute LOAD that waits for its last STORE and tells
the load stage, and the next layer starts with an empty load-stage LOAD that waits for that.
Only a layer's first weights go ahead of it, loaded while the layer before computes
(`weights_ahead`). The verifier's DRAM ordering rule checks the result like any program.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.compiler.analysis.tokens import compute_nop, load_nop
from tilecraft.compiler.analysis.verify import verify, verify_queues
from tilecraft.compiler.graph.arena import Interval, plan_arena
from tilecraft.compiler.graph.weights_ahead import (
    Ahead,
    check_early,
    last_load,
    plan_ahead,
    shift_table,
    shift_uops,
    split_early,
)
from tilecraft.errors import ScheduleError, VerifyError
from tilecraft.hw.config import BUFFERS, HwConfig
from tilecraft.hw.isa import (
    BUFFER_NAMES,
    INSN_BYTES,
    MemId,
    Opcode,
    decode,
    encode,
    encode_uops,
    format_row,
    insn_table,
    isa_for,
)
from tilecraft.runtime.buffers import BufferSpec, Role
from tilecraft.runtime.program import DRAM_PAGE, Program


class LayoutMismatch(ScheduleError):
    """A layer reads a tensor in another layout than its producer stores it: the layers stay
    separate programs and the host re-packs between them."""


@dataclass(frozen=True)
class Part:
    """One layer of a chain: its program and {buffer name: network tensor} for the buffers it
    shares with other layers or the host."""

    program: Program
    bindings: dict[str, str]


def compatible(cfg: HwConfig, writer: BufferSpec, reader: BufferSpec) -> bool:
    """Whether what `writer` stores is byte for byte what `reader` loads, as the same values in
    the same order (a (N, C, 1, 1) activation and its (N, C) rows can be): checked by packing a
    probe of distinct values through both layouts."""
    w, r = writer.layout, reader.layout
    if w is None or r is None or writer.shape != reader.shape or writer.dtype != reader.dtype:
        return False
    size = int(np.prod(w.logical))
    if size != int(np.prod(r.logical)):
        return False
    probe = np.arange(1, size + 1, dtype=np.int64)
    return np.array_equal(
        w.pack(cfg, probe.reshape(w.logical)), r.pack(cfg, probe.reshape(r.logical))
    )


def _global(i: int, part: Part, buf: BufferSpec) -> str:
    return part.bindings.get(buf.name, f"{part.program.name}.{buf.name}")


def _buffers(parts: list[Part], exports: set[str], budget: int):
    cfg = parts[0].program.config
    members: dict[str, list[tuple[int, BufferSpec]]] = {}
    for i, part in enumerate(parts):
        if cfg.arch_mismatches(part.program.config):
            raise ScheduleError(f"layer {part.program.name} is for another config")
        for b in part.program.buffers:
            members.setdefault(_global(i, part, b), []).append((i, b))
    last = len(parts) - 1
    specs, intervals, constants = {}, [], {}
    for name, group in members.items():
        writers = [(i, b) for i, b in group if b.role == Role.OUTPUT]
        readers = [(i, b) for i, b in group if b.role != Role.OUTPUT]
        if len(writers) > 1:
            raise ScheduleError(f"tensor {name!r} is written by two layers")
        if writers:
            wi, wb = writers[0]
            for ri, rb in readers:
                if ri <= wi or not compatible(cfg, wb, rb):
                    raise LayoutMismatch(
                        f"layer {parts[ri].program.name} cannot read {name!r} as "
                        f"{parts[wi].program.name} stores it"
                    )
            role = Role.OUTPUT if name in exports else Role.SCRATCH
            first, end = wi, (last if name in exports else max([wi] + [i for i, _ in readers]))
            base = wb
        else:
            base = group[0][1]
            role = base.role
            if role != Role.CONSTANT and any(not compatible(cfg, base, b) for _, b in group[1:]):
                raise LayoutMismatch(f"layers read {name!r} in different layouts")
            if any(b.shape != base.shape or b.dtype != base.dtype for _, b in group):
                raise LayoutMismatch(f"layers disagree on the stored shape of {name!r}")
            first, end = 0, last  # inputs live through the whole chain: nothing overwrites them
            if role == Role.CONSTANT:
                i = group[0][0]
                constants[name] = parts[i].program.constants[base.name]
        specs[name] = (role, base)
        intervals.append(Interval(name, base.nbytes, first, end))
    align = max(cfg.elem_bytes(b) for b in BUFFERS)  # any element size can address a buffer
    arena = plan_arena(intervals, budget, align)
    buffers = [
        BufferSpec(n, role, b.shape, b.dtype, arena.offsets[n], b.layout, b.value_range)
        for n, (role, b) in specs.items()
    ]
    return buffers, constants, arena


def _relocate(cfg, i: int, part: Part, where: dict[str, int], uop_base: int) -> np.ndarray:
    """The layer's instruction table with DRAM addresses moved to the chain's layout (one
    pass over the table's columns)."""
    p = part.program
    table = p.table().copy()
    op, mem, base = table["opcode"], table["mem"], table["dram_base"]
    moves = ((op == Opcode.LOAD) | (op == Opcode.STORE)) & (table["x_size"] != 0)
    moves &= table["y_size"] != 0
    uop = moves & (op == Opcode.LOAD) & (mem == MemId.UOP)
    base[uop] += uop_base - p.uop_offset // cfg.uop_bytes
    rows = np.flatnonzero(moves & ~uop)
    if not rows.size:
        return table
    size_of = {int(m): cfg.elem_bytes(name) for m, name in BUFFER_NAMES.items()}
    eb = np.where(
        op[rows] == Opcode.STORE,
        cfg.elem_bytes("out"),
        np.vectorize(size_of.__getitem__, otypes=[np.int64])(mem[rows]),
    )
    byte = base[rows] * eb
    bufs = sorted(p.buffers, key=lambda b: b.offset)
    starts = np.array([b.offset for b in bufs])
    ends = np.array([b.offset + b.nbytes for b in bufs])
    k = np.searchsorted(starts, byte, side="right") - 1
    # the transfer's last byte: y_size rows of x_size elements, x_stride apart
    last = (
        byte
        + ((table["y_size"][rows] - 1) * table["x_stride"][rows] + table["x_size"][rows]) * eb
        - 1
    )
    outside = (k < 0) | (last >= ends[np.maximum(k, 0)])
    if outside.any():
        j = int(np.flatnonzero(outside)[0])
        span = f"[{int(byte[j])}, {int(last[j]) + 1})"
        raise VerifyError(
            "dram",
            f"transfers DRAM bytes {span} of {p.name}, not inside one of "
            f"its buffers: the chain moves each buffer on its own",
            int(rows[j]),
            format_row(table[rows[j]]),
        )
    delta = np.array([where[_global(i, part, b)] - b.offset for b in bufs])[k]
    odd = np.flatnonzero(delta % eb)
    if odd.size:
        buf = bufs[int(k[odd[0]])]
        raise ScheduleError(
            f"buffer {buf.name} moves by {int(delta[odd[0]])} bytes, not a "
            f"whole number of {int(eb[odd[0]])}-byte elements"
        )
    base[rows] += delta // eb
    return table


def chain_programs(
    parts: list[Part],
    exports: set[str],
    name: str = "network",
    budget: int = 128 << 20,
    check: bool = True,
    verified_parts: bool = False,
):
    """One program running `parts` in order; `exports` are the tensors the host reads after.
    Returns (program, arena). With `check`, the program is verified (`verify_chain`); the
    parts too unless `verified_parts` (a network's layers are verified where compiled)."""
    if not parts:
        raise ScheduleError("a chain needs at least one layer")
    cfg = parts[0].program.config
    buffers, constants, arena = _buffers(parts, exports, budget)
    align = max(cfg.elem_bytes(b) for b in BUFFERS)
    top = -(-arena.peak_bytes // align) * align
    where = {b.name: b.offset for b in buffers}
    plans = plan_ahead(cfg, [p.program for p in parts])
    uops = _chain_uops(cfg, parts, plans)
    uop_offset = top
    table, _, _ = _chain_table(cfg, parts, where, uop_offset // cfg.uop_bytes, plans)
    words = encode(isa_for(cfg), table)
    insn_offset = -(-(uop_offset + uops.nbytes) // align) * align
    end = insn_offset + len(words) * INSN_BYTES
    program = Program(
        config=cfg,
        insns=words,
        uops=uops,
        buffers=tuple(buffers),
        constants=constants,
        insn_offset=insn_offset,
        uop_offset=uop_offset,
        dram_size=-(-end // DRAM_PAGE) * DRAM_PAGE,
        name=name,
    )
    if check:
        verify_chain(program, parts, verified_parts)
    return program, arena


def _chain_table(
    cfg: HwConfig, parts: list[Part], where: dict[str, int], uop_base: int, plans: list[Ahead]
):
    """The chain's instructions: each part's, relocated (buffers to `where`, micro-ops to
    their place after `uop_base`, WGT rows by its `Ahead.shift`), with a junction between
    parts, and each part's early weights after the previous part's last load. Also returns,
    per part, the range of chain rows it occupies (the next part's early loads placed in it
    included; its own early loads and its junction outside it) and the range of its early
    loads."""
    bodies, aheads, before = [], [], 0
    for i, (part, plan) in enumerate(zip(parts, plans)):
        body = shift_table(_relocate(cfg, i, part, where, uop_base + before), plan.shift)
        before += len(part.program.uops)
        ahead = None
        if plan.early:
            ahead, body = split_early(body, plan.early)
        if i + 1 < len(parts):  # FINISH becomes a no-op that hands over to the next layer
            last = body[-1]
            if last["opcode"] != Opcode.FINISH:
                raise ScheduleError(f"layer {part.program.name} does not end with FINISH")
            handover = compute_nop(
                pop_prev=bool(last["pop_prev"]), pop_next=bool(last["pop_next"]), push_prev=True
            )
            body = np.concatenate([body[:-1], insn_table([handover])])
        bodies.append(body)
        aheads.append(ahead)
    tables, placed, early, at = [], [], [None] * len(parts), 0
    for i, body in enumerate(bodies):
        if i > 0:  # the load stage waits for the previous layer's last compute instruction
            tables.append(insn_table([load_nop(pop_next=True)]))
            at += 1
        nxt = aheads[i + 1] if i + 1 < len(parts) else None
        if nxt is not None:  # the next layer's first weights, after this one's last load
            cut = last_load(body)
            body = np.concatenate([body[:cut], nxt, body[cut:]])
            early[i + 1] = range(at + cut, at + cut + len(nxt))
        tables.append(body)
        placed.append(range(at, at + len(body)))
        at += len(body)
    return np.concatenate(tables), placed, early


def _chain_uops(cfg: HwConfig, parts: list[Part], plans: list[Ahead]) -> np.ndarray:
    """The chain's micro-ops: each part's, their weight indices moved by its `Ahead.shift`."""
    spec = isa_for(cfg)
    return np.concatenate(
        [
            encode_uops(spec, shift_uops(p.program.uop_table(), a.shift))
            if a.shift
            else p.program.uops
            for p, a in zip(parts, plans)
        ]
    )


def verify_chain(program: Program, parts: list[Part], verified_parts: bool = False) -> None:
    """Verify a chain by its parts. Each part is verified whole (every rule of `verify`,
    dataflow included); a junction is a compute barrier that takes the part's FINISH's tokens
    (the finish rule: every instruction of the part is complete when it starts) and hands a
    token to the next part's first load-stage instruction, so every instruction of a part is
    complete before any of the next starts (the load stage is in order behind that LOAD, the
    compute stage behind the barrier, and each store behind a compute instruction of its own
    part): no hazard, on a scratchpad or in DRAM, crosses a junction, but for the next part's
    early weights (`weights_ahead`: loads of constants into WGT rows the part they join leaves
    alone, `check_early`). What the joining adds is checked here: that the program is its
    parts, relocated (WGT rows moved by their shift), and the junctions, nothing else;
    relocation (each transfer inside one buffer; no two buffers of a part sharing bytes);
    the early loads; token balance and deadlock over the whole program (`verify_queues`)."""
    if not verified_parts:
        for part in parts:
            verify(part.program)
    cfg = program.config
    table = program.table()
    plans = plan_ahead(cfg, [p.program for p in parts])
    offsets = {b.name: b.offset for b in program.buffers}
    uop_base = program.uop_offset // cfg.uop_bytes
    expected, placed, early = _chain_table(cfg, parts, offsets, uop_base, plans)
    _check_junctions(table, parts, placed)
    where = {b.name: b for b in program.buffers}
    for i, part in enumerate(parts):
        spans = sorted(
            {
                (
                    where[_global(i, part, b)].offset,
                    where[_global(i, part, b)].nbytes,
                    _global(i, part, b),
                )
                for b in part.program.buffers
            }
        )
        for (lo, n, a), (lo2, _, b) in zip(spans, spans[1:]):
            if lo + n > lo2:
                raise VerifyError(
                    "dram",
                    f"layer {part.program.name}'s buffers {a} and {b} "
                    f"share arena bytes [{lo2}, {lo + n})",
                    None,
                    None,
                )
    if not np.array_equal(program.uops, _chain_uops(cfg, parts, plans)):
        raise VerifyError(
            "chain",
            "the micro-ops are not the layers' in order (weights moved by their shift)",
            None,
            None,
        )
    if len(table) != len(expected) or not np.array_equal(table, expected):
        k = next(
            k
            for k in range(min(len(table), len(expected)) + 1)
            if k == len(table) or k == len(expected) or table[k] != expected[k]
        )
        raise VerifyError(
            "chain",
            f"instruction {k} is not the layers' relocated instruction or "
            f"junction there ({len(table)} instructions, {len(expected)} expected)",
            k if k < len(table) else None,
            format_row(table[k]) if k < len(table) else None,
        )
    uop_wgt = program.uop_table()["wgt"]
    for i, rows in enumerate(early):
        if rows is not None:
            name = parts[i - 1].program.name
            check_early(program, table, rows, placed[i - 1], name, uop_wgt)
    verify_queues(program, table)


def _check_junctions(table: np.ndarray, parts: list[Part], placed: list[range]) -> None:
    """At each junction: the barrier (a compute LOAD of nothing with the part's FINISH's pops,
    pushing to the load stage, nothing else) and the next part's first instruction (a LOAD
    INP of nothing that pops it, nothing else)."""
    flags = ("pop_prev", "pop_next", "push_prev", "push_next")
    for part, rows in zip(parts[:-1], placed):
        p = part.program
        finish = decode(isa_for(p.config), p.insns[-1:])[0]  # its FINISH alone
        handover = dict(
            pop_prev=finish["pop_prev"], pop_next=finish["pop_next"], push_prev=1, push_next=0
        )
        wants = [
            (rows.stop - 1, MemId.UOP, handover),
            (rows.stop, MemId.INP, dict(pop_prev=0, pop_next=1, push_prev=0, push_next=0)),
        ]
        for k, mem, want in wants:
            row = table[k]
            empty = all(
                int(row[f]) == 0
                for f in ("x_size", "y_size", "y_pad0", "y_pad1", "x_pad0", "x_pad1")
            )
            if (
                row["opcode"] != Opcode.LOAD
                or row["mem"] != mem
                or not empty
                or any(int(row[f]) != int(want[f]) for f in flags)
            ):
                raise VerifyError(
                    "junction",
                    f"the junction after layer {part.program.name} "
                    f"is not the barrier the chain's verification assumes",
                    k,
                    format_row(row),
                )
