"""The ISA: encode/decode round trips (property-based), derived facts, errors, disassembly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from isa_strategies import CONFIGS, config, programs, uop_lists

from tilecraft.errors import ConfigError, EncodingError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import (
    FIELD_NAMES,
    INSN_BITS,
    TABLE_DTYPE,
    UOP_DTYPE,
    Alu,
    AluOp,
    Finish,
    Gemm,
    Load,
    MemId,
    Opcode,
    Store,
    Uop,
    as_words,
    clip_bounds,
    clip_fits,
    clip_operand,
    decode,
    decode_uops,
    disassemble,
    encode,
    encode_uops,
    format_uops,
    insn_table,
    isa_for,
    table_insns,
    uop_table,
)


@settings(max_examples=200, deadline=None)
@given(programs())
def test_instruction_round_trip(case):
    spec, insns = case
    table = insn_table(insns)
    words = encode(spec, insns)
    assert words.shape == (len(insns), 2)
    assert words.dtype == np.uint64
    decoded = decode(spec, words, strict=True)
    for name in FIELD_NAMES:
        assert np.array_equal(decoded[name], table[name]), name
    assert table_insns(decoded) == insns
    assert np.array_equal(encode(spec, decoded), words)  # table input encodes identically
    image = words.astype("<u8").tobytes()
    assert len(image) == 16 * len(insns)
    assert np.array_equal(as_words(image), words)
    assert np.array_equal(as_words(np.frombuffer(image, np.uint8)), words)


@settings(max_examples=200, deadline=None)
@given(uop_lists())
def test_uop_round_trip(case):
    spec, uops = case
    words = encode_uops(spec, uops)
    assert words.dtype == np.dtype(f"<u{spec.config.uop_bytes}")
    assert words.shape == (len(uops),)
    decoded = decode_uops(spec, words)
    assert decoded.dtype == UOP_DTYPE
    assert np.array_equal(decoded, uop_table(uops))
    assert np.array_equal(encode_uops(spec, decoded), words)


@pytest.mark.parametrize("name", CONFIGS)
def test_formats_fit_the_word(name):
    spec = isa_for(config(name))
    assert spec is isa_for(config(name))  # cached
    for op, fmt in spec.formats.items():
        assert fmt.bits == INSN_BITS
        ends = [f.offset + f.width for f in fmt]
        assert max(ends) <= INSN_BITS
        assert [f.offset for f in fmt][1:] == ends[:-1]  # packed LSB first, no gaps
        assert fmt.fields["opcode"] == spec.header.fields["opcode"], op
    assert spec.formats[Opcode.GEMM].fields["uop_bgn"] == spec.formats[Opcode.ALU].fields["uop_bgn"]
    assert spec.formats[Opcode.GEMM].fields["src_in"] == spec.formats[Opcode.ALU].fields["src_in"]
    assert spec.uop.bits == spec.config.uop_bytes * 8
    assert 2 ** spec.uop.fields["dst"].width >= spec.config.depth("acc")
    assert 2 ** spec.uop.fields["wgt"].width >= spec.config.depth("wgt")


# ---- errors ------------------------------------------------------------------------------
SPEC = isa_for(HwConfig())


def test_field_one_past_max():
    fields = SPEC.formats[Opcode.GEMM].fields
    assert fields["iter_out"].hi == 16383
    ok = decode(SPEC, encode(SPEC, [Gemm(uop_bgn=0, uop_end=1, iter_out=16383)]))
    assert ok["iter_out"][0] == 16383
    with pytest.raises(EncodingError, match=r"instruction 1 \(GEMM\): field iter_out = 16384"):
        encode(SPEC, [Finish(), Gemm(uop_bgn=0, uop_end=1, iter_out=16384)])
    with pytest.raises(EncodingError, match=r"iter_out = 16384 does not fit 14 bits"):
        encode(SPEC, [Gemm(uop_bgn=0, uop_end=1, iter_out=16384)])
    hi = SPEC.formats[Opcode.LOAD].fields["dram_base"].hi
    assert hi == 2**32 - 1
    with pytest.raises(EncodingError, match=rf"dram_base = {hi + 1} does not fit 32 bits"):
        encode(
            SPEC,
            [Load(mem=MemId.INP, sram_base=0, dram_base=hi + 1, y_size=1, x_size=1, x_stride=1)],
        )


def test_negative_unsigned_field():
    with pytest.raises(EncodingError, match=r"field sram_base = -1 does not fit 13 bits"):
        encode(SPEC, [Store(sram_base=-1, dram_base=0, y_size=1, x_size=1, x_stride=1)])
    with pytest.raises(EncodingError, match=r"micro-op 1: field src = -2 does not fit"):
        encode_uops(SPEC, [Uop(0, 0), Uop(0, -2)])


def test_uop_field_overflow():
    hi = SPEC.uop.fields["wgt"].hi
    assert hi == SPEC.config.depth("wgt") - 1
    with pytest.raises(EncodingError, match=rf"field wgt = {hi + 1} does not fit 9 bits"):
        encode_uops(SPEC, [Uop(0, 0, hi + 1)])


@pytest.mark.parametrize("imm", [-32769, 32768])
def test_imm_out_of_signed_range(imm):
    assert SPEC.formats[Opcode.ALU].fields["imm"].lo == -32768
    ok = [Alu(op=AluOp.ADD, uop_bgn=0, uop_end=1, use_imm=True, imm=v) for v in (-32768, 32767)]
    assert [i.imm for i in table_insns(decode(SPEC, encode(SPEC, ok)))] == [-32768, 32767]
    with pytest.raises(EncodingError, match=rf"field imm = {imm} does not fit 16 bits"):
        encode(SPEC, [Alu(op=AluOp.ADD, uop_bgn=0, uop_end=1, use_imm=True, imm=imm)])


def test_bad_memory_ids():
    load = Load(mem=MemId.OUT, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1)
    with pytest.raises(EncodingError, match=r"memory id 4 is invalid; LOAD takes UOP"):
        encode(SPEC, [load])
    store = Store(mem=MemId.INP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1)
    with pytest.raises(
        EncodingError, match=r"instruction 1: memory id 2 is invalid; STORE takes OUT"
    ):
        encode(SPEC, [Finish(), store])


def test_unknown_opcode():
    table = np.zeros(2, TABLE_DTYPE)
    table["opcode"] = [Opcode.FINISH, 6]
    with pytest.raises(EncodingError, match="instruction 1: unknown opcode 6"):
        encode(SPEC, table)
    words = np.array([[3, 0], [7 | 1 << 5, 0]], dtype=np.uint64)
    with pytest.raises(EncodingError, match=r"instruction 1: unknown opcode 7 \(word 0x0+27\)"):
        decode(SPEC, words, strict=True)
    loose = decode(SPEC, words)
    assert list(loose["opcode"]) == [3, 7]
    assert loose["push_prev"][1] == 0  # fields of an unknown kind are left zero
    with pytest.raises(EncodingError, match="unknown opcode 7"):
        table_insns(loose)
    lines = disassemble(loose)
    assert lines[1] == "1: <unknown opcode 7>"


def test_bad_tables_and_images():
    with pytest.raises(EncodingError, match="expected an instruction table"):
        encode(SPEC, np.zeros(3, dtype=[("opcode", np.int64)]))
    with pytest.raises(EncodingError, match="instruction 1 is a str, not an instruction"):
        insn_table([Finish(), "GEMM"])
    with pytest.raises(EncodingError, match="17 bytes is not a whole number of 16-byte words"):
        as_words(bytes(17))
    with pytest.raises(EncodingError, match=r"must have shape \(N, 2\), not \(4,\)"):
        decode(SPEC, np.zeros(4, np.uint64))
    with pytest.raises(EncodingError, match="unknown dependence flag"):
        Finish().with_flags(pop_later=True)
    assert Finish().with_flags(push_next=True).push_next


def test_config_too_wide_for_word():
    cfg = HwConfig(
        log_acc_buff=22,
        log_inp_buff=22,
        log_wgt_buff=24,
        log_uop_buff=20,
        log_block_in=1,
        log_block_out=1,
    )
    with pytest.raises(
        ConfigError,
        match=r"LOAD/STORE field pad_value \(8 bits at offset 128\) "
        r"does not fit the 128-bit word",
    ):
        isa_for(cfg)


# ---- disassembler --------------------------------------------------------------------------
def test_disassembler_lines():
    insns = [
        Load(mem=MemId.UOP, sram_base=0, dram_base=512, y_size=1, x_size=9, x_stride=9),
        Load(
            mem=MemId.INP,
            sram_base=0,
            dram_base=0,
            y_size=2,
            x_size=3,
            x_stride=3,
            x_pad0=1,
            pop_next=True,
        ),
        Gemm(reset=True, uop_bgn=0, uop_end=2, iter_out=4, pop_prev=True, push_next=True),
        Alu(op=AluOp.SHR, uop_bgn=0, uop_end=2, use_imm=True, imm=-3),
        Alu(op=AluOp.ADD, uop_bgn=0, uop_end=2),
        Store(sram_base=0, dram_base=64, y_size=1, x_size=2, x_stride=2),
        Load(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0),
        Finish(pop_next=True, push_prev=True),
    ]
    lines = disassemble(decode(SPEC, encode(SPEC, insns)))
    assert len(lines) == len(insns)
    assert [line.split(":")[0] for line in lines] == [str(i) for i in range(len(insns))]
    assert "LOAD   UOP sram=0 dram=512 y=1 x=9 stride=9" in lines[0]
    assert "|" not in lines[0]
    assert "pad(y0,y1,x0,x1)=(0,0,1,0)" in lines[1] and lines[1].endswith("| pop_next")
    assert "GEMM   reset uop[0:2) loop 4x1" in lines[2]
    assert lines[2].endswith("| pop_prev push_next")
    assert "ALU    SHR imm=-3" in lines[3]
    assert "ALU    ADD tensor" in lines[4]
    assert "STORE  OUT" in lines[5]
    assert lines[6].endswith("(sync only)")
    assert lines[7] == "7: FINISH  | pop_next push_prev"
    assert disassemble(decode(SPEC, encode(SPEC, insns[:1])), start=98)[0].startswith("98: LOAD")


def test_format_uops():
    lines = format_uops(decode_uops(SPEC, encode_uops(SPEC, [Uop(1, 2, 3), Uop(4, 5)])))
    assert lines == ["uop 0: dst=1 src=2 wgt=3", "uop 1: dst=4 src=5 wgt=0"]


# ---- bulk ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["default", "2x16x16", "1x8x8+dw3"])
def test_bulk_table_round_trip(name):
    spec = isa_for(config(name))
    n = 100_000
    rng = np.random.default_rng(1)
    table = np.zeros(n, TABLE_DTYPE)
    ops = rng.choice([int(op) for op in spec.formats], n)  # the config's kinds
    table["opcode"] = ops
    for op, fmt in spec.formats.items():
        rows = np.flatnonzero(ops == op)
        for f in fmt:
            if f.name != "opcode":
                table[f.name][rows] = rng.integers(f.lo, f.hi, rows.size, endpoint=True)
    loads, stores = ops == Opcode.LOAD, ops == Opcode.STORE
    table["mem"][loads] = rng.integers(0, 4, loads.sum())
    table["mem"][stores] = MemId.OUT
    table["alu_op"][ops == Opcode.ALU] %= len(AluOp)
    words = encode(spec, table)
    assert words.shape == (n, 2)
    back = decode(spec, words, strict=True)
    assert np.array_equal(back, table)
    assert table["imm"].min() < 0  # the signed field was exercised
    assert np.array_equal(as_words(words.astype("<u8").tobytes()), words)


@given(st.integers(-128, 127), st.integers(-128, 127))
def test_clip_operand_round_trip(lo, hi):
    if lo > hi:
        with pytest.raises(ValueError, match=r"CLIP bounds \[.*lo <= hi"):
            clip_operand(lo, hi)
        return
    imm = clip_operand(lo, hi)
    assert -(2**15) <= imm < 2**15  # a signed 16-bit immediate
    assert clip_bounds(imm) == (lo, hi)
    # a tensor operand's lane: only its low 16 bits count, whatever is above them
    assert clip_bounds((imm & 0xFFFF) | (0x5A5A << 16)) == (lo, hi)


@pytest.mark.parametrize("lo, hi", [(-129, 0), (0, 128), (5, 4)])
def test_clip_bounds_that_do_not_fit(lo, hi):
    assert not clip_fits(lo, hi)
    with pytest.raises(ValueError, match=f"CLIP bounds \\[{lo}, {hi}\\]"):
        clip_operand(lo, hi)


# ---- the requantization unit's STORE fields --------------------------------------------------
UNIT = isa_for(HwConfig(requant_lanes=8))


def test_a_requantizing_store_round_trips_on_a_config_with_the_unit():
    store = Store(sram_base=5, dram_base=64, y_size=2, x_size=3, x_stride=3, requant=True,
                  param_base=UNIT.config.depth("acc") - 3)  # fmt: skip
    table = decode(UNIT, encode(UNIT, [store]))
    assert table["requant"][0] == 1 and table["param_base"][0] == store.param_base
    assert "requant params=" in disassemble(table)[0]
    # the same STORE without requant encodes as it does on a config without the unit
    plain = Store(sram_base=5, dram_base=64, y_size=2, x_size=3, x_stride=3)
    assert np.array_equal(encode(UNIT, [plain]), encode(SPEC, [plain]))
    assert "\nSTORE:" in UNIT.describe() and "\nSTORE:" not in SPEC.describe()


def test_a_requantizing_store_is_refused_on_a_config_without_the_unit():
    store = Store(sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1, requant=True)
    message = r"instruction 0 \(STORE\) sets requant = 1, but config 1x16x16\S* has no requant"
    with pytest.raises(EncodingError, match=message + r".*requant_lanes > 0"):
        encode(SPEC, [store])


def test_param_base_past_the_accumulator_does_not_encode():
    depth = UNIT.config.depth("acc")
    store = Store(sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1, requant=True,
                  param_base=depth)  # fmt: skip
    with pytest.raises(EncodingError, match=rf"field param_base = {depth} does not fit"):
        encode(UNIT, [store])
