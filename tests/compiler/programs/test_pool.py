"""Pooling on the accelerator: max pool and global average pool programs, bit-exact with the
reference on the simulator (random inputs, negative values included), and refused clearly where
the hardware cannot."""

import numpy as np
import pytest

from tilecraft.compiler.programs import pool
from tilecraft.compiler.programs.pool import compile_global_avgpool, compile_maxpool
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig, preset
from tilecraft.hw.isa import Opcode
from tilecraft.hw.timing import Timing
from tilecraft.ops import Computation, GlobalAvgPool2d, MaxPool2d
from tilecraft.ops import host as H
from tilecraft.ops.reference import outputs
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs
from tilecraft.sim.simulator import model_report


def _run(program, seed=0):
    x = random_inputs(program, np.random.default_rng(seed))
    result = get_device("sim").run(program, pack_inputs(program, x))
    ok, message = check_outputs(program, x, unpack_outputs(program, result.outputs))
    assert ok, message
    return result.report


@pytest.mark.parametrize(
    "config, op",
    [
        ("default", MaxPool2d(1, 64, 112, 112, 3, 2, (1, 1, 1, 1))),  # ResNet-18's
        ("default", MaxPool2d(1, 40, 13, 11, 2, 2)),
        ("default", MaxPool2d(1, 8, 9, 7, (3, 2), (1, 2), (2, 0, 1, 1))),
        ("1x8x8", MaxPool2d(2, 20, 10, 10, 3, 1, (1, 1, 1, 1))),
        ("2x16x16", MaxPool2d(3, 20, 8, 8, 3, 2, (1, 1, 1, 1))),
        ("default", MaxPool2d(1, 16, 9, 12, (2, 3), (1, 2))),
        ("1x8x8", MaxPool2d(1, 8, 14, 14, 4, 3, (1, 1, 1, 1))),
        ("default", MaxPool2d(1, 64, 15, 15, 3, 2, (1, 1, 1, 1), pad_value=-128)),  # -inf padding
        ("1x8x8", MaxPool2d(1, 8, 9, 9, 3, 2, (2, 1, 0, 2), pad_value=-128)),
    ],
)
def test_maxpool_is_bit_exact(config, op):
    program = compile_maxpool(preset(config), op)
    report = _run(program)
    assert report.cycles > 0 and program.computation.op == op


SEPARABLE = [  # kernel = stride + 1: tiles of one to many windows, odd sizes, uneven pads
    ("default", MaxPool2d(1, 32, 29, 27, 3, 2, (1, 1, 1, 1), pad_value=-128)),
    ("1x8x8", MaxPool2d(2, 12, 9, 11, 3, 2, (2, 0, 1, 2), pad_value=-128)),
    ("2x16x16", MaxPool2d(3, 20, 8, 8, 3, 2, (1, 1, 1, 1))),
    ("default", MaxPool2d(1, 16, 20, 23, (4, 3), (3, 2), (1, 0, 2, 1))),  # a row of its own
    ("1x8x8", MaxPool2d(1, 8, 13, 14, (3, 4), (2, 3), (0, 1, 1, 0), pad_value=-128)),
    ("default", MaxPool2d(1, 16, 3, 3, 3, 2)),  # one window
    ("1x8x8", MaxPool2d(1, 8, 5, 3, 3, 2)),  # one output column
    ("1x8x8", MaxPool2d(1, 8, 3, 7, 3, 2, (0, 0, 0, 0))),  # one output row
]


@pytest.mark.parametrize("config, op", SEPARABLE)
def test_the_separable_max_pool_is_bit_exact(config, op, monkeypatch):
    """Rows then columns, each shared tap read once, taken everywhere it applies (small
    images too, where the compiler would take a pass per tap)."""
    monkeypatch.setattr(pool, "_separable_pays", lambda *args: True)
    program = compile_maxpool(preset(config), op)
    table = program.table()
    assert (table["opcode"] == Opcode.ALU).sum() > (table["opcode"] == Opcode.STORE).sum()
    for seed in range(3):
        _run(program, seed)


@pytest.mark.parametrize("config", ["1x8x8", "default", "2x16x16"])
def test_the_rtl_tiers_max_pool_takes_its_rows_then_its_columns(config):
    """The 29x29 pool tests/sim/test_rtl.py runs on the RTL is one the compiler takes
    separably (more ALU instructions than STOREs: the per-tap form has one a tile)."""
    cfg = preset(config)
    op = MaxPool2d(1, 2 * cfg.block_in, 29, 29, (3, 3), (2, 2), (1, 1, 1, 1), -128)
    table = compile_maxpool(cfg, op).table()
    assert (table["opcode"] == Opcode.ALU).sum() > (table["opcode"] == Opcode.STORE).sum()


def test_resnets_max_pool_takes_its_rows_then_its_columns():
    """ResNet's max pool: the separable passes beat a MAX per tap (eight passes over every
    output at two ALU cycles each) on the cycle model, and the compiler takes them."""
    cfg = preset("default")
    op = MaxPool2d(1, 64, 112, 112, 3, 2, (1, 1, 1, 1), pad_value=-128)
    separable = model_report(compile_maxpool(cfg, op)).cycles
    with pytest.MonkeyPatch.context() as m:
        m.setattr(pool, "_separable_pays", lambda *args: False)
        per_tap = model_report(compile_maxpool(cfg, op)).cycles
    rows = op.n * op.c // cfg.block_out * op.oh * op.ow
    eight_passes = rows * 8 * Timing.from_config(cfg).alu_ii_tensor
    assert separable < 0.9 * per_tap and per_tap >= eight_passes


@pytest.mark.parametrize(
    "config, op",
    [
        ("default", GlobalAvgPool2d(1, 512, 7, 7, 669, 15)),  # ResNet-18's
        ("default", GlobalAvgPool2d(1, 40, 3, 5, 1, 0)),
        ("1x8x8", GlobalAvgPool2d(2, 64, 7, 7, 300, 12)),
        ("2x16x16", GlobalAvgPool2d(3, 20, 4, 4, 2048, 15)),
        ("default", GlobalAvgPool2d(1, 40, 4, 4, 19660, 15, -128, -20, 2)),  # zero points, >>2 >>15
        ("1x8x8", GlobalAvgPool2d(2, 16, 7, 7, 21000, 15, 27, 101, 5)),
        ("default", GlobalAvgPool2d(1, 512, 7, 7, 20000, 15, 0, 0, 12, 97)),  # a GEMM weight of 97
        ("2x16x16", GlobalAvgPool2d(2, 20, 3, 3, 9000, 15, -100, 3, 7, 11)),
    ],
)
def test_global_avgpool_is_bit_exact(config, op):
    _run(compile_global_avgpool(preset(config), op))


def test_the_average_pool_with_zero_points_is_the_average_of_the_real_values():
    """((sum - N*z_x) * m >> p) rounded >> s, + z_y: the rounded real average at the output's
    scale and zero point, within one step for a 15-bit multiplier."""
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (2, 16, 7, 7), dtype=np.int8)
    s_x, s_y, z_x, z_y = 0.05, 0.011, 27, -101
    scale = s_x / (49 * s_y)
    m = round(scale * 2**20)
    op = GlobalAvgPool2d(2, 16, 7, 7, m, 15, z_x, z_y, 5)
    got = outputs(Computation(op), {"input": x})["output"].astype(int)
    real = (x.astype(float) - z_x).mean(axis=(2, 3), keepdims=True) * s_x
    want = np.clip(np.rint(real / s_y) + z_y, -128, 127)
    assert np.abs(got - want).max() <= 1 and (got == want).mean() > 0.99
    host = H.run(H.GlobalAvgPool(m, 20, z_x, z_y), [x], {})  # the host's single shift
    assert np.abs(host.astype(int) - want).max() <= 1


def test_the_average_pools_multiplier_is_as_close_as_32_bits_allow():
    """weight x multiplier carries up to 22 bits, fewer where the sum's reach leaves fewer
    within 32 bits (2**31 / reach): the error is within a few units of that precision."""
    from tilecraft.compiler.quant.requantization import gap_requant

    rng = np.random.default_rng(5)
    for scale, count, zero in zip(
        10 ** rng.uniform(-3, 0, 40), rng.choice([9, 16, 49], 40), rng.choice([0, 0, -128, 27], 40)
    ):
        weight, m, s = gap_requant(float(scale), int(count), int(zero))
        reach = int(count) * (256 if zero else 128)
        bits = min(2**22, 2**31 // reach)
        assert abs(weight * m / 2**s - scale) / scale < 4 / bits, (scale, weight, m, s)
        assert count * abs(zero) * weight <= 32767 and m < 2**15


def test_the_reference_pads_with_its_pad_value():
    x = np.random.default_rng(1).integers(-128, 128, (1, 3, 6, 6), dtype=np.int8)
    true = MaxPool2d(1, 3, 6, 6, 3, 2, (1, 1, 1, 1), pad_value=-128)
    want = H.run(H.MaxPool((3, 3), (2, 2), (1, 1, 1, 1)), [x], {})
    np.testing.assert_array_equal(outputs(Computation(true), {"input": x})["output"], want)
    relu = np.abs(x.astype(np.int16)).clip(0, 127).astype(np.int8)  # non-negative: 0 is -inf
    zero = MaxPool2d(1, 3, 6, 6, 3, 2, (1, 1, 1, 1), pad_value=0)
    np.testing.assert_array_equal(
        outputs(Computation(zero), {"input": relu})["output"],
        H.run(H.MaxPool((3, 3), (2, 2), (1, 1, 1, 1)), [relu], {}),
    )


def test_what_the_hardware_cannot_is_refused():
    narrow = HwConfig(log_block_in=4, log_block_out=3, log_wgt_buff=16)
    with pytest.raises(ScheduleError, match="needs block_in == block_out"):
        compile_maxpool(narrow, MaxPool2d(1, 16, 8, 8, 2, 2))
    with pytest.raises(ScheduleError, match=r"H\*W times the input zero point must fit"):
        compile_global_avgpool(preset("default"), GlobalAvgPool2d(1, 16, 20, 20, 3, 10, -128))
    with pytest.raises(ScheduleError, match="must fit the ALU immediate"):
        compile_global_avgpool(preset("default"), GlobalAvgPool2d(1, 16, 7, 7, 40000, 15))
    with pytest.raises(ScheduleError, match="exceeds an input slot"):
        compile_global_avgpool(preset("default"), GlobalAvgPool2d(1, 16, 56, 56, 3, 10))


@pytest.mark.parametrize(
    "config, op",
    [
        ("default", GlobalAvgPool2d(1, 512, 7, 7, 1, 0, 3, -5, scale=0.0123)),  # ResNet-18's
        ("1x8x8", GlobalAvgPool2d(3, 40, 5, 6, 1, 0, -7, 11, scale=0.071)),
        ("2x16x16", GlobalAvgPool2d(3, 40, 5, 6, 1, 0, -7, 11, scale=0.071)),
    ],
)
def test_global_avgpool_on_the_requantization_unit(config, op):
    """A float32 scale: the sums requantized by the STOREs (onnxruntime's arithmetic), no ALU
    instruction at all, bit-exact with the reference; refused where the config has no unit."""
    cfg = preset(config).replace(requant_lanes=8)
    program = compile_global_avgpool(cfg, op)
    _run(program, seed=4)
    table = program.table()
    assert not (table["opcode"] == Opcode.ALU).any()
    assert table[table["opcode"] == Opcode.STORE]["requant"].all()
    with pytest.raises(ScheduleError, match=r"requantizes on the requantization unit, which "
                       r"config \S+ does not have"):  # fmt: skip
        compile_global_avgpool(preset(config), op)


def test_a_float32_global_avgpool_takes_neutral_fixed_point_fields():
    with pytest.raises(ScheduleError, match=r"takes multiplier 1, weight 1, shift 0 and pre_shift"):
        GlobalAvgPool2d(1, 16, 7, 7, 3, 0, scale=0.01)
    with pytest.raises(ScheduleError, match=r"scale 1000000.0 is outside the unit's range"):
        GlobalAvgPool2d(1, 16, 7, 7, 1, 0, scale=1e6)
