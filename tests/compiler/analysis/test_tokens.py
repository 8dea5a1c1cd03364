"""The token pass under the compute stage's out-of-order units: a token from one unit does not
vouch for an older instruction that may still run on the other."""

import numpy as np
import pytest

from tilecraft.compiler.analysis import tokens
from tilecraft.compiler.analysis.tokens import insert_tokens
from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.operator.builder import ProgramBuilder
from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.errors import VerifyError
from tilecraft.hw.config import preset
from tilecraft.hw.isa import (
    Alu,
    AluOp,
    Finish,
    Gemm,
    Load,
    MemId,
    Store,
    Uop,
    format_row,
    insn_table,
)
from tilecraft.ops import Conv2d, Epilogue
from tilecraft.runtime import get_device
from tilecraft.runtime.buffers import Role

CFG = preset("default")
HALF = CFG.acc_bank_rows


def _program(alu_row: int, flags=None):
    """A long GEMM on rows [HALF-64, HALF), an ALU on `alu_row`, a STORE of rows
    [HALF-64, HALF] (both halves when alu_row is HALF)."""
    pb, insns, uops, region = _build(alu_row)
    insns = flags if flags is not None else insert_tokens(CFG, insns, uops, region)
    return pb.build(insns), uops, region, insns


def _parts(alu_row: int, imm: int = 7):
    return _build(alu_row, imm)[1:]


def _build(alu_row: int, imm: int = 7):
    pb = ProgramBuilder(CFG, "units")
    acc = pb.buffer("acc", Role.INPUT, (65, CFG.batch, CFG.block_out), np.int32)
    out = pb.buffer("out", Role.OUTPUT, (65, CFG.batch, CFG.block_out), np.int8)
    uops = [Uop(HALF - 64, 0, 0), Uop(alu_row, 0, 0)]
    region = pb.place_uops(uops)
    a = pb.elem(acc, "acc")
    insns = [
        pb.load_uops(),
        Load(mem=MemId.ACC, sram_base=HALF - 64, dram_base=a, y_size=1, x_size=65, x_stride=65),
        Gemm(reset=True, uop_bgn=0, uop_end=1, iter_out=64, iter_in=8, dst_out=1),
        Alu(op=AluOp.ADD, use_imm=True, imm=imm, uop_bgn=1, uop_end=2),
        Store(sram_base=HALF - 64, dram_base=pb.elem(out, "out"), y_size=1, x_size=65, x_stride=65),
        Finish(),
    ]
    return pb, insns, uops, region


def test_a_store_needing_both_units_gets_a_no_op_that_waits_for_both():
    program, *_ = _program(HALF)
    lines = [format_row(r) for r in program.table()]
    nop = next(i for i, line in enumerate(lines) if "sync only" in line)
    assert lines[nop - 1].startswith("ALU") and lines[nop + 1].startswith("STORE")
    assert "push_next" in lines[nop] and "pop_prev" in lines[nop + 1]
    verify(program)
    acc = np.zeros((65, CFG.batch, CFG.block_out), np.int32)
    report = get_device("sim").run(program, {"acc": acc}, trace=True).report
    ends = {e["name"]: e["args"] for e in report.trace["traceEvents"] if e["ph"] == "X"}
    assert ends["ALU"]["end_cycle"] < ends["GEMM"]["end_cycle"] < ends["STORE"]["start_cycle"]


def test_one_token_is_enough_when_the_units_cannot_overlap():
    program, _, _, insns = _program(HALF - 1)  # in the GEMM's half: the ALU waits for it
    assert not any(isinstance(i, Load) and i.x_size == 0 for i in insns)
    verify(program)


def test_the_verifier_refuses_a_token_from_the_younger_unit_alone():
    _, uops, region, insns = _program(HALF)
    bad = [i for i in insns if not (isinstance(i, Load) and i.x_size == 0)]
    alu = next(k for k, i in enumerate(bad) if isinstance(i, Alu))
    bad[alu] = bad[alu].with_flags(push_next=True)
    program, *_ = _program(HALF, flags=bad)
    with pytest.raises(VerifyError, match="GEMM") as info:
        verify(program)
    assert info.value.rule == "raw"


def test_convolutions_need_no_no_ops():
    """The conv schedule runs a tile's epilogue under the next tile's GEMMs; its stores need
    only their own half, so no no-op (and no lost overlap)."""
    op = Conv2d(1, 32, 14, 14, 64, kernel=3, pad=1)
    program = conv2d(CFG, op, Epilogue(bias=True, shift=8, relu=True))
    assert not any("sync only" in format_row(r) for r in program.table())


def test_programs_of_one_footprint_share_a_plan_and_keep_their_immediates(monkeypatch):
    """Layers of one shape differ only in the requantization's immediates: the second takes
    the first's token plan (the same flags and no-ops), with its own immediates; a MUL by 0,
    which clears a row instead of reading it, is another footprint and is planned afresh."""
    tokens.clear_plans()
    first = _program(HALF)[3]
    insns, uops, region = _parts(HALF, imm=9)
    calls = []
    real = tokens._plan
    monkeypatch.setattr(tokens, "_plan", lambda *a: calls.append(1) or real(*a))
    shifted = insert_tokens(CFG, insns, uops, region)
    assert not calls  # served from the first's plan
    mul0 = Alu(op=AluOp.MUL, use_imm=True, imm=0, uop_bgn=1, uop_end=2)
    cleared = insert_tokens(CFG, [mul0 if isinstance(i, Alu) else i for i in insns], uops, region)
    assert calls  # planned again
    rows = [format_row(r) for r in insn_table(shifted)]
    assert rows != [format_row(r) for r in insn_table(first)]
    strip = [(type(i), i.pop_prev, i.pop_next, i.push_prev, i.push_next) for i in first]
    assert [(type(i), i.pop_prev, i.pop_next, i.push_prev, i.push_next) for i in shifted] == strip
    assert [i.imm for i in shifted if isinstance(i, Alu)] == [9]
    assert [i.imm for i in cleared if isinstance(i, Alu)] == [0]


@pytest.mark.parametrize("store_first", [True, False])
def test_the_load_and_store_stages_order_their_inp_writes_through_a_compute_no_op(store_first):
    """A STORE into INP and an INP LOAD on the same rows (`HwConfig.store_to_inp`): the two
    stages have no queue between them, so a compute no-op takes the earlier one's token and
    hands it on; the program verifies, and the later write in program order is what a GEMM
    then reads (an identity weight block copies the rows out)."""
    from tilecraft.hw.isa.requant import pack_clip, pack_scale
    from tilecraft.ops.requant import float32_requantize, scale_fields

    cfg = preset("default").replace(requant_lanes=8).with_store_to_inp()
    b, n, rows = cfg.block_out, 4, 100
    rng = np.random.default_rng(3)
    data = rng.integers(-5000, 5000, (n, 1, b))
    scale = np.full(b, 0.01, np.float32)
    f = scale_fields(scale)
    clip = np.full(b, pack_clip(0, -128, 127))
    params = np.stack([np.zeros(b), pack_scale(f.significand, f.exponent), clip])
    acc_rows = np.concatenate([data, params[:, None, :]]).astype(np.int32)
    x = rng.integers(-128, 128, (n, 1, b)).astype(np.int8)
    pb = ProgramBuilder(cfg, "two-writers")
    acc = pb.buffer("acc", Role.CONSTANT, acc_rows.shape, np.int32, data=acc_rows)
    xin = pb.buffer("x", Role.CONSTANT, x.shape, np.int8, data=x)
    eye = pb.buffer("eye", Role.CONSTANT, (1, b, b), np.int8, data=np.eye(b, dtype=np.int8)[None])
    out = pb.buffer("out", Role.OUTPUT, (n, 1, b), np.int8)
    dst = cfg.acc_bank_rows + 8
    uops = [Uop(dst, 0, 0), Uop(dst, rows, 0)]
    region = pb.place_uops(uops)

    def dma(mem, sram, buf, count):
        at = pb.elem(buf, "acc" if mem == MemId.ACC else mem.name.lower())
        return Load(mem=mem, sram_base=sram, dram_base=at, y_size=1, x_size=count, x_stride=count)

    into_inp = Store(
        sram_base=0, dram_base=rows, y_size=1, x_size=n, x_stride=n, requant=True, param_base=n,
        to_inp=True,
    )  # fmt: skip
    writes = [into_inp, dma(MemId.INP, rows, xin, n)]
    insns = [
        pb.load_uops(),
        dma(MemId.ACC, 0, acc, n + 3),
        dma(MemId.WGT, 0, eye, 1),
        *(writes if store_first else writes[::-1]),
        Gemm(reset=True, uop_bgn=0, uop_end=1, iter_out=n, dst_out=1),
        Gemm(uop_bgn=1, uop_end=2, iter_out=n, dst_out=1, src_out=1),
        Store(sram_base=dst, dram_base=pb.elem(out, "out"), y_size=1, x_size=n, x_stride=n),
        Finish(),
    ]
    program = pb.build(insert_tokens(cfg, insns, uops, region))
    lines = [format_row(r) for r in program.table()]
    relay = ("pop_next", "push_prev") if store_first else ("pop_prev", "push_next")
    assert any("sync only" in line and all(f in line for f in relay) for line in lines), lines
    verify(program)
    got = get_device("sim").run(program, {}).outputs["out"]
    unit = float32_requantize(data, scale, 0, -128, 127, channel_axis=2)
    np.testing.assert_array_equal(got, x if store_first else unit)
