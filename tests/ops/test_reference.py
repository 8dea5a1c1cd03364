"""The numpy oracle itself: conv2d against a naive loop, the epilogue's exact arithmetic, and
requantization's error bound against float."""

import numpy as np
import pytest

from tilecraft.errors import ScheduleError
from tilecraft.ops import Conv2d, Epilogue
from tilecraft.ops import reference as R


def naive_conv(x, w, stride, pad):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh = (h + 2 * pad[0] - kh) // stride[0] + 1
    ow = (wd + 2 * pad[1] - kw) // stride[1] + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    for b, f, i, j in np.ndindex(n, o, oh, ow):
        for ci, a, bb in np.ndindex(c, kh, kw):
            y, xx = i * stride[0] + a - pad[0], j * stride[1] + bb - pad[1]
            if 0 <= y < h and 0 <= xx < wd:
                out[b, f, i, j] += int(x[b, ci, y, xx]) * int(w[f, ci, a, bb])
    return out


@pytest.mark.parametrize("seed", range(3))
def test_conv_acc_matches_a_naive_loop(seed):
    rng = np.random.default_rng(seed)
    op = Conv2d(2, 3, 6, 5, 4, kernel=(3, 2), stride=(2, 1), pad=(1, 2))
    x = rng.integers(-128, 128, op.input_shape, dtype=np.int8)
    w = rng.integers(-128, 128, op.weight_shape, dtype=np.int8)
    np.testing.assert_array_equal(R.conv2d_acc(op, x, w), naive_conv(x, w, op.stride, op.pad))


def test_epilogue_steps_in_order_with_32_bit_wrap():
    acc = np.array([[2**31 - 1, -5, 1000, 7]], np.int64)
    ep = Epilogue(bias=True, multiplier="channel", shift=2, residual=True, relu=True)
    out = R.epilogue(
        ep,
        acc,
        bias=np.array([1, 0, 0, 0]),
        multiplier=np.array([1, 3, 1, 2]),
        residual=np.array([[0, 1, -300, 3]]),
    )
    # 2**31-1 + 1 wraps to -2**31 -> >>2 -> relu 0; -15+2>>2 = -4 +1 -> relu 0;
    # (1000+2)>>2 = 250 - 300 -> 0; (14+2)>>2 = 4 + 3 = 7
    np.testing.assert_array_equal(out, [[0, 0, 0, 7]])
    assert out.dtype == np.int8


def test_rounding_shift_is_round_half_up():
    ep = Epilogue(shift=1)
    acc = np.array([[-3, -2, -1, 0, 1, 2, 3]])
    np.testing.assert_array_equal(R.epilogue(ep, acc, channel_axis=0), [[-1, -1, 0, 0, 1, 1, 2]])


@pytest.mark.parametrize("scale", [1 / 256, 0.0137, [0.002, 0.01, 0.03], 0.7])
def test_requantization_error_bound_against_float(scale):
    bound = 1 << 16
    m, s = R.requant_params(scale, bound)
    scale = np.broadcast_to(np.asarray(scale, float), np.shape(m))
    assert int(np.max(m)) * bound < 2**31  # the multiply never wraps
    x = np.random.default_rng(0).integers(-bound, bound + 1, (4096, np.size(m)))
    q = (x * np.asarray(m).reshape(1, -1) + (1 << (s - 1))) >> s
    err = np.abs(q - x * scale.reshape(1, -1))
    assert err.max() <= 0.5 + bound / 2 ** (s + 1) + 1e-9
    if scale.max() * bound < 2**10:  # outputs near the int8 range: under one step off
        assert err.max() < 1.0


def test_requant_rejects_what_cannot_be_represented():
    with pytest.raises(ScheduleError, match="positive"):
        R.requant_params(-1.0, 100)
    with pytest.raises(ScheduleError, match="too small"):
        R.requant_params([1e-9, 100.0], 1 << 10)


@pytest.mark.parametrize("pre_shift", [0, 10])
@pytest.mark.parametrize("seed", range(6))
def test_accumulator_bounds_give_the_exact_clipped_result_for_every_input(seed, pre_shift):
    """requant_bounds: the bounded epilogue equals clip(v(acc)) computed without any wrap
    (Python ints), for accumulators anywhere in int32, at and around the bounds, with and
    without a residual, with one multiply or two."""
    rng = np.random.default_rng(seed)
    c, residual = 6, seed % 2 == 1
    scale = 10 ** rng.uniform(-6, -0.05, c)
    bias = rng.integers(-100_000, 100_000, c)
    lo, hi = (int(rng.integers(-128, 1)), int(rng.integers(0, 128))) if residual else (-128, 127)
    req = R.requant_bounds(scale, bias, (lo, hi), residual, pre_shift)
    s, m, m2 = req.shift, req.multiplier, req.multiplier2
    assert s == (23 if residual else 24)
    # m = round(scale * 2**s) errs by up to 2**-(s+1); two factors never do worse
    real = m * m2 / 2.0 ** (s + pre_shift) if pre_shift else m / 2.0**s
    assert np.all(np.abs(real - scale) <= 2.0 ** -(s + 1))
    ep = Epilogue(
        bias=True,
        multiplier="channel",
        shift=s,
        residual=residual,
        clip=(lo, hi) if residual else (-128, 127),
        acc_bounds=True,
        pre_shift=pre_shift,
    )
    acc = rng.integers(-(2**31), 2**31, (300, c))
    acc[:150] = (rng.normal(0, 150, (150, c)) / scale).astype(np.int64)
    lo_b, hi_b = req.acc_lo.astype(np.int64), req.acc_hi.astype(np.int64)
    acc = np.concatenate([acc, np.stack([lo_b - 1, lo_b, lo_b + 1, hi_b - 1, hi_b, hi_b + 1])])
    res = rng.integers(-128, 128, acc.shape) if residual else None
    got = R.epilogue(
        ep,
        acc,
        bias=bias,
        multiplier=m,
        residual=res,
        acc_lo=req.acc_lo,
        acc_hi=req.acc_hi,
        multiplier2=m2,
        channel_axis=1,
    )

    def exact(a, b, k, k2):  # Python ints: nothing wraps
        x = (int(a) + int(b)) * int(k)
        if pre_shift:
            x = (x >> pre_shift) * int(k2)
        return (x + (1 << (s - 1))) >> s

    k2s = m2 if pre_shift else [None] * c
    want = np.array([[exact(a, b, k, k2) for a, b, k, k2 in zip(row, bias, m, k2s)] for row in acc])
    np.testing.assert_array_equal(got, np.clip(want + (res if residual else 0), lo, hi))


@pytest.mark.parametrize("clip", [(-128, 127), (0, 127), (0, 15), (0, 6)])
def test_two_stage_multiply_is_closer_to_the_real_product(clip):
    """Also for a narrow clip (ReLU6, a 4-bit activation), whose bounds would allow a large
    first factor: the second must stay near 2**pre_shift, not become coarse."""
    rng = np.random.default_rng(3)
    scale, bias = 10 ** rng.uniform(-3.5, -1.5, 64), rng.integers(-100, 100, 64)
    errors = []
    for pre_shift in (0, 10):
        req = R.requant_bounds(scale, bias, clip, pre_shift=pre_shift)
        real = (
            req.multiplier * (req.multiplier2 if pre_shift else 1) / 2.0 ** (req.shift + pre_shift)
        )
        assert np.all(np.abs(real - scale) <= 2.0 ** -(req.shift + 1)), pre_shift
        ep = Epilogue(
            bias=True, multiplier="channel", shift=req.shift, acc_bounds=True, pre_shift=pre_shift
        )
        acc = (rng.uniform(clip[0] - 8, clip[1] + 8, (2000, 64)) / scale).astype(np.int64)
        y = R.epilogue(
            ep,
            acc,
            bias=bias,
            multiplier=req.multiplier,
            acc_lo=req.acc_lo,
            acc_hi=req.acc_hi,
            multiplier2=req.multiplier2,
        )
        errors.append(np.mean(y != np.clip(np.rint((acc + bias) * scale), *clip)))
    assert errors[1] <= 1e-4, errors
    if clip[1] - clip[0] > 100:  # a narrow range leaves both too few misses to compare
        assert errors[1] < errors[0] / 4, errors


def test_accumulator_bounds_refuse_scales_of_one_or_more():
    assert R.requant_bounds([0.5, 1.5], [0, 0]) is None
    with pytest.raises(ScheduleError, match="rounds to a zero multiplier"):
        R.requant_bounds([1e-9], [0])
