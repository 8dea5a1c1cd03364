"""The Add of two int8 tensors at their own scales on the accelerator (`ScaledAdd`): bit-exact
with the reference on the simulator, the reference within a fraction of a step of the real
scaled sum, and refused clearly where the hardware cannot."""

import numpy as np
import pytest

from tilecraft.compiler.programs.eltwise import compile_scaled_add
from tilecraft.compiler.quant.requantization import add_requant
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig, preset
from tilecraft.ops import Computation, ScaledAdd
from tilecraft.ops import host as H
from tilecraft.ops.reference import outputs
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs


def _op(shape, ratio_a, ratio_b, zeros=(0, 0, 0), clip=(-128, 127)) -> ScaledAdd:
    wa, ma, wb, mb, s = add_requant(ratio_a, ratio_b)
    return ScaledAdd(*shape, ma, mb, min(s, 15), wa, wb, max(s - 15, 0), *zeros, clip)


@pytest.mark.parametrize(
    "config, op",
    [
        ("default", _op((2, 40, 5, 7), 2.3396, 0.2497, (27, -128, -5), (-100, 127))),
        ("1x8x8", _op((1, 64, 28, 28), 0.81, 1.17)),  # more rows than one group holds
        ("2x16x16", _op((3, 20, 4, 4), 0.05, 3.9, (-3, 100, 7))),
        ("default", _op((1, 16, 3, 3), 1.0, 1.0, (0, 0, 0), (0, 127))),  # a fused ReLU
    ],
)
def test_scaled_add_is_bit_exact(config, op):
    program = compile_scaled_add(preset(config), op)
    x = random_inputs(program, np.random.default_rng(3))
    result = get_device("sim").run(program, pack_inputs(program, x))
    got = unpack_outputs(program, result.outputs)
    ok, message = check_outputs(program, x, got)
    assert ok, message
    assert result.report.cycles > 0 and {b.name for b in program.inputs} == {"input", "residual"}


def test_the_reference_is_the_rounded_real_sum():
    """clip(rint((a - za) * ra + (b - zb) * rb) + zy): equal but where the real sum lies
    within about 2**-18 of a half, and never more than one step apart (ratios from real scales;
    simple fractions make exact halves, which round up here and to even in onnxruntime)."""
    rng = np.random.default_rng(4)
    a, b = (rng.integers(-128, 128, (4, 16, 9, 9), dtype=np.int8) for _ in range(2))
    for ratio_a, ratio_b, zeros in (
        (2.3396, 0.2497, (27, -128, -5)),
        (0.3137, 0.7713, (0, 0, 0)),
        (5.5031, 0.0013, (-1, 3, 0)),
    ):
        op = _op(a.shape, ratio_a, ratio_b, zeros)
        got = outputs(Computation(op), {"input": a, "residual": b})["output"].astype(int)
        real = (a.astype(float) - zeros[0]) * ratio_a + (b.astype(float) - zeros[1]) * ratio_b
        want = np.clip(np.rint(real) + zeros[2], -128, 127)
        assert np.abs(got - want).max() <= 1 and (got == want).mean() > 0.999
        host = H.run(H.Add(ratio_a, ratio_b, (-128, 127), *zeros), [a, b], {})
        assert (host.astype(int) == want).mean() > 0.999  # onnxruntime's QLinearAdd on the host


def test_add_requant_keeps_each_ratio_within_a_small_part_of_a_step():
    rng = np.random.default_rng(5)
    for ratio_a, ratio_b in 10 ** rng.uniform(-3, 1, (40, 2)):
        wa, ma, wb, mb, s = add_requant(float(ratio_a), float(ratio_b))
        for w, m, r in ((wa, ma, ratio_a), (wb, mb, ratio_b)):
            assert 1 <= w <= 127 and 1 <= m < 2**15
            assert abs(w * m / 2**s - r) * 255 < 2**-8, (ratio_a, ratio_b, w, m, s)
        assert 255 * (wa * ma + wb * mb) < 2**31


def test_what_the_hardware_cannot_is_refused():
    narrow = HwConfig(log_block_in=4, log_block_out=3, log_wgt_buff=16)
    with pytest.raises(ScheduleError, match="needs block_in == block_out"):
        compile_scaled_add(narrow, _op((1, 16, 4, 4), 1.0, 1.0))
    with pytest.raises(ScheduleError, match="weight_a must be in 1..127, not 200"):
        ScaledAdd(1, 16, 4, 4, 100, 100, 10, weight_a=200)
