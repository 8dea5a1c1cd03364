"""The concurrent-stage engine: overlap, tokens, deadlock, races, FINISH and bad programs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tilecraft.compiler.programs.blocked_gemm import blocked_gemm
from tilecraft.errors import (
    AccessError,
    DeadlockError,
    ExecutionError,
    HazardError,
    IllegalInstructionError,
)
from tilecraft.hw.config import preset
from tilecraft.hw.isa import Finish, Gemm, Load, MemId, Opcode, Store, isa_for, table_insns
from tilecraft.ops import Gemm as GemmOp
from tilecraft.ops import GemmTiles
from tilecraft.ops.reference import gemm
from tilecraft.runtime import Program, get_device
from tilecraft.runtime.layout import Lanes, Matrix, TransposedMatrix

from harness import requant_rows, run


def _gemm_inputs(cfg, m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    return a, w, {"a": Matrix((m, k)).pack(cfg, a), "b": TransposedMatrix((k, n)).pack(cfg, w)}


@pytest.mark.parametrize("name", ["default", "1x8x8", "2x16x16"])
def test_double_buffered_gemm_is_exact_and_beats_serialized(name):
    cfg = preset(name)
    a, w, inputs = _gemm_inputs(cfg, 64, 256, 128)
    fast = blocked_gemm(cfg, 64, 256, 128, overlap=True)
    slow = blocked_gemm(cfg, 64, 256, 128, tiles=dataclasses.replace(fast.schedule, overlap=False))
    device = get_device("sim")
    r_fast, r_slow = device.run(fast, inputs), device.run(slow, inputs)
    expected = gemm(GemmOp(64, 256, 128, 8), a, w)
    for r in (r_fast, r_slow):
        got = Matrix((64, 128), Lanes.OUT).unpack(cfg, r.outputs["c"])
        np.testing.assert_array_equal(got, expected)
    assert r_fast.report.cycles < 0.8 * r_slow.report.cycles, (
        r_fast.report.cycles,
        r_slow.report.cycles,
    )
    assert (
        r_fast.report.gemm_uops == r_slow.report.gemm_uops == 64 * 256 * 128 // (cfg.macs_per_cycle)
    )
    # overlap shows as stages busy at the same time
    busy = sum(s.busy_cycles for s in r_fast.report.stages.values())
    assert busy > r_fast.report.cycles


def test_report_counts_bytes_per_buffer():
    cfg = preset("default")
    _, _, inputs = _gemm_inputs(cfg, 32, 64, 64)
    program = blocked_gemm(cfg, 32, 64, 64, tiles=GemmTiles(32, 4, 4))
    report = get_device("sim").run(program, inputs).report
    assert report.dram_bytes["inp"] == 32 * 64  # A read once (one N tile)
    assert report.dram_bytes["wgt"] == 64 * 64
    assert report.dram_bytes["out"] == 32 * 64
    assert report.dram_bytes["uop"] == len(program.uops) * 4
    assert report.dram_bytes["insn"] == 16 * len(program.insns)
    assert 0 < report.gemm_utilization <= 1


def _edit(program: Program, index: int, **changes) -> Program:
    """The program with instruction `index` changed (e.g. a flag dropped)."""
    insns = table_insns(program.table())
    insns[index] = dataclasses.replace(insns[index], **changes)
    from tilecraft.hw.isa import encode

    return dataclasses.replace(program, insns=encode(isa_for(program.config), insns))


def _find(program: Program, opcode: Opcode, nth: int = 0, **fields) -> int:
    table = program.table()
    hits = [
        k
        for k in range(len(table))
        if table["opcode"][k] == opcode and all(table[f][k] == v for f, v in fields.items())
    ]
    return hits[nth]


def test_missing_push_deadlocks_naming_the_stuck_instructions():
    cfg = preset("default")
    _, _, inputs = _gemm_inputs(cfg, 32, 64, 64)
    program = blocked_gemm(cfg, 32, 64, 64, tiles=GemmTiles(32, 2, 2))
    k = _find(program, Opcode.LOAD, mem=MemId.WGT)
    broken = _edit(program, k, push_next=False)
    with pytest.raises(DeadlockError, match="compute: blocked at instruction") as info:
        get_device("sim").run(broken, inputs)
    stuck = info.value.stages["compute"]
    assert stuck["reason"].startswith("waiting for a token on LOAD_TO_COMPUTE")
    assert "GEMM" in stuck["insn"]
    assert "tokens in flight" in str(info.value)


def test_full_token_queue_blocks_the_producer():
    cfg = preset("default").replace(dep_queue_depth=2)
    sync = dict(sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0)
    insns = [Load(mem=MemId.INP, push_next=True, **sync) for _ in range(3)]
    insns += [Store(sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0, pop_prev=True)]
    with pytest.raises(DeadlockError) as info:
        run(cfg, insns)
    assert "full queue" in info.value.stages["load"]["reason"]
    assert info.value.stages["store"]["index"] == 3
    assert info.value.tokens["LOAD_TO_COMPUTE"] == 2


def test_missing_pop_is_a_race_not_a_silent_result():
    cfg = preset("default")
    _, _, inputs = _gemm_inputs(cfg, 128, 64, 128)
    # compute-bound steps, so the early load of step 2 really overlaps the GEMM of step 0
    program = blocked_gemm(cfg, 128, 64, 128, tiles=GemmTiles(128, 8, 1))
    k = _find(program, Opcode.LOAD, nth=2, mem=MemId.INP)  # step 2 reuses half 0
    assert program.table()["pop_next"][k]
    broken = _edit(program, k, pop_next=False)
    with pytest.raises(HazardError, match="a dependence token is missing") as info:
        get_device("sim").run(broken, inputs)
    assert info.value.index is not None


def test_store_after_finish_is_an_error():
    cfg = preset("default")
    insns = [
        Gemm(reset=True, uop_bgn=0, uop_end=1, push_next=True),
        Store(sram_base=0, dram_base=0, y_size=64, x_size=16, x_stride=16, pop_prev=True),
    ]
    with pytest.raises(ExecutionError, match="after FINISH"):
        run(cfg, insns)


def test_program_must_end_with_finish():
    with pytest.raises(ExecutionError, match="does not end with FINISH"):
        run(preset("default"), [Gemm(reset=True, uop_bgn=0, uop_end=1)], finish=False)


def test_dram_address_out_of_range():
    insn = Load(mem=MemId.INP, sram_base=0, dram_base=10**6, y_size=1, x_size=1, x_stride=1)
    with pytest.raises(AccessError, match="outside the mapped region") as info:
        run(preset("default"), [insn])
    assert info.value.index == 0 and "LOAD   INP" in str(info.value)


def test_sram_index_out_of_range():
    cfg = preset("default")
    insn = Load(
        mem=MemId.INP, sram_base=cfg.depth("inp") - 1, dram_base=0, y_size=1, x_size=2, x_stride=2
    )
    with pytest.raises(AccessError, match=r"inp rows \[2047, 2049\) are outside"):
        run(cfg, [insn])
    gemm = Gemm(reset=True, uop_bgn=0, uop_end=1, iter_out=3, dst_out=1500)
    with pytest.raises(AccessError, match="dst index 3000 is outside the acc scratchpad"):
        run(cfg, [gemm])
    with pytest.raises(AccessError, match="micro-op range"):
        run(cfg, [Gemm(uop_bgn=5, uop_end=5)])


def test_unknown_opcode_word():
    cfg = preset("default")
    report, _, dram = run(cfg, [])  # a valid FINISH-only program
    assert report.instructions == 1
    dram[-16] = (int(dram[-16]) & 0xF8) | 0x7  # opcode bits of the only instruction
    from tilecraft.sim import simulate

    with pytest.raises(IllegalInstructionError, match="unknown opcode 7"):
        simulate(cfg, dram, dram.size - 16, 1)


def test_flag_without_a_queue_is_illegal():
    insn = Load(
        mem=MemId.INP, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0, pop_prev=True
    )
    with pytest.raises(IllegalInstructionError, match="pop_prev has no token queue"):
        run(preset("default"), [insn])


def test_instructions_outside_dram():
    from tilecraft.sim import simulate

    with pytest.raises(AccessError, match="instructions at DRAM bytes"):
        simulate(preset("default"), np.zeros(64, np.uint8), 32, 4)


def test_trace_has_one_slice_per_instruction():
    cfg = preset("default")
    _, _, inputs = _gemm_inputs(cfg, 32, 64, 64)
    program = blocked_gemm(cfg, 32, 64, 64)
    report = get_device("sim").run(program, inputs, trace=True).report
    slices = [e for e in report.trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == len(program.insns)
    tids = {e["args"]["index"]: e["tid"] for e in slices}
    table = program.table()
    for k, tid in tids.items():
        if table["opcode"][k] == Opcode.STORE:
            assert tid == 5
        elif table["opcode"][k] == Opcode.GEMM:
            assert tid == 3  # compute stage, GEMM unit
        elif table["opcode"][k] == Opcode.ALU:
            assert tid == 4
    assert max(e["args"]["end_cycle"] for e in slices) <= report.cycles


def test_finish_only_program_runs():
    report, _, _ = run(preset("default"), [Finish()], finish=False)
    assert report.cycles > 0 and report.gemm_uops == 0


def _units_program(alu_dst: int):
    """LOAD UOP, a long GEMM writing acc rows 0..63, then an ALU pass whose first micro-op
    writes `alu_dst` (rows alu_dst..alu_dst+63)."""
    from tilecraft.hw.isa import Alu, AluOp, Uop

    uops = [Uop(0, 0, 0), Uop(alu_dst, 0, 0)]
    insns = [
        Load(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=1, x_size=2, x_stride=2),
        Gemm(uop_bgn=0, uop_end=1, iter_out=64, iter_in=8, dst_out=1),
        Alu(op=AluOp.MUL, use_imm=True, imm=0, uop_bgn=1, uop_end=2, iter_out=64, dst_out=1),
    ]
    return insns, uops


def test_gemm_and_alu_overlap_only_across_accumulator_halves():
    cfg = preset("default")
    half = cfg.acc_bank_rows
    times = {}
    for label, dst in (("same", 64), ("other", half)):
        insns, uops = _units_program(dst)
        report, _, _ = run(cfg, insns, uops=uops, trace=True)
        slices = {e["name"]: e["args"] for e in report.trace["traceEvents"] if e["ph"] == "X"}
        times[label] = (slices["GEMM"], slices["ALU"], report.cycles)
    gemm, alu, _ = times["same"]
    assert alu["start_cycle"] >= gemm["end_cycle"]  # same half: the ALU waits for the GEMM
    gemm, alu, _ = times["other"]
    assert alu["start_cycle"] < gemm["end_cycle"]  # other half: it runs alongside
    assert times["other"][2] < times["same"][2]


@pytest.mark.parametrize("stray", [3, 100])  # a row the GEMM writes, one it doesn't
def test_overlapping_units_must_keep_to_their_halves(stray):
    """The halves are banks with one read and one write port each: an ALU let through by the
    interlock must not touch the GEMM's half at all."""
    from tilecraft.hw.isa import Alu, AluOp, Uop

    cfg = preset("default")
    half = cfg.acc_bank_rows
    # the ALU's first micro-op is in the upper half, its second in the GEMM's
    uops = [Uop(0, 0, 0), Uop(half, 0, 0), Uop(stray, 0, 0)]
    insns = [
        Load(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=1, x_size=3, x_stride=3),
        Gemm(uop_bgn=0, uop_end=1, iter_out=64, iter_in=8, dst_out=1),
        Alu(op=AluOp.ADD, use_imm=True, imm=1, uop_bgn=1, uop_end=3, iter_out=1),
    ]
    with pytest.raises(HazardError, match=f"reads acc row {stray}, outside its bank"):
        run(cfg, insns, uops=uops)
    no_dual = dataclasses.replace(
        __import__("tilecraft.hw.timing", fromlist=["Timing"]).Timing.from_config(cfg),
        dual_issue=False,
    )
    run(cfg, insns, uops=uops, timing=no_dual)  # serialized units: no overlap, no hazard


def test_a_token_does_not_vouch_for_the_other_unit():
    """The ALU (other half, so it overlaps the long GEMM) finishes first and pushes the token a
    STORE of the GEMM's rows pops: the GEMM may still be writing them, a hazard (the token pass
    puts a compute no-op in between, see tests/compiler/test_tokens.py)."""
    from tilecraft.hw.isa import Alu, AluOp, Uop

    cfg = preset("default")
    half = cfg.acc_bank_rows
    uops = [Uop(0, 0, 0), Uop(half, 0, 0)]
    insns = [
        Load(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=1, x_size=2, x_stride=2),
        Gemm(uop_bgn=0, uop_end=1, iter_out=64, iter_in=8, dst_out=1),
        Alu(op=AluOp.ADD, use_imm=True, imm=1, uop_bgn=1, uop_end=2, iter_out=1, push_next=True),
        Store(
            sram_base=0,
            dram_base=1024,
            y_size=1,
            x_size=64,
            x_stride=64,
            pop_prev=True,
            push_prev=True,
        ),
        Finish(pop_next=True),
    ]
    with pytest.raises(HazardError, match="acc row 0 .* being written"):
        run(cfg, insns, uops=uops, finish=False)


def _requant_beside_gemm(cfg, gemm_dst: int, iters: int):
    """LOAD UOP; LOAD ACC of 24 rows and their 3 parameter rows at row 200 (bank 0), which
    frees a requantizing STORE of them; a GEMM writing rows gemm_dst.. (`iters` x 8 steps),
    which nothing orders against the STORE."""
    from tilecraft.hw.isa import Uop

    acc, _ = requant_rows(cfg, np.random.default_rng(3), 24)
    at = 32768  # the accumulator rows' DRAM bytes (the micro-op at 0)
    insns = [
        Load(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1),
        Load(mem=MemId.ACC, sram_base=200, dram_base=at // cfg.elem_bytes("acc"), y_size=1,
             x_size=27, x_stride=27, push_next=True),
        Gemm(uop_bgn=0, uop_end=1, iter_out=iters, iter_in=8, dst_out=1),
        Store(sram_base=200, dram_base=40960 // cfg.elem_bytes("out"), y_size=1, x_size=24,
              x_stride=24, pop_prev=True, push_prev=True, requant=True, param_base=224),
        Finish(pop_next=True),
    ]  # fmt: skip
    report, _, _ = run(cfg, insns, {at: acc}, uops=[Uop(gemm_dst, 0, 0)], finish=False, trace=True)
    slices = {e["name"]: e["args"] for e in report.trace["traceEvents"] if e["ph"] == "X"}
    return slices["GEMM"], slices["STORE"]


@pytest.mark.parametrize("iters", [64, 2])  # the GEMM first; the STORE first
def test_a_requantizing_store_holds_its_accumulator_bank(iters):
    """The requantization unit reads a STORE's rows through their bank's read port, the one
    the GEMM and ALU units read through: a GEMM in the same bank never runs while the STORE
    does, whichever starts first; one in the other bank runs alongside."""
    cfg = preset("default").replace(requant_lanes=8)
    gemm, store = _requant_beside_gemm(cfg, 0, iters)  # bank 0, as the STORE
    apart = gemm["end_cycle"] <= store["start_cycle"] or store["end_cycle"] <= gemm["start_cycle"]
    assert apart, (gemm, store)
    gemm, store = _requant_beside_gemm(cfg, cfg.acc_bank_rows, iters)  # bank 1
    assert gemm["start_cycle"] < store["end_cycle"] and store["start_cycle"] < gemm["end_cycle"]
