"""Several compiled layers as one program: one submission, activations handed from layer to layer
in DRAM in the accelerator's blocked layout (never unpacked on the host).

Each layer's buffers are bound to network tensors by name; a tensor one layer stores and a later
one loads becomes one buffer, placed in an activation arena by liveness (`arena.plan_arena`), so
buffers whose lives do not overlap share bytes. Instructions are relocated (only `dram_base` of
LOAD/STORE moves: each buffer by its new offset, micro-op loads by the concatenated micro-op
region), and each layer boundary becomes a barrier: the layer's FINISH is replaced by an empty
compute LOAD that waits for its last STORE and tells the load stage, and the next layer starts
with an empty load-stage LOAD that waits for that. The verifier's DRAM ordering rule checks the
result like any program.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.compiler.graph.arena import Interval, plan_arena
from tilecraft.compiler.verify import verify
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import BUFFERS, HwConfig
from tilecraft.hw.isa import (
    BUFFER_NAMES,
    INSN_BYTES,
    Load,
    MemId,
    Opcode,
    encode,
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
    return np.array_equal(w.pack(cfg, probe.reshape(w.logical)),
                          r.pack(cfg, probe.reshape(r.logical)))  # fmt: skip


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
    buffers = [BufferSpec(n, role, b.shape, b.dtype, arena.offsets[n], b.layout, b.value_range)
               for n, (role, b) in specs.items()]  # fmt: skip
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
    eb = np.where(op[rows] == Opcode.STORE, cfg.elem_bytes("out"),
                  np.vectorize(size_of.__getitem__, otypes=[np.int64])(mem[rows]))  # fmt: skip
    byte = base[rows] * eb
    bufs = sorted(p.buffers, key=lambda b: b.offset)
    starts = np.array([b.offset for b in bufs])
    ends = np.array([b.offset + b.nbytes for b in bufs])
    k = np.searchsorted(starts, byte, side="right") - 1
    if (k < 0).any() or (byte >= ends[np.maximum(k, 0)]).any():
        bad = int(rows[np.flatnonzero((k < 0) | (byte >= ends[np.maximum(k, 0)]))[0]])
        raise ScheduleError(f"instruction {bad} of {p.name} addresses DRAM byte "
                            f"{int(base[bad]) * int(eb[np.searchsorted(rows, bad)])} outside "
                            f"its buffers")  # fmt: skip
    delta = np.array([where[_global(i, part, b)] - b.offset for b in bufs])[k]
    odd = np.flatnonzero(delta % eb)
    if odd.size:
        buf = bufs[int(k[odd[0]])]
        raise ScheduleError(f"buffer {buf.name} moves by {int(delta[odd[0]])} bytes, not a "
                            f"whole number of {int(eb[odd[0]])}-byte elements")  # fmt: skip
    base[rows] += delta // eb
    return table


def chain_programs(parts: list[Part], exports: set[str], name: str = "network",
                   budget: int = 128 << 20, check: bool = True):  # fmt: skip
    """One program running `parts` in order; `exports` are the tensors the host reads after.
    Returns (program, arena)."""
    if not parts:
        raise ScheduleError("a chain needs at least one layer")
    cfg = parts[0].program.config
    buffers, constants, arena = _buffers(parts, exports, budget)
    align = max(cfg.elem_bytes(b) for b in BUFFERS)
    top = -(-arena.peak_bytes // align) * align
    where = {b.name: b.offset for b in buffers}
    uops = np.concatenate([p.program.uops for p in parts])
    uop_offset = top
    tables, before = [], 0
    for i, part in enumerate(parts):
        body = _relocate(cfg, i, part, where, uop_offset // cfg.uop_bytes + before)
        before += len(part.program.uops)
        if i > 0:  # the load stage waits for the previous layer's last compute instruction
            tables.append(insn_table([Load(mem=MemId.INP, sram_base=0, dram_base=0, y_size=0,
                                           x_size=0, x_stride=0, pop_next=True)]))  # fmt: skip
        if i + 1 < len(parts):  # FINISH becomes a no-op that hands over to the next layer
            last = body[-1]
            if last["opcode"] != Opcode.FINISH:
                raise ScheduleError(f"layer {part.program.name} does not end with FINISH")
            body = body[:-1]
            handover = Load(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=0, x_size=0,
                            x_stride=0, pop_prev=bool(last["pop_prev"]),
                            pop_next=bool(last["pop_next"]), push_prev=True)  # fmt: skip
            body = np.concatenate([body, insn_table([handover])])
        tables.append(body)
    words = encode(isa_for(cfg), np.concatenate(tables))
    insn_offset = -(-(uop_offset + uops.nbytes) // align) * align
    end = insn_offset + len(words) * INSN_BYTES
    program = Program(config=cfg, insns=words, uops=uops, buffers=tuple(buffers),
                      constants=constants, insn_offset=insn_offset, uop_offset=uop_offset,
                      dram_size=-(-end // DRAM_PAGE) * DRAM_PAGE, name=name)  # fmt: skip
    if check:
        verify(program)
    return program, arena
