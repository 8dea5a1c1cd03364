"""conv2d and dense compiled, verified and run on the simulator, bit-exact against numpy,
over random shapes and epilogues on several configs."""

import dataclasses

import numpy as np
import pytest

from tilecraft.compiler.operator.conv2d import conv2d, dense
from tilecraft.compiler.operator.params import random_scales
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import preset
from tilecraft.hw.isa import AluOp, MemId, Opcode
from tilecraft.ops import Conv2d, ConvSchedule, Epilogue
from tilecraft.ops import reference as R
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import Im2col, pack_inputs, random_inputs, unpack_outputs

CONFIGS = ["default", "1x8x8", "2x16x16", "1x16x8"]


def random_case(seed: int):
    """A random conv2d: odd channel counts, strides 1-2, kernels 1-7, padding 0-3, batch 1-2,
    and a random subset of the epilogue steps."""
    rng = np.random.default_rng(seed)
    zeros = np.random.default_rng(seed + 1000)  # zero points: padding value, output offset
    k = int(rng.choice([1, 1, 3, 3, 5, 7]))
    kh, kw = (k, k) if rng.random() < 0.8 else (k, int(rng.integers(1, 4)))
    pad = int(rng.integers(0, min(3, kh - 1) + 1)) if kh > 1 else int(rng.integers(0, 2))
    stride = int(rng.choice([1, 2]))
    h = int(rng.integers(max(kh, kw), 12))
    op = Conv2d(
        int(rng.integers(1, 3)),
        int(rng.integers(1, 40)),
        h,
        h + int(rng.integers(0, 3)),
        int(rng.integers(1, 40)),
        kernel=(kh, kw),
        stride=stride,
        pad=pad,
        pad_value=int(zeros.integers(-128, 128)) if zeros.random() < 0.5 else 0,
    )
    residual, bounds = bool(rng.random() < 0.4), bool(rng.random() < 0.25)
    multiplier = str(rng.choice(["none", "tensor", "channel"]))
    ep = Epilogue(
        bias=bool(rng.random() < 0.5),
        multiplier=multiplier,
        pre_shift=int(rng.choice([0, 5])) if multiplier == "channel" else 0,
        shift=int(rng.choice([0, 4, 9, 17])),
        residual=residual,
        relu=bool(rng.random() < 0.5) and (residual or not bounds),
        acc_bounds=bounds,
        offset=int(zeros.integers(-255, 256)) if zeros.random() < 0.5 else 0,
    )
    return op, ep, rng


def params_for(op_oc, ep, rng, wshape):
    p = {"weight": rng.integers(-128, 128, wshape, dtype=np.int8)}
    if ep.bias:
        p["bias"] = rng.integers(-(1 << 16), 1 << 16, op_oc, dtype=np.int32)
    if ep.multiplier == "channel":
        p["multiplier"] = rng.integers(1, 1 << 11, op_oc, dtype=np.int32)
    elif ep.multiplier == "tensor":
        p["multiplier"] = int(rng.integers(1, 1 << 11))
    if ep.pre_shift:
        p["multiplier2"] = rng.integers(1, 1 << 11, op_oc, dtype=np.int32)
    if ep.acc_bounds:
        p["acc_lo"] = rng.integers(-(1 << 20), 0, op_oc, dtype=np.int32)
        p["acc_hi"] = rng.integers(0, 1 << 20, op_oc, dtype=np.int32)
    return p


def run_and_check(program, rng):
    inputs = random_inputs(program, rng)
    result = get_device("sim").run(program, pack_inputs(program, inputs))
    ok, message = check_outputs(program, inputs, unpack_outputs(program, result.outputs))
    return ok, message, inputs, unpack_outputs(program, result.outputs)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("seed", range(8))
def test_random_conv2d_is_bit_exact(config, seed):
    cfg = preset(config)
    op, ep, rng = random_case(seed)
    params = params_for(op.oc, ep, rng, op.weight_shape)
    program = conv2d(cfg, op, ep, **params)
    ok, message, inputs, outputs = run_and_check(program, rng)
    assert ok, f"seed {seed} {config}: {op.describe()} [{ep.describe()}]\n{message}"
    # and independently of the oracle plumbing: straight from the reference
    extra = {k: v for k, v in params.items() if k != "weight"}
    want = R.conv2d(
        op, ep, inputs["input"], params["weight"], residual=inputs.get("residual"), **extra
    )
    np.testing.assert_array_equal(outputs["output"], want)


@pytest.mark.parametrize("config", ["default", "1x16x8"])
def test_parameters_can_be_program_inputs(config):
    op = Conv2d(2, 20, 7, 6, 24, kernel=3, stride=2, pad=1)
    ep = Epilogue(bias=True, multiplier="channel", shift=12, residual=True, relu=True)
    program = conv2d(preset(config), op, ep)
    assert {b.name for b in program.inputs} == {"input", "weight", "bias", "multiplier", "residual"}
    ok, message, *_ = run_and_check(program, np.random.default_rng(0))
    assert ok, message


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("shape", [(1, 16, 16), (50, 100, 70), (3, 7, 130)])
def test_dense_is_bit_exact(config, shape):
    m, k, n = shape
    rng = np.random.default_rng(m)
    ep = Epilogue(bias=True, shift=6, residual=m == 50)
    program = dense(
        preset(config),
        m,
        k,
        n,
        ep,
        weight=rng.integers(-128, 128, (k, n), dtype=np.int8),
        bias=rng.integers(-999, 999, n, dtype=np.int32),
    )
    ok, message, *_ = run_and_check(program, rng)
    assert ok, message


def test_first_resnet_layer_folds_its_taps():
    cfg = preset("default")
    op = Conv2d(1, 3, 32, 32, 16, kernel=7, stride=2, pad=3)
    program = conv2d(
        cfg, op, Epilogue(shift=8, relu=True), weight=np.ones(op.weight_shape, np.int8)
    )
    assert isinstance(program.buffer("input").layout, Im2col)
    assert program.buffer("weight").shape[1] == 10  # 147 folded channels in 10 blocks of 16
    ok, message, *_ = run_and_check(program, np.random.default_rng(1))
    assert ok, message


def test_overlap_beats_the_same_tiles_single_buffered():
    cfg = preset("default")
    op = Conv2d(1, 64, 14, 14, 64, kernel=3, pad=1)
    w = np.zeros(op.weight_shape, np.int8)
    fast = conv2d(cfg, op, Epilogue(shift=8), weight=w)
    s = dataclasses.replace(fast.schedule, double_buffer=False)
    slow = conv2d(cfg, op, Epilogue(shift=8), weight=w, schedule=s)
    x = {"input": np.zeros(op.input_shape, np.int8)}
    cycles = [get_device("sim").run(p, pack_inputs(p, x)).report.cycles for p in (fast, slow)]
    assert cycles[0] * 1.3 < cycles[1]


def test_the_parameters_are_loaded_once_and_copied_into_the_other_bank():
    """Tiles in both accumulator banks need the epilogue's vectors in each: the ALU copies
    the loaded ones (a zeroing pass and an ADD), each vector is loaded from DRAM once, and
    the program stays bit-exact."""
    cfg = preset("default")
    op = Conv2d(1, 64, 14, 14, 64, kernel=3, pad=1)
    ep = Epilogue(bias=True, multiplier="channel", shift=12, relu=True)
    rng = np.random.default_rng(3)
    program = conv2d(cfg, op, ep, **params_for(op.oc, ep, rng, op.weight_shape))
    table = program.table()
    loads = table[(table["opcode"] == Opcode.LOAD) & (table["mem"] == MemId.ACC)]
    assert sorted(loads["dram_base"]) == sorted(set(loads["dram_base"]))  # each vector once
    first_gemm = int(np.flatnonzero(table["opcode"] == Opcode.GEMM)[0])
    head = table[:first_gemm]
    copies = head[(head["opcode"] == Opcode.ALU) & (head["alu_op"] == AluOp.ADD)]
    copies = copies[copies["use_imm"] == 0]
    uops = program.uop_table()
    banks = {
        (cfg.acc_bank(int(uops["dst"][c["uop_bgn"]])), cfg.acc_bank(int(uops["src"][c["uop_bgn"]])))
        for c in copies
    }
    assert (0, 1) in banks  # the first tile's bank takes the last bank's loaded copy
    ok, message, *_ = run_and_check(program, rng)
    assert ok, message


def test_program_round_trips_through_a_file(tmp_path):
    from tilecraft.runtime.program import Program

    op = Conv2d(1, 8, 5, 5, 8, kernel=3, pad=1)
    program = conv2d(
        preset("default"),
        op,
        Epilogue(bias=True, shift=3),
        weight=np.ones(op.weight_shape, np.int8),
        bias=np.arange(8, dtype=np.int32),
    )
    loaded = Program.load(program.save(tmp_path / "c.tcp"))
    ok, message, *_ = run_and_check(loaded, np.random.default_rng(2))
    assert ok, message


@pytest.mark.parametrize("config", ["default", "1x16x8", "2x16x16"])
@pytest.mark.parametrize(
    "schedule",
    [
        ConvSchedule(3, 2, 4, 5, "oc_outer", True),  # ragged edges in every dimension
        ConvSchedule(2, 1, 3, 7, "spatial_outer", True),
        ConvSchedule(4, 3, 5, 3, "oc_outer", False),
        ConvSchedule(1, 3, 2, 7, "oc_outer", True, acc_slots=4),
    ],
)
def test_explicit_ragged_schedules(config, schedule):
    op = Conv2d(3, 45, 11, 13, 70, kernel=3, stride=2, pad=2)
    ep = Epilogue(bias=True, multiplier="channel", shift=11, residual=True, relu=True)
    program = conv2d(preset(config), op, ep, schedule=schedule)
    assert program.schedule == schedule
    ok, message, *_ = run_and_check(program, np.random.default_rng(0))
    assert ok, message


@pytest.mark.parametrize("seed", range(3))
def test_random_legal_schedules_from_the_space(seed):
    from tilecraft.compiler.mapping.blocks import map_conv2d
    from tilecraft.compiler.operator.schedule import space

    cfg = preset("default")
    op = Conv2d(1, 40, 9, 9, 48, kernel=3, pad=1)
    ep = Epilogue(shift=5, relu=True)
    legal = list(space(cfg, map_conv2d(cfg, op, ep)))
    rng = np.random.default_rng(seed)
    for i in rng.choice(len(legal), 4, replace=False):
        program = conv2d(cfg, op, ep, schedule=legal[i])
        ok, message, *_ = run_and_check(program, rng)
        assert ok, f"{legal[i].describe()}: {message}"


NAMED_SHAPES = {
    "odd channels": Conv2d(1, 19, 8, 8, 21, kernel=3, pad=1),
    "stride 2": Conv2d(1, 32, 9, 9, 16, kernel=3, stride=2, pad=1),
    "1x1": Conv2d(1, 24, 6, 6, 40, kernel=1),
    "1x1 stride 2": Conv2d(1, 32, 8, 8, 16, kernel=1, stride=2),
    "7x7 pad 3": Conv2d(1, 16, 12, 12, 16, kernel=7, stride=2, pad=3),
    "pad 0": Conv2d(1, 16, 7, 7, 16, kernel=3),
    "pad 2": Conv2d(1, 16, 6, 6, 16, kernel=5, pad=2),
    "batch 2": Conv2d(2, 16, 6, 6, 32, kernel=3, pad=1),
    "padded with a zero point": Conv2d(1, 19, 7, 7, 16, kernel=3, stride=2, pad=1, pad_value=-90),
}
EPILOGUES = {
    "none": Epilogue(),
    "bias": Epilogue(bias=True),
    "channel requant": Epilogue(multiplier="channel", shift=10),
    "tensor requant": Epilogue(multiplier="tensor", shift=7),
    "relu": Epilogue(shift=6, relu=True),
    "clip": Epilogue(shift=6, clip=(-20, 90)),
    "residual": Epilogue(shift=6, residual=True),
    "acc bounds": Epilogue(bias=True, multiplier="channel", shift=14, acc_bounds=True),
    "acc bounds + residual": Epilogue(
        multiplier="channel", shift=14, residual=True, relu=True, acc_bounds=True
    ),
    "two-stage multiply": Epilogue(
        bias=True, multiplier="channel", shift=18, acc_bounds=True, pre_shift=6
    ),
    "zero point offset": Epilogue(
        bias=True, multiplier="channel", shift=14, acc_bounds=True, offset=-77
    ),
}


@pytest.mark.parametrize("config", ["default", "1x8x8"])
@pytest.mark.parametrize("shape", list(NAMED_SHAPES))
@pytest.mark.parametrize("epilogue", list(EPILOGUES))
def test_named_shapes_with_each_epilogue(config, shape, epilogue):
    op, ep = NAMED_SHAPES[shape], EPILOGUES[epilogue]
    rng = np.random.default_rng(len(shape) * 31 + len(epilogue))
    program = conv2d(preset(config), op, ep, **params_for(op.oc, ep, rng, op.weight_shape))
    ok, message, *_ = run_and_check(program, rng)
    assert ok, f"{shape} / {epilogue} on {config}: {message}"


@pytest.mark.parametrize(
    ("op", "schedule"),
    [
        # the last column tile's window lies wholly in the padding
        (Conv2d(1, 64, 8, 8, 16, kernel=3, pad=4), ConvSchedule(1, 1, 2, 4)),
        (Conv2d(1, 16, 6, 6, 16, kernel=1, pad=2), ConvSchedule(1, 1, 1, 1)),
        (Conv2d(1, 16, 6, 6, 16, kernel=1, pad=2), None),
        (Conv2d(2, 20, 5, 7, 24, kernel=(2, 3), stride=(2, 1), pad=(3, 4)), None),
    ],
)
def test_tiles_that_read_only_padding_are_exact(op, schedule):
    ep = Epilogue(bias=True, shift=5, relu=True)
    rng = np.random.default_rng(7)
    program = conv2d(
        preset("default"), op, ep, schedule=schedule, **params_for(op.oc, ep, rng, op.weight_shape)
    )
    ok, message, *_ = run_and_check(program, rng)
    assert ok, message


# ---- the requantization unit: FLOAT32 epilogues on configs with one --------------------------
UNIT_CONFIGS = {"default": 8, "1x8x8": 8, "2x16x16": 16}


def _float32_case(seed: int):
    """A random conv2d of `random_case`'s shapes with onnxruntime's requantization: zero
    points as offsets, clips inside int8, float32 scales of realistic size."""
    op, _, rng = random_case(seed)
    lo = int(rng.integers(-128, 0))
    ep = Epilogue(
        bias=bool(rng.random() < 0.8),
        multiplier="float32",
        offset=int(rng.integers(-100, 100)),
        clip=(lo, int(rng.integers(lo, 128))),
        relu=bool(rng.random() < 0.3),
    )
    params = {"weight": rng.integers(-128, 128, op.weight_shape, dtype=np.int8)}
    if ep.bias:
        params["bias"] = rng.integers(-(1 << 16), 1 << 16, op.oc, dtype=np.int32)
    params["multiplier"] = random_scales(rng, op.oc)
    return op, ep, params, rng


@pytest.mark.parametrize("config", list(UNIT_CONFIGS))
@pytest.mark.parametrize("seed", range(6))
def test_float32_requantization_on_the_unit_is_bit_exact(config, seed):
    cfg = preset(config).replace(requant_lanes=UNIT_CONFIGS[config])
    op, ep, params, rng = _float32_case(seed)
    program = conv2d(cfg, op, ep, **params)
    ok, message, inputs, outputs = run_and_check(program, rng)
    assert ok, f"seed {seed} {config}: {op.describe()} [{ep.describe()}]\n{message}"
    # the epilogue left the ALU: its only instructions zero the accumulators (SHR by the
    # width) and, before the first GEMM, copy the parameters into the other bank (an ADD)
    table = program.table()
    alu = table[table["opcode"] == Opcode.ALU]
    zero = (alu["alu_op"] == AluOp.SHR) & (alu["imm"] == -cfg.acc_bits)
    copies = np.flatnonzero((table["opcode"] == Opcode.ALU) & (table["alu_op"] == AluOp.ADD))
    assert (zero | (alu["alu_op"] == AluOp.ADD)).all()
    stores = table[table["opcode"] == Opcode.STORE]
    banks = {cfg.acc_bank(int(b)) for b in stores["param_base"]}  # the copies the unit reads
    loads = (table["opcode"] == Opcode.LOAD) & (table["mem"] == MemId.ACC)
    assert loads.sum() == 1 and len(banks) - 1 <= len(copies) <= 1  # one loaded, one copied
    assert all(k < np.flatnonzero(table["opcode"] == Opcode.GEMM)[0] for k in copies)
    stores = table[table["opcode"] == Opcode.STORE]
    assert stores["requant"].all()


def test_float32_requantization_on_a_dense_layer():
    cfg = preset("default").replace(requant_lanes=8)
    rng = np.random.default_rng(3)
    m, k, n = 5, 100, 70
    ep = Epilogue(bias=True, multiplier="float32", offset=-7)
    program = dense(
        cfg,
        m,
        k,
        n,
        ep,
        weight=rng.integers(-128, 128, (k, n), dtype=np.int8),
        bias=rng.integers(-999, 999, n, dtype=np.int32),
        multiplier=random_scales(rng, n),
    )
    ok, message, *_ = run_and_check(program, rng)
    assert ok, message


def test_float32_requantization_is_refused_where_the_config_has_no_unit():
    op, ep, params, _ = _float32_case(0)
    message = r"runs on the requantization unit, which config 1x16x16_\S+ does not have"
    with pytest.raises(ScheduleError, match=message + r".*requant_lanes > 0 \(e\.g\. \S+_rq8_rr\)"):
        conv2d(preset("default"), op, ep, **params)


def test_float32_scales_must_be_constants_the_unit_can_hold():
    cfg = preset("default").replace(requant_lanes=8)
    op, ep, params, _ = _float32_case(1)
    with pytest.raises(ScheduleError, match="must be given at compile time"):
        conv2d(cfg, op, ep, weight=params["weight"])
    bad = params["multiplier"].copy()
    bad[3] = 2.0**20
    with pytest.raises(ScheduleError, match=r"scale 1048576.0 is outside the unit's range"):
        conv2d(cfg, op, ep, **{**params, "multiplier": bad})


def test_a_program_for_the_unit_is_refused_on_a_device_without_it(tmp_path):
    """The program records its config; a device of the same config but the unit refuses it,
    naming both configs and the field; a program file keeps the unit (float32 scales and the
    requantizing STOREs) and runs bit-exact after loading."""
    from tilecraft.errors import ProgramError
    from tilecraft.runtime.program import Program

    cfg = preset("default").replace(requant_lanes=8)
    op, ep, params, _ = _float32_case(2)
    program = conv2d(cfg, op, ep, **params)
    with pytest.raises(ProgramError, match=r"is for config 1x16x16\S*_rq8 but the device is "
                       r"1x16x16_i8w8a32_15_15_17_17; .*requant_lanes: 8 != 0"):  # fmt: skip
        program.check_config(preset("default"))
    program.check_config(cfg)
    loaded = Program.load(program.save(tmp_path / "unit.tcp"))
    assert loaded.config == cfg and loaded.constants["multiplier"].dtype == np.float32
    ok, message, *_ = run_and_check(loaded, np.random.default_rng(5))
    assert ok, message


@pytest.mark.parametrize("config", list(UNIT_CONFIGS))
@pytest.mark.parametrize("seed", range(4))
def test_a_residual_on_the_units_residual_add_is_bit_exact_with_no_selector_gemm(config, seed):
    """With `requant_residual` the unit adds the residual after its rounding: bit-exact with
    the reference, the residual read from INP by the STORE (no selector GEMM, no ALU pass),
    and the same layer without the add refused on a config without it, naming the knob."""
    cfg = preset(config).replace(requant_lanes=UNIT_CONFIGS[config], requant_residual=1)
    op, ep, params, rng = _float32_case(seed)
    ep = dataclasses.replace(ep, residual=True)
    program = conv2d(cfg, op, ep, **params)
    ok, message, inputs, outputs = run_and_check(program, rng)
    assert ok, f"seed {seed} {config}: {op.describe()} [{ep.describe()}]\n{message}"
    extra = {k: v for k, v in params.items() if k != "weight"}
    want = R.conv2d(op, ep, inputs["input"], params["weight"], residual=inputs["residual"], **extra)
    np.testing.assert_array_equal(outputs["output"], want)
    table = program.table()
    gemms = table[table["opcode"] == Opcode.GEMM]
    assert gemms["uop_end"].max() > 0 and "select" not in {b.name for b in program.buffers}
    stores = table[table["opcode"] == Opcode.STORE]
    assert stores["requant"].all() and stores["residual"].all()
    alu = table[table["opcode"] == Opcode.ALU]
    assert ((alu["alu_op"] == AluOp.SHR) | (alu["alu_op"] == AluOp.ADD)).all()  # zero, copy
    with pytest.raises(ScheduleError, match=r"residual add config \S+ does not have.*_rr\)"):
        conv2d(cfg.replace(requant_residual=0), op, ep, **params)
