"""The ISA's word formats as Amaranth `lib.data` layouts: the RTL's signal shapes, built from
the same `IsaSpec` the numpy codec uses (so no bit offset is typed twice)."""

from __future__ import annotations

from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from tilecraft.hw.isa import IsaSpec, Opcode


def insn_layout(spec: IsaSpec, opcode: Opcode) -> data.FlexibleLayout:
    """The layout of one instruction kind over the whole instruction word."""
    fmt = spec.formats[Opcode(opcode)]
    return data.FlexibleLayout(
        fmt.bits,
        {
            f.name: data.Field(signed(f.width) if f.signed else unsigned(f.width), f.offset)
            for f in fmt
        },
    )


def insn_union(spec: IsaSpec) -> data.UnionLayout:
    """Every instruction kind's layout, viewable over one instruction word (`.load` for LOAD
    and STORE, which share theirs; `.gemm`, `.alu`, `.finish`)."""
    kinds = {
        op.name.lower(): insn_layout(spec, op)
        for op in Opcode
        if op in spec.formats and op != Opcode.STORE
    }
    return data.UnionLayout(kinds)


def uop_layout(spec: IsaSpec) -> data.FlexibleLayout:
    """The micro-op word's layout."""
    return data.FlexibleLayout(
        spec.uop.bits,
        {f.name: data.Field(unsigned(f.width), f.offset) for f in spec.uop},
    )
