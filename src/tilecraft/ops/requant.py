"""onnxruntime's requantization, and the integer datapath that reproduces it bit for bit.

onnxruntime's CPU kernels (MLAS) turn a QLinearConv/QGemm accumulator into its 8-bit output in
float32 (docs/ONNXRUNTIME_ARITHMETIC.md has the sources):

    v = acc + bias                       int32, wrapping
    f = float32(v) * scale               two float32 roundings: the conversion (|v| > 2**24
                                         loses bits) and the product, each to nearest even
    f = min(max(f, lo - zp), hi - zp)    the clip, in float
    y = rint(f) + zp                     to nearest integer, ties to even

`float32_requantize` is that formula in numpy's float32 arithmetic: the reference we did not
write. `requantize` is the same function computed with integers only, stage by stage as a
hardware unit computes it (no floating point anywhere): the int32 to float32 conversion is a
leading-one search and a rounding shift of |v| to a 24-bit significand; the product is a 24 x 24
bit multiply whose 48-bit result is rounded to 24 bits the same way; the float to integer
conversion is a third rounding shift. `tests/ops/test_requant.py` checks that the two agree
on samples drawn from the whole int32 range and random scales, aimed at every kind of tie.

QLinearGlobalAveragePool is the same requantization of the sum less the zero points, with
`gap_scale`; QLinearAdd has a formula of its own (`add_fields`, `float32_qlinear_add`), which
depends on the host's instruction set; this is the x86 one.

A scale is a positive normal float32 from 2**-64 up to (not including) 2**16
(`scale_fields`): with |v| < 2**31 the product then never overflows float32 nor falls below
its normal range, so no special case of IEEE 754 arises, and the unit's exponent field is 7
bits. Both functions take the scale per output channel (or one for the tensor) along
`channel_axis`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.errors import ScheduleError
from tilecraft.hw.isa.requant import MAX_EXPONENT, MIN_EXPONENT, SIGNIFICAND_BITS

CLIP_LIMIT = 1 << 23  # within +-2**23, the clip bounds less the zero point are exact in float32


@dataclass(frozen=True)
class ScaleFields:
    """A float32 scale as the unit holds it: scale = significand * 2**(exponent - 23), with
    2**23 <= significand < 2**24 (int64 arrays, one per channel or one for the tensor)."""

    significand: np.ndarray
    exponent: np.ndarray

    @property
    def scale(self) -> np.ndarray:
        """The float32 scale these fields hold (exactly)."""
        return np.ldexp(self.significand.astype(np.float64), self.exponent - 23).astype(np.float32)


def scale_fields(scale) -> ScaleFields:
    """The unit's fields of float32 `scale` (scalar or per channel), or a ScheduleError naming
    the first scale the unit cannot hold."""
    s = np.asarray(scale, np.float32)
    low, high = np.float32(2.0**MIN_EXPONENT), np.float32(2.0 ** (MAX_EXPONENT + 1))
    bad = ~(np.isfinite(s) & (s >= low) & (s < high))
    if bad.any():
        raise ScheduleError(
            f"requantization scale {float(s[bad].flat[0])!r} is outside the unit's range: a "
            f"float32 scale must lie in [2**{MIN_EXPONENT}, 2**{MAX_EXPONENT + 1})"
        )
    bits = s.astype(np.float32).view(np.uint32).astype(np.int64)
    return ScaleFields(
        significand=(bits & 0x7FFFFF) | 0x800000,
        exponent=((bits >> 23) & 0xFF) - 127,
    )


def float32_scale(x_scale, w_scale, y_scale) -> np.ndarray:
    """QLinearConv's output scale, as onnxruntime computes it: x_scale * w_scale / y_scale in
    float32, the product rounded before the division."""
    x, w, y = (np.asarray(v, np.float32) for v in (x_scale, w_scale, y_scale))
    return (x * w / y).astype(np.float32)


def gap_scale(x_scale, y_scale, count: int) -> np.float32:
    """QLinearGlobalAveragePool's scale, as onnxruntime computes it: x_scale / (y_scale *
    count) in float32 (its accumulator is the sum less x's zero point times `count`)."""
    x, y = np.float32(x_scale), np.float32(y_scale)
    return np.float32(x / np.float32(y * np.float32(count)))


def float32_requantize(
    v, scale, zero_point, lo, hi, channel_axis: int = 1, residual=None
) -> np.ndarray:
    """onnxruntime's requantization of int32 values `v` (the accumulators plus bias) in numpy's
    float32 arithmetic: int64 results in [lo, hi]. The zero point and the clip bounds are ints,
    or arrays of one per channel. With `residual` (int8 values shaped like `v`: the unit's
    residual add, tilecraft's and not onnxruntime's) the rounded product plus the residual and
    the zero point is clipped instead."""
    v = np.asarray(v, np.int64).astype(np.int32)
    zero, lo, hi = _clip_params(zero_point, lo, hi, v.ndim, channel_axis)
    s = _per_channel(np.asarray(scale, np.float32), v.ndim, channel_axis)
    f = v.astype(np.float32) * s
    if residual is not None:  # |f| < 2**47: its integer is exact in int64
        return np.clip(np.rint(f).astype(np.int64) + _residual(residual, v) + zero, lo, hi)
    f = np.minimum(np.maximum(f, (lo - zero).astype(np.float32)), (hi - zero).astype(np.float32))
    return np.rint(f).astype(np.int64) + zero


def requantize(
    v, fields: ScaleFields, zero_point, lo, hi, channel_axis: int = 1, residual=None
) -> np.ndarray:
    """`float32_requantize` with integers only: the requantization unit's datapath (with
    `residual`, its residual add after the rounding)."""
    v = np.asarray(v, np.int64).astype(np.int32).astype(np.int64)
    zero, lo, hi = _clip_params(zero_point, lo, hi, v.ndim, channel_axis)
    sig = _per_channel(fields.significand, v.ndim, channel_axis)
    exp = _per_channel(fields.exponent, v.ndim, channel_axis)
    negative, magnitude = v < 0, np.abs(v)  # |v| <= 2**31: 32 bits unsigned
    # 1. int32 -> float32: |v| = a * 2**ea with a the 24-bit significand, rounded to even
    a, ea = _round_significand(magnitude, np.zeros_like(magnitude))
    # 2. the float32 product: a * sig has 48 bits, rounded to 24 the same way
    p, ep = _round_significand(a * sig, ea + exp - 23)
    # 3. float32 -> integer: p * 2**ep to the nearest integer, ties to even (ep <= 16 + 8)
    r = np.where(ep >= 0, p << np.clip(ep, 0, 62 - 48), _round_shift(p, -ep))
    r = np.minimum(r, 1 << 40)  # past any clip; keeps the sign and zero point in range
    r = np.where(negative, -r, r)
    if residual is not None:  # |r| <= 2**40 is past any clip, a residual added or not
        r = r + _residual(residual, v)
    return np.clip(r + zero, lo, hi)


def _residual(residual, v: np.ndarray) -> np.ndarray:
    """The residual as int64 values shaped like `v`, checked to be int8 values."""
    res = np.asarray(residual)
    if res.shape != v.shape or not np.issubdtype(res.dtype, np.integer):
        raise ScheduleError(
            f"the requantization's residual must be integers shaped like its values {v.shape}, "
            f"not {res.dtype} {res.shape}"
        )
    if res.size and (res.min() < -128 or res.max() > 127):
        bad = res.flat[np.argmax((res < -128) | (res > 127))]
        raise ScheduleError(f"the requantization's residual {bad} is not an int8 value")
    return res.astype(np.int64)


def _clip_params(zero_point, lo, hi, ndim: int, channel_axis: int):
    """The zero point and clip bounds as int64 arrays shaped for the channel axis, checked."""
    out = []
    for name, value in (("zero point", zero_point), ("clip low", lo), ("clip high", hi)):
        a = np.asarray(value)
        if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
            raise ScheduleError(f"the requantization's {name} must be an int, not {value!r}")
        if a.size == 0 or a.min() < -CLIP_LIMIT or a.max() > CLIP_LIMIT:
            bad = a.flat[np.argmax(np.abs(a))] if a.size else value
            raise ScheduleError(
                f"the requantization's {name} {bad} is outside -2**23..2**23, where float32 "
                f"holds every bound less the zero point exactly"
            )
        out.append(_per_channel(a.astype(np.int64), ndim, channel_axis))
    zero, low, high = out
    low_b, high_b = np.broadcast_arrays(low, high)
    if np.any(low_b > high_b):
        k = np.argmax(low_b > high_b)
        raise ScheduleError(
            f"the requantization's clip [{low_b.flat[k]}, {high_b.flat[k]}] is empty: low > high"
        )
    return zero, low, high


def _round_significand(x: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, e') with x * 2**e ~ m * 2**e', m of at most 24 bits: x rounded to nearest even at
    its 24th significant bit (x < 2**62), the carry out of the rounding renormalized."""
    drop = np.maximum(_bit_length(x) - SIGNIFICAND_BITS, 0)
    m = _round_shift(x, drop)
    carry = m >> SIGNIFICAND_BITS  # 1 where rounding up reached 2**24
    return m >> carry, e + drop + carry


def _round_shift(x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """x / 2**d rounded to nearest, ties to even (x >= 0, 0 <= d; d past x's width gives 0)."""
    d = np.minimum(d, 63)
    q = x >> d
    rest = x - (q << d)
    half = np.where(d > 0, np.left_shift(1, np.maximum(d - 1, 0)), 1 << 62)
    up = (rest > half) | ((rest == half) & ((q & 1) == 1))
    return q + up


def _bit_length(x: np.ndarray) -> np.ndarray:
    """The position of x's leading one plus one (0 for 0; 0 <= x < 2**62): what the unit's
    leading-one detector finds (hw/rtl/requant.py `_leading_one`), worked out here from
    float64's exponent of x, less one where the conversion rounded x up to a power of two."""
    n = np.frexp(x.astype(np.float64))[1].astype(np.int64)
    return n - ((x > 0) & (x < np.left_shift(1, np.maximum(n - 1, 0))))


def _per_channel(values: np.ndarray, ndim: int, channel_axis: int) -> np.ndarray:
    """A scalar, a vector of one value per channel (shaped to broadcast along `channel_axis`),
    or an array already shaped like the values (one per value, broadcast as it is)."""
    values = np.asarray(values)
    if values.ndim == 0 or values.size == 1:
        return values.reshape(())
    if values.ndim == ndim:
        return values
    shape = [1] * ndim
    shape[channel_axis] = values.size
    return values.reshape(shape)


@dataclass(frozen=True)
class AddFields:
    """QLinearAdd's float32 constants as onnxruntime's x86 kernel (AVX2, the one every x86 with
    AVX2 runs) computes them: c = a * ratio_a + b * ratio_b + fixed, with the zero points
    folded into `fixed`."""

    ratio_a: np.float32  # a_scale / c_scale
    ratio_b: np.float32
    fixed: np.float32  # c_zero - fma(ratio_a, a_zero, ratio_b * b_zero)


def add_fields(a_scale, a_zero: int, b_scale, b_zero: int, c_scale, c_zero: int) -> AddFields:
    """`AddFields` of a QLinearAdd. The compiler contracts the zero points' sum into a fused
    multiply-add (its file is built with -mfma), so `fixed` rounds twice, not three times."""
    ra = np.float32(np.float32(a_scale) / np.float32(c_scale))
    rb = np.float32(np.float32(b_scale) / np.float32(c_scale))
    for name, r in (("a", ra), ("b", rb)):
        if not (np.isfinite(r) and 2.0**MIN_EXPONENT <= r < 2.0**MAX_EXPONENT):
            raise ScheduleError(
                f"QLinearAdd's scale ratio {name}/c {float(r)!r} is outside "
                f"[2**{MIN_EXPONENT}, 2**{MAX_EXPONENT})"
            )
    inner = fma32(ra, np.float32(a_zero), np.float32(rb * np.float32(b_zero)))
    return AddFields(ra, rb, np.float32(np.float32(c_zero) - inner))


def float32_qlinear_add(a, b, fields: AddFields, lo: int, hi: int) -> np.ndarray:
    """QLinearAdd of 8-bit integer tensors `a` and `b` as onnxruntime's x86 kernel computes it:
    fma(a, ratio_a, fma(b, ratio_b, fixed)) rounded to nearest even, saturated to [lo, hi].
    Ratios below 2**15 keep every sum of 8-bit inputs inside int32, where onnxruntime's
    missing clamp before the conversion would matter (docs/ONNXRUNTIME_ARITHMETIC.md).
    ARM's NEON kernel computes another formula (fixed point, ties away from zero), which
    differs from this by one step on a few outputs in a million."""
    _, lo, hi = _clip_params(0, lo, hi, 0, 0)
    a = np.asarray(a, np.int64).astype(np.float32)
    b = np.asarray(b, np.int64).astype(np.float32)
    t = fma32(a, fields.ratio_a, fma32(b, fields.ratio_b, fields.fixed))
    return np.clip(np.rint(t).astype(np.int64), lo, hi)


def fma32(x, y, z) -> np.ndarray:
    """x * y + z for float32 x, y, z, rounded once to float32 (nearest even), as an FMA
    instruction does: the float64 product of two float32 is exact; the float64 sum's error
    (TwoSum) decides a round-to-odd, which makes the second rounding to float32 correct
    (Boldo and Melquiond: 53 >= 24 + 2 bits)."""
    p = np.asarray(x, np.float32).astype(np.float64) * np.asarray(y, np.float32)
    z = np.asarray(z, np.float32).astype(np.float64)
    s = p + z
    zz = s - p
    err = (p - (s - zz)) + (z - zz)  # s + err == p + z exactly
    odd = (s.view(np.int64) & 1) == 1
    towards = np.where(err > 0, np.inf, -np.inf)
    s = np.where((err != 0) & ~odd, np.nextafter(s, towards), s)
    return s.astype(np.float32)
