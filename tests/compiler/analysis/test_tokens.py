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
