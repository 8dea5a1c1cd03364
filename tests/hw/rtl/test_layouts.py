"""The ISA's Amaranth layouts (hw/rtl/layouts.py) match the numpy codec bit for bit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from isa_strategies import CONFIGS, config, programs

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import INSN_BITS, Opcode, Uop, encode, encode_uops, insn_table, isa_for
from tilecraft.hw.rtl.layouts import insn_layout, insn_union, uop_layout


@pytest.mark.parametrize("name", CONFIGS)
def test_amaranth_layout_matches_format(name):
    from amaranth.lib import data

    spec = isa_for(config(name))
    for op, fmt in spec.formats.items():  # the config's kinds (its units' included)
        layout = insn_layout(spec, op)
        assert isinstance(layout, data.FlexibleLayout)
        assert layout.size == INSN_BITS
        got = {fname: (f.offset, f.width, f.shape.signed) for fname, f in layout}
        assert got == {f.name: (f.offset, f.width, f.signed) for f in fmt}


@settings(max_examples=200, deadline=None)
@given(programs())
def test_amaranth_const_packs_like_numpy(case):
    spec, insns = case
    words = encode(spec, insns)
    for i, row in enumerate(insn_table(insns)):
        op = Opcode(int(row["opcode"]))
        const = insn_layout(spec, op).const({f.name: int(row[f.name]) for f in spec.formats[op]})
        assert const.as_value().value == int(words[i, 0]) | int(words[i, 1]) << 64, insns[i]


def test_uop_layout_matches_format():
    spec = isa_for(HwConfig())
    layout = uop_layout(spec)
    assert layout.size == spec.uop.bits == 32
    assert {n: (f.offset, f.width) for n, f in layout} == {
        f.name: (f.offset, f.width) for f in spec.uop
    }
    value = layout.const({"dst": 5, "src": 9, "wgt": 511}).as_value().value
    assert value == int(encode_uops(spec, [Uop(5, 9, 511)])[0])
    union = insn_union(spec)
    assert union.size == INSN_BITS
    assert {name for name, _ in union} == {"load", "gemm", "finish", "alu"}
