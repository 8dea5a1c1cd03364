"""The static verifier catches broken programs before anything runs them, and the token pass
produces programs it accepts."""

import dataclasses
import re

import numpy as np
import pytest

from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.operator.builder import ProgramBuilder
from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.errors import DeadlockError, VerifyError
from tilecraft.hw.config import preset
from tilecraft.hw.isa import (
    Alu,
    AluOp,
    Finish,
    Gemm,
    Load,
    MemId,
    Opcode,
    Stage,
    Uop,
    encode,
    isa_for,
    row_insn,
)
from tilecraft.ops import Conv2d, ConvSchedule, Epilogue
from tilecraft.runtime import get_device
from tilecraft.runtime.buffers import Role
from tilecraft.runtime.layout import pack_inputs, random_inputs

CFG = preset("default")


def compiled():
    op = Conv2d(1, 32, 10, 10, 32, kernel=3, pad=1)
    return conv2d(
        CFG, op, Epilogue(shift=6), weight=np.ones(op.weight_shape, np.int8), schedule=None
    )


def with_table(program, table):
    return program.replace(insns=encode(isa_for(program.config), [_row(r) for r in table]))


def _row(r):
    from tilecraft.hw.isa import row_insn

    return row_insn(r)


def first(table, opcode_mem, flag):
    from tilecraft.hw.isa import stage_of

    for k in range(len(table)):
        r = table[k]
        if stage_of(int(r["opcode"]), int(r["mem"])) == opcode_mem and r[flag]:
            return k
    raise AssertionError(flag)


def test_compiled_programs_verify_and_count_tokens():
    summary = verify(compiled())
    assert summary["tokens"]["LOAD_TO_COMPUTE"] > 0
    assert summary["tokens"]["COMPUTE_TO_STORE"] > 0


def test_dropped_push_is_a_deadlock():
    program = compiled()
    table = program.table()
    k = first(table, Stage.LOAD, "push_next")
    table["push_next"][k] = 0
    with pytest.raises(VerifyError) as info:
        verify(with_table(program, table))
    assert info.value.rule == "deadlock"
    assert "waits for a token on LOAD_TO_COMPUTE" in str(info.value)


def test_dropped_pop_unbalances_the_queue():
    program = compiled()
    table = program.table()
    k = first(table, Stage.COMPUTE, "pop_prev")
    table["pop_prev"][k] = 0
    with pytest.raises(VerifyError) as info:
        verify(with_table(program, table))
    assert info.value.rule in ("token-balance", "raw")
    assert info.value.index is not None


def test_dropped_pair_is_a_raw_hazard_naming_both_instructions():
    program = compiled()
    table = program.table()
    producer = first(table, Stage.LOAD, "push_next")
    consumer = first(table, Stage.COMPUTE, "pop_prev")
    table["push_next"][producer] = 0
    table["pop_prev"][consumer] = 0
    with pytest.raises(VerifyError) as info:
        verify(with_table(program, table))
    assert info.value.rule == "raw"
    assert info.value.index == consumer
    writer = int(re.search(r"written by instruction (\d+)", str(info.value)).group(1))
    assert writer <= producer and table["opcode"][writer] == 0  # one of that step's LOADs


def test_the_simulator_agrees_a_dropped_pair_races():
    from tilecraft.errors import HazardError

    program = compiled()
    table = program.table()
    table["push_next"][first(table, Stage.LOAD, "push_next")] = 0
    table["pop_prev"][first(table, Stage.COMPUTE, "pop_prev")] = 0
    broken = with_table(program, table)
    inputs = pack_inputs(broken, random_inputs(broken, np.random.default_rng(0)))
    with pytest.raises(HazardError):
        get_device("sim").run(broken, inputs)


def _token_storm(cfg, n):
    """Load and compute each push n tokens to the other before popping any."""
    idle = dict(sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0)
    insns = [Load(mem=MemId.INP, push_next=True, **idle)] * n
    insns += [Load(mem=MemId.ACC, push_prev=True, **idle)] * n
    insns += [Load(mem=MemId.INP, pop_next=True, **idle)] * n
    insns += [Load(mem=MemId.ACC, pop_prev=True, **idle)] * n
    insns += [Load(mem=MemId.INP, push_next=True, **idle)]  # FINISH waits for the load stage
    return ProgramBuilder(cfg, "storm").build([*insns, Finish(pop_prev=True)])


def test_deadlock_at_the_configured_queue_depth():
    depth = CFG.dep_queue_depth
    verify(_token_storm(CFG, depth))
    with pytest.raises(VerifyError, match="cannot push: token queue full") as info:
        verify(_token_storm(CFG, depth + 1))
    assert info.value.rule == "deadlock"
    with pytest.raises(DeadlockError):  # and the simulator agrees
        get_device("sim").run(_token_storm(CFG, depth + 1), {})


def test_read_before_any_write():
    pb = ProgramBuilder(CFG, "uninit")
    pb.place_uops([Uop(0, 0, 0)])
    program = pb.build([pb.load_uops(), Gemm(uop_bgn=0, uop_end=1), Finish()])
    with pytest.raises(
        VerifyError, match="reads (acc|inp|wgt) row 0 before any instruction writes it"
    ):
        verify(program)


def test_out_of_range_and_stray_store():
    from tilecraft.hw.isa import Store

    pb = ProgramBuilder(CFG, "ranges")
    out = pb.buffer("out", Role.OUTPUT, (4, 1, 16), np.int8)
    pb.place_uops([Uop(CFG.depth("acc") - 2, 0, 0)])
    clear = Alu(op=AluOp.MUL, use_imm=True, imm=0, uop_bgn=0, uop_end=1, iter_out=4, dst_out=1)
    with pytest.raises(VerifyError, match=r"dst index \d+ is beyond the 2048 acc rows") as info:
        verify(pb.build([pb.load_uops(), clear, Finish()]))
    assert info.value.rule == "range" and info.value.index == 1

    pb = ProgramBuilder(CFG, "stray")
    pb.buffer("out", Role.OUTPUT, (4, 1, 16), np.int8)
    pb.place_uops([Uop(0, 0, 0)])
    insns = [pb.load_uops()]
    insns.append(
        Alu(
            op=AluOp.MUL,
            use_imm=True,
            imm=0,
            uop_bgn=0,
            uop_end=1,
            iter_out=4,
            dst_out=1,
            push_next=True,
        )
    )
    insns.append(
        Store(
            sram_base=0,
            dram_base=pb.elem(out, "out") + 2,
            y_size=1,
            x_size=4,
            x_stride=4,
            pop_prev=True,
            push_prev=True,
        )
    )
    insns.append(Finish(pop_next=True))
    with pytest.raises(VerifyError, match="outside every output buffer") as info:
        verify(pb.build(insns))
    assert info.value.rule == "dram"


@pytest.mark.parametrize("stray", [5, 100])  # a row the other unit writes, one it doesn't
def test_units_that_may_overlap_keep_to_their_banks(stray):
    half = CFG.acc_bank_rows
    pb = ProgramBuilder(CFG, "units")
    pb.place_uops([Uop(0, 0, 0), Uop(half, 0, 0), Uop(stray, 0, 0)])
    insns = [
        pb.load_uops(),
        Alu(op=AluOp.MUL, use_imm=True, imm=0, uop_bgn=0, uop_end=1, iter_out=8, dst_out=1),
        Alu(op=AluOp.MUL, use_imm=True, imm=0, uop_bgn=1, uop_end=3),
        Gemm(reset=True, uop_bgn=0, uop_end=1, iter_out=8, dst_out=1),
        Finish(),
    ]
    with pytest.raises(VerifyError, match=f"writes acc row {stray} outside its bank") as info:
        verify(pb.build(insns))
    assert info.value.rule == "unit-overlap"


def test_a_load_of_nothing_that_names_rows_is_refused():
    """The lowering once emitted `x_size=0` LOADs for windows that were all padding: they
    write nothing, and the GEMM after them read an earlier tile's rows."""
    program = compiled()
    insns = [row_insn(r) for r in program.table()]
    k = next(i for i, x in enumerate(insns) if isinstance(x, Load) and x.mem == MemId.INP)
    insns[k] = dataclasses.replace(insns[k], x_size=0, x_pad1=3)
    broken = program.replace(insns=encode(isa_for(program.config), insns))
    with pytest.raises(VerifyError, match=r"has x_size 0, so it writes nothing, but names") as info:
        verify(broken)
    assert info.value.rule == "empty-load" and info.value.index == k


def _inp_loads(insns):
    return [i for i, x in enumerate(insns) if isinstance(x, Load) and x.mem == MemId.INP]


def test_a_tile_that_reads_another_tiles_rows_is_caught():
    """The blind spot the padding bug went through: a tile whose window LOAD writes nothing
    (here a pure sync LOAD, which every other rule accepts) multiplies the rows an earlier tile
    left in the input buffer. The dataflow rule names the output and the input it got."""
    op = Conv2d(1, 16, 8, 8, 16, kernel=3, pad=1)
    program = conv2d(CFG, op, Epilogue(), schedule=ConvSchedule(1, 1, 2, 4))
    insns = [row_insn(r) for r in program.table()]
    k = _inp_loads(insns)[3]  # a later tile's window (its rows were written by tile 1)
    insns[k] = dataclasses.replace(
        insns[k], y_size=0, x_size=0, y_pad0=0, y_pad1=0, x_pad0=0, x_pad1=0
    )
    broken = program.replace(insns=encode(isa_for(program.config), insns))
    with pytest.raises(
        VerifyError, match=r"stores output .* its tap .* multiplied (padding|input)"
    ):
        verify(broken)  # the stale rows held the earlier window's padding or input


def test_a_shifted_window_is_caught_at_its_store():
    op = Conv2d(1, 16, 8, 8, 16, kernel=3, pad=1)
    program = conv2d(CFG, op, Epilogue(), schedule=ConvSchedule(1, 1, 2, 4))
    insns = [row_insn(r) for r in program.table()]
    k = _inp_loads(insns)[2]
    insns[k] = dataclasses.replace(insns[k], dram_base=insns[k].dram_base + 1)
    broken = program.replace(insns=encode(isa_for(program.config), insns))
    with pytest.raises(
        VerifyError, match=r"multiplied input row (\d+) column (\d+) .* not row \1 "
    ) as info:
        verify(broken)  # one column to the right of the one it needs
    assert info.value.rule == "dataflow"


def test_every_tap_is_accounted_for():
    """A GEMM cut short leaves its outputs without some taps; a loop that revisits its rows adds
    them twice."""
    program = compiled()
    insns = [row_insn(r) for r in program.table()]
    k = next(i for i, x in enumerate(insns) if isinstance(x, Gemm) and not x.reset)
    dropped = list(insns)
    dropped[k] = dataclasses.replace(insns[k], iter_out=1, iter_in=1, uop_end=insns[k].uop_bgn + 1)
    with pytest.raises(VerifyError, match=r"without its tap \(input channel block"):
        verify(program.replace(insns=encode(isa_for(program.config), dropped)))
    twice = list(insns)  # the outer loop revisits the same rows instead of the next ones
    twice[k] = dataclasses.replace(insns[k], dst_out=0, src_out=0, wgt_out=0)
    with pytest.raises(VerifyError, match=r"adds a product for the same tap twice"):
        verify(program.replace(insns=encode(isa_for(program.config), twice)))


def test_finish_must_wait_for_every_instruction():
    """A load nothing waits for may still run when FINISH raises done (and, in a chain, when
    the next layer starts): refused, naming it; ordered by a token, accepted."""

    def program(ordered: bool):
        pb = ProgramBuilder(CFG, "late")
        x = pb.buffer("x", Role.INPUT, (1, CFG.batch, CFG.block_in), np.int8)
        load = Load(
            mem=MemId.INP,
            sram_base=0,
            dram_base=pb.elem(x, "inp"),
            y_size=1,
            x_size=1,
            x_stride=1,
            push_next=ordered,
        )
        return pb.build([load, Finish(pop_prev=ordered)])

    verify(program(True))
    with pytest.raises(VerifyError, match=r"raises done while instruction 0 \(LOAD") as info:
        verify(program(False))
    assert info.value.rule == "finish"


def test_a_flag_with_no_queue_is_named_at_its_first_instruction():
    """The load stage has no queue before it, the store stage none after it: the earliest
    instruction with such a flag is named, whichever flag it is."""
    idle = dict(sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0)
    from tilecraft.hw.isa import Store

    insns = [
        Load(mem=MemId.INP, **idle),
        Store(push_next=True, **idle),
        Load(mem=MemId.INP, pop_prev=True, **idle),
        Finish(),
    ]
    with pytest.raises(VerifyError, match="flag push_next has no queue on the store stage") as e:
        verify(ProgramBuilder(CFG, "flags").build(insns))
    assert e.value.rule == "range" and e.value.index == 1


def test_a_pass_without_dataflow_is_remembered_for_the_same_footprints(monkeypatch):
    """A network's layers of one shape differ only in their requantization's immediates,
    which no rule but dataflow reads: the second is not checked again. A shift by the whole
    lane (which clears the rows, so reads none) is another program; dataflow always runs."""
    from tilecraft.compiler.analysis import verify as V

    program = compiled()
    monkeypatch.setattr(V, "_passed", {})
    calls = []
    real = V.accesses
    monkeypatch.setattr(V, "accesses", lambda *a: calls.append(1) or real(*a))
    table = program.table()
    spec = isa_for(CFG)
    shifts = np.flatnonzero(
        (table["opcode"] == Opcode.ALU)
        & (table["alu_op"] == AluOp.SHR)
        & (table["use_imm"] != 0)
        & (spec.shr_amount(table["imm"]) > -CFG.acc_bits)
    )
    assert shifts.size  # the epilogue's shifts (not the zeroing's)
    verify(program, dataflow=False)
    other = table.copy()
    other["imm"][shifts] = 5  # another layer's shift
    verify(with_table(program, other), dataflow=False)
    assert len(calls) == 1  # remembered
    verify(with_table(program, other))
    assert len(calls) == 2  # dataflow is never skipped
    cleared = table.copy()
    cleared["imm"][shifts] = -CFG.acc_bits & ((1 << spec.shr_amount_bits) - 1)
    verify(with_table(program, cleared), dataflow=False)
    assert len(calls) == 3  # checked: its footprints differ


def test_a_requantizing_store_keeps_to_one_accumulator_bank():
    """A conv compiled for the requantization unit keeps each STORE's rows and its parameter
    rows in one bank (a copy of the parameters in each bank a tile uses), and passes; the same
    program with one STORE's parameters moved into the other bank is refused by name."""
    from tilecraft.ops import Multiplier

    cfg = CFG.replace(requant_lanes=8)
    op = Conv2d(1, 32, 10, 10, 32, kernel=3, pad=1)
    rng = np.random.default_rng(2)
    program = conv2d(
        cfg,
        op,
        Epilogue(bias=True, multiplier=Multiplier.FLOAT32),
        weight=rng.integers(-127, 128, op.weight_shape).astype(np.int8),
        bias=rng.integers(-999, 999, 32).astype(np.int32),
        multiplier=np.full(32, 2.0**-9, np.float32),
        schedule=None,
    )
    verify(program)
    table = program.table()
    stores = np.flatnonzero((table["opcode"] == Opcode.STORE) & (table["requant"] != 0))
    assert stores.size
    banks = {cfg.acc_bank(int(table["sram_base"][k])) for k in stores}
    assert banks == {0, 1}  # tiles in both banks, each with its own copy
    moved = table.copy()
    k = int(stores[0])
    other = 1 - cfg.acc_bank(int(moved["sram_base"][k]))
    moved["param_base"][k] = other * cfg.acc_bank_rows + 7
    with pytest.raises(VerifyError, match=rf"requant-bank: instruction {k}: requantizes from "
                       rf"accumulator rows in banks 0, 1"):  # fmt: skip
        verify(with_table(program, moved), dataflow=False)
