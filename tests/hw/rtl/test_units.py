"""The GEMM and ALU units, each with its scratchpads, against the simulator's semantics on
random instructions (loops, reset, immediates, tensor operands, rows rewritten within an
instruction, range errors)."""

from functools import partial

import numpy as np
import pytest
from amaranth import Module, Signal, unsigned
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator
from tiers import slow

from tilecraft.hw.config import preset
from tilecraft.hw.isa import Alu, AluOp, Gemm, Uop, insn_table, isa_for, uop_table
from tilecraft.hw.rtl.dsp import ECP5_DSP_MODEL
from tilecraft.hw.rtl.signatures import SRAM_READ_LATENCY
from tilecraft.hw.rtl.units import AluUnit, GemmUnit
from tilecraft.sim import semantics
from tilecraft.sim.machine import Machine


def words(arr: np.ndarray) -> list[int]:
    """One integer per row of a (rows, ...) array, LSB-first bytes."""
    raw = np.ascontiguousarray(arr).reshape(arr.shape[0], -1).view(np.uint8)
    return [int.from_bytes(r.tobytes(), "little") for r in raw]


def insn_word(cfg, insn) -> int:
    row = insn_table([insn])[0]
    spec = isa_for(cfg)
    value = 0
    for f in spec.formats[int(row["opcode"])]:
        value |= (int(row[f.name]) & ((1 << f.width) - 1)) << f.offset
    return value


def registered(m, data, port_data, en=None):
    """Read data as the accelerator's scratchpads give it: a register past the block RAM
    (holding while `en` is clear, as the read port does)."""
    for _ in range(SRAM_READ_LATENCY - 1):
        held = Signal.like(data)
        with m.If(1 if en is None else en):
            m.d.sync += held.eq(data)
        data = held
    m.d.comb += port_data.eq(data)


def run_unit(cfg, unit_cls, machine, insns, cycles=None):
    """Run `insns` on the unit over memories holding `machine`'s scratchpads; returns the
    final accumulator rows and the error flags (and appends each instruction's cycles from
    start to done to `cycles`)."""
    m = Module()
    m.submodules.unit = unit = unit_cls(cfg)
    mems = {}
    for name, shape_bits, init in (
        ("uop", cfg.uop_bytes * 8, [int(w) for w in machine.uop_words]),
        ("acc", cfg.elem_bytes("acc") * 8, words(machine.acc)),
    ):
        mems[name] = Memory(shape=unsigned(shape_bits), depth=len(init), init=init)
        m.submodules[name] = mems[name]
    acc_w = mems["acc"].write_port()
    acc_r = mems["acc"].read_port()  # not transparent: the units forward their own writes
    uop_r = mems["uop"].read_port()
    m.d.comb += [
        uop_r.addr.eq(unit.uop.addr),
        uop_r.en.eq(unit.uop.en),
        acc_r.addr.eq(unit.acc_read.addr),
        acc_r.en.eq(unit.acc_read.en),
        acc_w.addr.eq(unit.acc_write.addr),
        acc_w.data.eq(unit.acc_write.data),
        acc_w.en.eq(unit.acc_write.en),
    ]
    registered(m, uop_r.data, unit.uop.data, unit.uop.en)
    registered(m, acc_r.data, unit.acc_read.data)
    if isinstance(unit, GemmUnit):
        for name, port in (("inp", unit.inp), ("wgt", unit.wgt)):
            mem = Memory(
                shape=unsigned(cfg.elem_bytes(name) * 8),
                depth=cfg.depth(name),
                init=words(machine.sram(name)),
            )
            m.submodules[name] = mem
            rp = mem.read_port()
            m.d.comb += rp.addr.eq(port.addr)
            registered(m, rp.data, port.data)
    errors = []
    final = {}

    async def bench(ctx):
        for insn in insns:
            ctx.set(unit.insn.as_value(), insn_word(cfg, insn))
            ctx.set(unit.start, 1)
            await ctx.tick()
            ctx.set(unit.start, 0)
            for n in range(20000):
                done, err = ctx.get(unit.done), ctx.get(unit.error)
                await ctx.tick()
                if done:
                    errors.append(bool(err))
                    if cycles is not None:
                        cycles.append(n + 1)
                    break
            else:
                raise AssertionError("unit never finished")
            for _ in range(8):  # let in-flight writes land
                await ctx.tick()
        final["acc"] = [ctx.get(mems["acc"].data[k]) for k in range(cfg.depth("acc"))]

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return final["acc"], errors


def machine_with(cfg, uops, seed):
    rng = np.random.default_rng(seed)
    m = Machine(cfg, np.zeros(64, np.uint8))
    m.inp[...] = rng.integers(-128, 128, m.inp.shape)
    m.wgt[...] = rng.integers(-128, 128, m.wgt.shape)
    m.inp_f[...] = m.inp
    m.wgt_f[...] = m.wgt
    m.acc[...] = rng.integers(-(2**20), 2**20, m.acc.shape)
    spec = isa_for(cfg)
    from tilecraft.hw.isa import encode_uops

    words_ = encode_uops(spec, uops)
    m.uop_words[: len(words_)] = words_
    table = uop_table(uops)
    m.uop_dst[: len(uops)] = table["dst"]
    m.uop_src[: len(uops)] = table["src"]
    m.uop_wgt[: len(uops)] = table["wgt"]
    return m


SMALL = "1x8x8"


def assert_alu_matches(cfg, m, insns, unit=AluUnit):
    """The ALU unit over `m`'s scratchpads ends where the simulator's semantics do, no errors."""
    acc, errors = run_unit(cfg, unit, m, insns)
    for insn in insns:
        row = insn_table([insn])[0]
        semantics.alu(m, {k: row[k] for k in row.dtype.names})
    assert errors == [False] * len(insns)
    assert acc == words(m.acc)


# the ECP5 flows' registered MULT18X18D pins, on their model (hw/rtl/dsp.py)
ON_DSPS = [slow(0, ECP5_DSP_MODEL, id="0-ecp5-dsp-model")]


@pytest.mark.parametrize(("seed", "dsp"), [(s, None) for s in range(3)] + ON_DSPS)
def test_gemm_unit_matches_the_simulator(seed, dsp):
    cfg = preset(SMALL)
    rng = np.random.default_rng(seed)
    uops = [
        Uop(int(rng.integers(0, 40)), int(rng.integers(0, 60)), int(rng.integers(0, 30)))
        for _ in range(6)
    ]
    uops += [Uop(5, 1, 2), Uop(5, 2, 3)]  # the same row twice in a row
    insns = [
        Gemm(
            uop_bgn=0,
            uop_end=6,
            iter_out=3,
            iter_in=2,
            dst_out=7,
            dst_in=1,
            src_out=5,
            src_in=2,
            wgt_out=1,
            wgt_in=3,
        ),
        Gemm(uop_bgn=6, uop_end=8, iter_out=2, iter_in=3, dst_in=0, src_in=1),
        Gemm(reset=True, uop_bgn=0, uop_end=2, iter_out=2, iter_in=1, dst_out=1),
        Gemm(uop_bgn=1, uop_end=3, iter_out=1, iter_in=1),
    ]
    m = machine_with(cfg, uops, seed)
    acc, errors = run_unit(cfg, partial(GemmUnit, packed=dsp), m, insns)
    for insn in insns:
        semantics.gemm(m, insn_table([insn])[0])
    assert errors == [False] * len(insns)
    assert acc == words(m.acc)


@pytest.mark.parametrize("dsp", [None, slow(ECP5_DSP_MODEL, id="ecp5-dsp-model")])
def test_alu_multiplies_wrapping_at_the_lane_width(dsp):
    """MUL alone (no later op overwrites its rows): tensor and immediate products of lanes of
    both signs up to +-2**20 (products past 32 bits wrap), each micro-op on rows of its own."""
    cfg = preset(SMALL)
    uops = [Uop(k, 20 + k, 0) for k in range(6)]
    insns = [
        Alu(op=AluOp.MUL, uop_bgn=0, uop_end=3, iter_out=1, iter_in=1),
        Alu(op=AluOp.MUL, use_imm=True, imm=-12345, uop_bgn=3, uop_end=6, iter_out=1),
    ]
    m = machine_with(cfg, uops, 7)
    assert_alu_matches(cfg, m, insns, partial(AluUnit, dsp=dsp))


@pytest.mark.parametrize(("seed", "dsp"), [(s, None) for s in range(3)] + ON_DSPS)
def test_alu_unit_matches_the_simulator(seed, dsp):
    cfg = preset(SMALL)
    rng = np.random.default_rng(seed + 10)
    uops = [Uop(int(rng.integers(0, 40)), int(rng.integers(0, 40)), 0) for _ in range(5)]
    uops += [Uop(3, 4, 0), Uop(4, 3, 0), Uop(3, 3, 0)]  # rows read right after being written
    insns = []
    for op in AluOp:
        imm = int(rng.integers(-20, 20)) if op == AluOp.SHR else int(rng.integers(-3000, 3000))
        insns.append(
            Alu(
                op=op,
                use_imm=True,
                imm=imm,
                uop_bgn=0,
                uop_end=5,
                iter_out=2,
                iter_in=3,
                dst_out=2,
                dst_in=1,
                src_out=1,
                src_in=3,
            )
        )
        insns.append(
            Alu(
                op=op,
                uop_bgn=0,
                uop_end=5,
                iter_out=2,
                iter_in=2,
                dst_out=3,
                dst_in=1,
                src_out=2,
                src_in=1,
            )
        )
    insns.append(Alu(op=AluOp.ADD, uop_bgn=5, uop_end=8, iter_out=2, iter_in=1))
    insns.append(Alu(op=AluOp.MUL, use_imm=True, imm=0, uop_bgn=5, uop_end=8, iter_out=1))
    m = machine_with(cfg, uops, seed)
    assert_alu_matches(cfg, m, insns, partial(AluUnit, dsp=dsp))


@pytest.mark.parametrize("op", list(AluOp))
def test_alu_unit_reads_a_repeated_src_once_and_keeps_it_current(op):
    """One micro-op whose src the loop leaves in place (LoopSequencer.src_repeats): the unit
    reads it once, and its copy must follow the unit's own writes to that row."""
    cfg = preset(SMALL)
    uops = [Uop(3, 5, 0), Uop(6, 6, 0), Uop(10, 30, 0)]
    insns = [
        # src stride 0 in both loops, dst sweeping over the src row (rewritten mid-way)
        Alu(op=op, uop_bgn=0, uop_end=1, iter_out=3, iter_in=2, dst_out=2, dst_in=1),
        # dst is src: the row as the micro-op before left it, every time
        Alu(op=op, uop_bgn=1, uop_end=2, iter_out=2, iter_in=3),
        # per-channel style: inner src stride 0, outer 1
        Alu(op=op, uop_bgn=2, uop_end=3, iter_out=2, iter_in=4, dst_out=4, dst_in=1, src_out=1),
    ]
    m = machine_with(cfg, uops, 7)
    m.acc[...] = np.random.default_rng(8).integers(-50, 50, m.acc.shape)  # MUL stays small
    assert_alu_matches(cfg, m, insns)


def test_units_flag_out_of_range_indices():
    cfg = preset(SMALL)
    depth = cfg.depth("acc")
    uops = [Uop(depth - 2, 0, 0)]
    m = machine_with(cfg, uops, 0)
    _, errors = run_unit(
        cfg,
        AluUnit,
        m,
        [Alu(op=AluOp.ADD, use_imm=True, imm=1, uop_bgn=0, uop_end=1, iter_out=4, dst_out=1)],
    )
    assert errors == [True]
    _, errors = run_unit(
        cfg, GemmUnit, m, [Gemm(uop_bgn=0, uop_end=1, iter_out=1, iter_in=4, dst_in=1)]
    )
    assert errors == [True]


BOUNDARY = [  # (the micro-op's field, the stride, iterations, whether an index is out of range)
    (-2, 1, 2, False),  # the last index at depth - 1
    (-1, 1, 2, True),  # at depth
    (0, -1, 2, False),  # the offset alone reaches depth - 1
    (0, -1, 3, True),  # and past depth (the check's room negative)
]


@pytest.mark.parametrize(("field", "stride", "iters", "over"), BOUNDARY)
@pytest.mark.parametrize(
    ("unit", "name"),
    [("gemm", "dst"), ("gemm", "src"), ("gemm", "wgt"), ("alu", "dst"), ("alu", "src")],
)
def test_range_checks_at_the_boundary(unit, name, field, stride, iters, over):
    """Each index's check, index >= depth, worked out as the micro-op's field against depth -
    offset (a register from the offset a cycle early): at the last row, one past it, and with
    the offset alone past the depth."""
    cfg = preset(SMALL)
    depth = cfg.depth({"dst": "acc", "src": "inp" if unit == "gemm" else "acc", "wgt": "wgt"}[name])
    fields = {"dst": 0, "src": 0, "wgt": 0, name: field % depth}
    m = machine_with(cfg, [Uop(**fields)], 0)
    loop = {
        f"{name}_in": stride % depth,
        "iter_out": 1,
        "iter_in": iters,
        "uop_bgn": 0,
        "uop_end": 1,
    }
    if unit == "gemm":
        _, errors = run_unit(cfg, GemmUnit, m, [Gemm(**loop)])
    else:
        _, errors = run_unit(cfg, AluUnit, m, [Alu(op=AluOp.ADD, **loop)])
    assert errors == [over]


KERNEL = [Uop(3, 0, 0), Uop(3, 0, 0), Uop(40, 0, 0), Uop(7, 8, 0), Uop(8, 50, 0), Uop(12, 20, 0)]
IMM = dict(use_imm=True, imm=5)


@pytest.mark.parametrize(
    "pair",
    [
        # an immediate op on one row, again and again; then sweeping rows
        (
            dict(IMM, uop_bgn=0, uop_end=1, iter_out=3, iter_in=4),
            dict(IMM, uop_bgn=0, uop_end=1, iter_out=3, iter_in=4, dst_out=4, dst_in=1),
        ),
        # two micro-ops of one dst; then of two
        (
            dict(IMM, uop_bgn=0, uop_end=2, iter_out=2, iter_in=3, dst_in=1),
            dict(IMM, uop_bgn=1, uop_end=3, iter_out=2, iter_in=3, dst_in=1),
        ),
        # a repeated src the micro-op before wrote; then a src nothing writes
        (
            dict(uop_bgn=3, uop_end=4, iter_out=2, iter_in=4, dst_in=1),
            dict(uop_bgn=4, uop_end=5, iter_out=2, iter_in=4, dst_in=1),
        ),
        # a repeated src and a dst that repeats in the inner loop; then one that moves
        (
            dict(uop_bgn=5, uop_end=6, iter_out=3, iter_in=3, dst_out=1),
            dict(uop_bgn=5, uop_end=6, iter_out=3, iter_in=3, dst_out=3, dst_in=1),
        ),
    ],
)
def test_alu_unit_waits_where_a_micro_op_reads_the_row_written_just_before(pair):
    """A micro-op of one phase that reads the row the one before writes waits a cycle (the
    operands see a write a cycle after it), as sim.timing.alu_hazards counts: the unit takes
    exactly that many cycles more than on the same loop over rows apart, and the results
    agree with the simulator's."""
    from tilecraft.hw.timing import alu_hazards

    cfg = preset(SMALL)
    cycles, stalls = [], []
    for fields in pair:
        insn = Alu(op=AluOp.ADD, **fields)
        row = insn_table([insn])[0]
        row = {k: row[k] for k in row.dtype.names}
        m = machine_with(cfg, KERNEL, 3)
        stalls.append(alu_hazards(row, m.uop_dst, m.uop_src))
        acc, errors = run_unit(cfg, AluUnit, m, [insn], cycles)
        semantics.alu(m, row)
        assert errors == [False] and acc == words(m.acc), fields
    assert stalls[0] > 0 and stalls[1] == 0, stalls
    assert cycles[0] - cycles[1] == stalls[0], (cycles, stalls)
