"""ops.requant: the integer datapath against numpy's float32 arithmetic (onnxruntime's formula)
over the whole int32 range, random scales and every kind of tie; tests/ops/
test_requant_onnxruntime.py checks the formula itself against onnxruntime's kernels."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tilecraft.errors import ScheduleError
from tilecraft.ops.requant import (
    MAX_EXPONENT,
    MIN_EXPONENT,
    _bit_length,
    float32_requantize,
    fma32,
    requantize,
    scale_fields,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
SCALES = st.floats(
    2.0**MIN_EXPONENT, 2.0 ** (MAX_EXPONENT + 1), exclude_max=True, width=32, allow_subnormal=False
)


def _both(v, scale, zp, lo, hi, axis=0):
    theirs = float32_requantize(v, scale, zp, lo, hi, channel_axis=axis)
    ours = requantize(v, scale_fields(scale), zp, lo, hi, channel_axis=axis)
    return theirs, ours


def _assert_same(v, scale, zp, lo, hi, axis=0):
    theirs, ours = _both(v, scale, zp, lo, hi, axis)
    wrong = np.flatnonzero(theirs != ours)
    assert wrong.size == 0, (
        f"{wrong.size} of {theirs.size} differ, first v={np.ravel(v)[wrong[0]]} "
        f"scale={np.ravel(np.broadcast_to(scale, np.shape(v)))[wrong[0]]!r}: "
        f"float32 {theirs.flat[wrong[0]]}, integer {ours.flat[wrong[0]]}"
    )


@settings(max_examples=300, deadline=None)
@given(
    v=hnp.arrays(np.int64, st.integers(1, 64), elements=INT32),
    scale=SCALES,
    zp=st.integers(-300, 300),
    bounds=st.tuples(st.integers(-(2**16), 2**16), st.integers(0, 2**17)),
)
def test_integer_datapath_is_float32_for_any_int32_and_scale(v, scale, zp, bounds):
    lo, width = bounds
    _assert_same(v, np.float32(scale), zp, lo, lo + width)


def _near_ties(rng, scale, count):
    """Values whose float32 product lands on or beside k + 1/2, or whose conversion to float32
    rounds (|v| past 2**24, on and beside the halfway points between float32 neighbours)."""
    k = rng.integers(-400, 400, count)
    ties = np.clip(np.round((k + 0.5) / np.float64(scale)), -(2**31), 2**31 - 1).astype(np.int64)
    ties = ties + rng.integers(-2, 3, count)
    ulp_exp = rng.integers(1, 8, count)  # |v| in [2**24, 2**31): float32's step is 2**ulp_exp
    base = rng.integers(2**23, 2**24, count) << ulp_exp
    halfway = base + (1 << (ulp_exp - 1)) + rng.integers(-1, 2, count)
    signs = rng.choice([-1, 1], count)
    v = np.concatenate([ties, signs * halfway])
    return np.clip(v, -(2**31), 2**31 - 1)


def test_the_leading_one_is_found_exactly_where_float64_rounds_up():
    """The datapath's leading-one detector (float64's exponent, corrected where the conversion
    rounds up to a power of two: 2**k - 1 past 53 bits) against Python's int.bit_length."""
    k = np.arange(1, 62, dtype=np.int64)
    edges = [np.array([0, 1, 2, 3]), 1 << k, (1 << k) - 1, (1 << k) + 1, (1 << k) - (k >> 1)]
    rng = np.random.default_rng(0)
    x = np.concatenate([*edges, rng.integers(0, 1 << 62, 10_000), rng.integers(0, 1 << 24, 1000)])
    assert np.array_equal(_bit_length(x), [int(v).bit_length() for v in x])


def test_integer_datapath_on_ties_and_float32_conversion_boundaries():
    rng = np.random.default_rng(42)
    for exponent in list(range(-40, 6)) + [MIN_EXPONENT, MAX_EXPONENT]:
        for _ in range(3):
            scale = np.float32(rng.uniform(1, 2) * 2.0**exponent)
            v = np.concatenate([_near_ties(rng, scale, 4000), rng.integers(-(2**31), 2**31, 4000)])
            _assert_same(v, scale, int(rng.integers(-128, 128)), -128, 127)
            _assert_same(v, scale, 0, -(2**23), 2**23)  # wide: every rounding shows


def test_extremes_of_int32_and_of_the_scale_range():
    v = np.array([-(2**31), -(2**31) + 1, -1, 0, 1, 2**24, 2**24 + 1, 2**24 + 3, 2**31 - 1])
    for scale in (2.0**MIN_EXPONENT, np.nextafter(np.float32(2.0**16), 0), 1.0, 0.5, 2.0**-24):
        _assert_same(v, np.float32(scale), 0, -(2**23), 2**23)
        _assert_same(v, np.float32(scale), 5, -128, 127)


def test_per_channel_scales_along_the_channel_axis():
    rng = np.random.default_rng(7)
    acc = rng.integers(-(2**20), 2**20, (2, 8, 3, 3))
    scale = (rng.uniform(1, 2, 8) * 2.0 ** rng.integers(-20, -8, 8)).astype(np.float32)
    theirs, ours = _both(acc, scale, -3, -128, 127, axis=1)
    assert np.array_equal(theirs, ours)
    for c in range(8):  # channel c used its own scale
        alone = float32_requantize(acc[:, c], scale[c], -3, -128, 127, channel_axis=0)
        assert np.array_equal(theirs[:, c], alone)


def test_results_lie_in_the_clip_and_zero_maps_to_the_zero_point():
    v = np.array([-(2**31), 0, 2**31 - 1])
    out = requantize(v, scale_fields(0.5), 3, 0, 255, channel_axis=0)
    assert out.tolist() == [0, 3, 255]


def test_scale_fields_hold_the_scale_exactly():
    rng = np.random.default_rng(3)
    exponents = rng.integers(MIN_EXPONENT, MAX_EXPONENT + 1, 1000)
    s = (rng.uniform(1, 2, 1000) * 2.0**exponents).astype(np.float32)
    fields = scale_fields(s)
    assert np.array_equal(fields.scale, s)
    assert fields.significand.min() >= 2**23 and fields.significand.max() < 2**24
    assert fields.exponent.min() >= MIN_EXPONENT and fields.exponent.max() <= MAX_EXPONENT


@pytest.mark.parametrize("scale", [0.0, -0.5, float("nan"), float("inf"), 2.0**16, 2.0**-65, 1e-45])
def test_scales_outside_the_units_range_are_refused_by_value(scale):
    with pytest.raises(ScheduleError, match=r"outside the unit's range: a float32 scale must lie"):
        scale_fields([0.25, scale])


@pytest.mark.parametrize(
    "zp, lo, hi, message",
    [
        (2**23 + 1, -128, 127, r"zero point 8388609 is outside -2\*\*23..2\*\*23"),
        (0, 5, 4, r"clip \[5, 4\] is empty"),
        (0.5, -128, 127, r"zero point must be an int, not 0.5"),
    ],
)
def test_bad_zero_points_and_clips_are_refused(zp, lo, hi, message):
    with pytest.raises(ScheduleError, match=message):
        requantize(np.zeros(2), scale_fields(0.5), zp, lo, hi)
    with pytest.raises(ScheduleError, match=message):
        float32_requantize(np.zeros(2), 0.5, zp, lo, hi)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 64),
    scale=SCALES,
    zp=st.integers(-300, 300),
    bounds=st.tuples(st.integers(-128, 127), st.integers(0, 255)),
)
def test_the_residual_add_is_after_the_rounding_for_any_int32_and_scale(data, n, scale, zp, bounds):
    """The unit's residual add (configs with `requant_residual`): the integer datapath equals
    float32's rint(fl32(v) * scale) + residual + zero point, clipped; the residual goes in
    before the clip, so a product past the clip can come back inside it."""
    v = data.draw(hnp.arrays(np.int64, n, elements=INT32))
    res = data.draw(hnp.arrays(np.int64, n, elements=st.integers(-128, 127)))
    lo, hi = bounds[0], min(127, bounds[0] + bounds[1])
    scale = np.float32(scale)
    theirs = float32_requantize(v, scale, zp, lo, hi, channel_axis=0, residual=res)
    ours = requantize(v, scale_fields(scale), zp, lo, hi, channel_axis=0, residual=res)
    np.testing.assert_array_equal(ours, theirs)
    f = v.astype(np.float32) * scale  # written out once more, element by element
    for k in range(n):
        want = min(max(int(np.rint(f[k])) + int(res[k]) + zp, lo), hi)
        assert theirs[k] == want, (int(v[k]), float(scale), int(res[k]))


def test_the_residual_add_by_hand():
    fields = scale_fields(np.float32(0.5))
    v = np.array([5, 7, 500, 2**31 - 1, -(2**31)])
    res = np.array([3, 0, -128, -128, 127])
    # 2.5 -> 2 (to even) + 3; 3.5 -> 4; 250 past the clip, back inside with -128; 2**30 past
    # any residual; -2**30 likewise
    assert requantize(v, fields, 1, -128, 127, channel_axis=0, residual=res).tolist() == [
        6, 5, 123, 127, -128,
    ]  # fmt: skip
    with pytest.raises(ScheduleError, match="residual 128 is not an int8 value"):
        requantize(v, fields, 0, -128, 127, channel_axis=0, residual=res + 1)
    with pytest.raises(ScheduleError, match=r"residual must be integers shaped like its values"):
        float32_requantize(v, 0.5, 0, -128, 127, channel_axis=0, residual=res[:2])


def _nearest_float32(q: Fraction) -> np.float32:
    """The float32 nearest the exact rational q, ties to the even significand (brute force over
    the neighbours of float64's guess)."""
    guess = np.float32(float(q))
    up, down = np.float32(np.inf), np.float32(-np.inf)
    near = [guess, np.nextafter(guess, up), np.nextafter(guess, down)]
    best = min(
        near,
        key=lambda f: (abs(Fraction(float(f)) - q), int(np.float32(f).view(np.uint32)) & 1),
    )
    return np.float32(best)


def test_fma32_rounds_once_as_an_fma_instruction():
    rng = np.random.default_rng(9)
    x = rng.integers(-255, 256, 3000).astype(np.float32)
    y = (rng.uniform(1, 2, 3000) * 2.0 ** rng.integers(-30, 8, 3000)).astype(np.float32)
    # z near -x*y makes cancellation; z tiny makes the exponents far apart; others random
    z = np.concatenate(
        [
            (-(x[:1000].astype(np.float64) * y[:1000]) * (1 + 2.0**-30)).astype(np.float32),
            (rng.uniform(-1, 1, 1000) * 2.0**-60).astype(np.float32),
            rng.uniform(-300, 300, 1000).astype(np.float32),
        ]
    )
    got = fma32(x, y, z)
    for i in range(x.size):
        exact = Fraction(float(x[i])) * Fraction(float(y[i])) + Fraction(float(z[i]))
        assert got[i] == _nearest_float32(exact), (x[i], y[i], z[i])


def test_fma32_on_a_tie_that_only_a_term_below_float64_decides():
    """3 * (1 + 2**-23) lies halfway between two float32 neighbours; a z of 2**-100, lost in
    float64's sum, decides the rounding (and without it the tie goes to the even one)."""
    x, y = np.float32(3), np.float32(1 + 2**-23)
    ulp = 2.0**-22
    got = [float(fma32(x, y, np.float32(z))) for z in (0.0, 2.0**-100, -(2.0**-100))]
    assert got == [3 + 2 * ulp, 3 + 2 * ulp, 3 + ulp]
