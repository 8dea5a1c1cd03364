"""The reference: the integer semantics of every operator, in numpy. **The reference is the
spec**: compiled programs must match it bit for bit, on every device. `outputs` computes what a
`Computation` gives for its tensors; conv2d, dense, gemm and epilogue are its parts.

Epilogue, in this order, on the int32 accumulator `acc` of output channel c:

    x = min(max(acc, acc_lo[c]), acc_hi[c])  (if acc_bounds)
    x = x + bias[c]                          (if bias)
    x = x * m[c]                             (if a multiplier; m one value or one per channel)
    x = (x >> p) * m2[c]                     (if p = pre_shift > 0: floor shift, 2nd multiplier)
    x = (x + 2**(s-1)) >> s                  (if s = shift > 0: round half up, arithmetic shift)
    x = x + residual                         (if residual: an int8 tensor shaped like the output)
    x = x + offset                           (if offset: the output's zero point, less the
                                              residual's)
    y = int8(clip(x, lo, hi))                (lo raised to 0 by ReLU; with acc_bounds and no
                                              residual, y = the low 8 bits of x instead)

With a FLOAT32 multiplier (the requantization unit's) everything after the bias is
onnxruntime's instead: y = int8(clip(rne(fl32(fl32(x) * scale[c])) + offset, lo, hi))
(`ops.requant`); such an epilogue has no accumulator bounds or shift, and its residual (the
unit's residual add) goes in after the rounding: y = int8(clip(rne(..) + residual + offset)).

Every step wraps at 32 bits (two's complement), exactly as the accelerator's ALU does.
`requant_params` turns float scales into (m, s) so that nothing wraps for realistic inputs;
`requant_bounds` gives (m, s, acc_lo, acc_hi) so that nothing wraps for any input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.errors import ScheduleError
from tilecraft.ops.operators import INT8 as INT8_RANGE
from tilecraft.ops.operators import (
    Computation,
    Conv2d,
    Dense,
    DepthwiseConv2d,
    Epilogue,
    Gemm,
    GlobalAvgPool2d,
    MaxPool2d,
    Multiplier,
    ScaledAdd,
)
from tilecraft.ops.requant import requantize, scale_fields

MULTIPLIER_BITS = 15  # m < 2**15 keeps |acc * m| < 2**31 for |acc| < 2**16


def wrap32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.int64).astype(np.int32).astype(np.int64)


def conv2d_acc(op: Conv2d, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The int32 accumulators (wrapping) of conv2d, as int64 values: (N, OC, OH, OW)."""
    _check(x, op.input_shape, "input")
    _check(w, op.weight_shape, "weight")
    acc = np.zeros(op.output_shape, np.int64)
    w64 = w.astype(np.int64)
    for i, j, tap in _taps(op, x):
        acc += np.einsum("nchw,oc->nohw", tap, w64[:, :, i, j])
    return wrap32(acc)


def _taps(op: Conv2d | DepthwiseConv2d, x: np.ndarray):
    """(i, j, the input, padded with `op.pad_value`, under kernel tap (i, j) at every output
    position)."""
    (kh, kw), (sh, sw), (ph, pw) = op.kernel, op.stride, op.pad
    n, c, h, w = x.shape
    padded = np.full((n, c, h + 2 * ph, w + 2 * pw), op.pad_value, np.int64)
    padded[:, :, ph : ph + h, pw : pw + w] = x
    for i in range(kh):
        for j in range(kw):
            yield i, j, padded[:, :, i : i + sh * op.oh : sh, j : j + sw * op.ow : sw]


def epilogue(
    ep: Epilogue,
    acc: np.ndarray,
    *,
    bias: np.ndarray | None = None,
    multiplier: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    acc_lo: np.ndarray | None = None,
    acc_hi: np.ndarray | None = None,
    multiplier2: np.ndarray | None = None,
    channel_axis: int = 1,
) -> np.ndarray:
    """int8 outputs from int32 accumulators, exactly as defined in the module docstring."""
    shape = [1] * acc.ndim
    shape[channel_axis] = acc.shape[channel_axis]
    x = wrap32(acc)
    if ep.acc_bounds:
        lo, hi = (np.asarray(v, np.int64).reshape(shape) for v in (acc_lo, acc_hi))
        x = np.minimum(np.maximum(x, lo), hi)
    if ep.bias:
        x = wrap32(x + np.asarray(bias, np.int64).reshape(shape))
    if ep.on_unit:  # onnxruntime's float32 requantization, on the requantization unit
        fields = scale_fields(np.asarray(multiplier, np.float32).reshape(-1))
        res = np.asarray(residual).reshape(x.shape) if ep.residual else None
        out = requantize(
            x, fields, ep.offset, ep.low, ep.high, channel_axis=channel_axis, residual=res
        )
        return out.astype(np.int8)
    if ep.multiplier != Multiplier.NONE:
        m = np.asarray(multiplier, np.int64)
        x = wrap32(x * (m.reshape(shape) if ep.multiplier == Multiplier.CHANNEL else m.reshape(())))
    if ep.pre_shift:
        x = wrap32((x >> ep.pre_shift) * np.asarray(multiplier2, np.int64).reshape(shape))
    if ep.shift:
        x = wrap32(x + (1 << (ep.shift - 1))) >> ep.shift
    if ep.residual:
        x = wrap32(x + np.asarray(residual, np.int64))
    if ep.offset:
        x = wrap32(x + ep.offset)
    if not ep.final_clip:
        return x.astype(np.int8)  # the store's narrowing: the low 8 bits
    return np.clip(x, ep.low, ep.high).astype(np.int8)


def conv2d(op: Conv2d, ep: Epilogue, x, w, **params) -> np.ndarray:
    return epilogue(ep, conv2d_acc(op, x, w), **params)


def depthwise_acc(op: DepthwiseConv2d, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The int32 accumulators of a depthwise conv2d: one single-channel conv per channel."""
    _check(x, op.input_shape, "input")
    _check(w, op.weight_shape, "weight")
    acc = np.zeros(op.output_shape, np.int64)
    w64 = w.astype(np.int64)[:, 0]
    for i, j, tap in _taps(op, x):
        acc += tap * w64[None, :, i, j, None, None]
    return wrap32(acc)


def dense(ep: Epilogue, x: np.ndarray, w: np.ndarray, **params) -> np.ndarray:
    """x (M, K) int8 @ w (K, N) int8 -> (M, N) int8 through the epilogue (channels = N)."""
    acc = wrap32(x.astype(np.int64) @ w.astype(np.int64))
    return epilogue(ep, acc, channel_axis=1, **params)


def gemm(op: Gemm, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The example job: int32-wrapping A @ B, arithmetic right shift (rounding down), clip to
    int8."""
    _check(a, (op.m, op.k), "a")
    _check(b, (op.k, op.n), "b")
    acc = wrap32(a.astype(np.int64) @ b.astype(np.int64))
    return np.clip(acc >> op.shift, -128, 127).astype(np.int8)


# the tensors each operator reads, by the names programs give them
OPERANDS = {
    Conv2d: ("input", "weight"),
    DepthwiseConv2d: ("input", "weight"),
    Dense: ("input", "weight"),
    Gemm: ("a", "b"),
    MaxPool2d: ("input",),
    GlobalAvgPool2d: ("input",),
    ScaledAdd: ("input", "residual"),
}
RESULT = {
    Conv2d: "output",
    DepthwiseConv2d: "output",
    Dense: "output",
    Gemm: "c",
    MaxPool2d: "output",
    GlobalAvgPool2d: "output",
    ScaledAdd: "output",
}


def scaled_add(op: ScaledAdd, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each side less its zero point, times its weight and multiplier, summed, shifted (floor,
    then rounding), plus the output's zero point, clipped: the accelerator's 32-bit steps."""
    _check(a, op.input_shape, "input")
    _check(b, op.input_shape, "residual")
    sides = [
        wrap32(wrap32((np.asarray(x, np.int64) - z) * w) * m)
        for x, z, w, m in (
            (a, op.zero_a, op.weight_a, op.multiplier_a),
            (b, op.zero_b, op.weight_b, op.multiplier_b),
        )
    ]
    y = wrap32(sides[0] + sides[1]) >> op.pre_shift
    if op.shift:
        y = wrap32(y + (1 << (op.shift - 1))) >> op.shift
    return np.clip(wrap32(y + op.zero_y), op.clip[0], op.clip[1]).astype(np.int8)


def global_avgpool2d(op: GlobalAvgPool2d, x: np.ndarray) -> np.ndarray:
    """The requantized sum over each plane, in the accelerator's 32-bit wrapping steps."""
    _check(x, op.input_shape, "input")
    total = wrap32(np.asarray(x, np.int64).sum(axis=(2, 3), keepdims=True))
    if op.input_zero:
        total = wrap32(total - op.h * op.w * op.input_zero)
    if op.on_unit:
        y = requantize(total, scale_fields(op.scale), op.output_zero, *INT8_RANGE)
        return y.astype(np.int8)
    y = wrap32(wrap32(total * op.weight) * op.multiplier)
    if op.pre_shift:
        y = y >> op.pre_shift
    if op.shift:
        y = wrap32(y + (1 << (op.shift - 1))) >> op.shift
    if op.output_zero:
        y = wrap32(y + op.output_zero)
    return np.clip(y, INT8_RANGE[0], INT8_RANGE[1]).astype(np.int8)


def maxpool2d(op: MaxPool2d, x: np.ndarray) -> np.ndarray:
    """The window maximum, padded positions holding `op.pad_value`."""
    _check(x, op.input_shape, "input")
    t, left, b, r = op.pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)), constant_values=op.pad_value)
    (kh, kw), (sh, sw) = op.kernel, op.stride
    taps = [
        xp[:, :, i : i + sh * (op.oh - 1) + 1 : sh, j : j + sw * (op.ow - 1) + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]
    return np.maximum.reduce(taps).astype(np.int8)


def outputs(comp: Computation, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The output tensors of `comp` (by name) from its logical input tensors: `input` and
    `weight` (`a` and `b` for gemm), and as the epilogue needs them `bias`, `multiplier` (per
    channel; a per-tensor one is `comp.multiplier`) and `residual`."""
    op, ep = comp.op, comp.epilogue
    missing = [n for n in OPERANDS[type(op)] if n not in tensors]
    if missing:
        raise ScheduleError(f"the reference of {op.describe()} needs tensor(s) {missing}")
    if isinstance(op, Gemm):
        return {"c": gemm(op, tensors["a"], tensors["b"])}
    if isinstance(op, MaxPool2d):
        return {"output": maxpool2d(op, tensors["input"])}
    if isinstance(op, GlobalAvgPool2d):
        return {"output": global_avgpool2d(op, tensors["input"])}
    if isinstance(op, ScaledAdd):
        return {"output": scaled_add(op, tensors["input"], tensors["residual"])}
    params = {
        "bias": tensors.get("bias"),
        "multiplier": comp.multiplier if comp.multiplier is not None else tensors.get("multiplier"),
        "residual": tensors.get("residual"),
        "acc_lo": tensors.get("acc_lo"),
        "acc_hi": tensors.get("acc_hi"),
        "multiplier2": tensors.get("multiplier2"),
    }
    for name, needed in (
        ("bias", ep.bias),
        ("multiplier", ep.multiplier != Multiplier.NONE),
        ("residual", ep.residual),
        ("acc_lo", ep.acc_bounds),
        ("acc_hi", ep.acc_bounds),
        ("multiplier2", ep.pre_shift > 0),
    ):
        if needed and params[name] is None:
            raise ScheduleError(f"the epilogue [{ep.describe()}] needs tensor {name!r}")
    x, w = tensors["input"], tensors["weight"]
    if isinstance(op, Conv2d) and comp.pool is not None:
        return {"output": maxpool2d(comp.pool, conv2d(op, ep, x, w, **params))}
    if isinstance(op, Conv2d):
        return {"output": conv2d(op, ep, x, w, **params)}
    if isinstance(op, DepthwiseConv2d):
        return {"output": epilogue(ep, depthwise_acc(op, x, w), **params)}
    _check(x, op.input_shape, "input")
    _check(w, op.weight_shape, "weight")
    return {"output": dense(ep, x, w, **params)}


def requant_params(scale, acc_bound: int, max_shift: int = 31) -> tuple[np.ndarray, int]:
    """Integer (m, s) approximating a float `scale` (scalar or per channel): m / 2**s ~ scale.

    s is the largest shift (<= 31) such that every m < 2**MULTIPLIER_BITS and |x * m| stays
    below 2**31 for |x| <= acc_bound, so the multiply never wraps. Against the exact real
    x * scale, the rounded result errs by at most 1/2 (rounding) + acc_bound / 2**(s+1) (the
    multiplier is within 1/2 of scale * 2**s); e.g. scale 1/256 with |x| <= 2**16 gives
    s = 22 and an error of at most 0.508 of an output step (tests check the bound).
    """
    scale = np.asarray(scale, np.float64)
    if np.any(scale <= 0) or not np.all(np.isfinite(scale)):
        raise ScheduleError(f"requantization scales must be positive and finite, got {scale}")
    top = float(scale.max())
    for s in range(max_shift, -1, -1):
        m = np.round(scale * (1 << s)).astype(np.int64)
        rounding = (1 << (s - 1)) if s else 0
        if m.max() < (1 << MULTIPLIER_BITS) and int(m.max()) * acc_bound + rounding < (1 << 31):
            if np.any(m == 0):
                raise ScheduleError(
                    f"scale {float(scale.min()):.3g} is too small next to {top:.3g} for one "
                    f"shift with a {MULTIPLIER_BITS}-bit multiplier"
                )
            return m, s
    raise ScheduleError(
        f"scale {top:.3g} with accumulators up to {acc_bound} cannot be requantized without "
        f"overflowing 32 bits"
    )


@dataclass(frozen=True)
class BoundedRequant:
    """An epilogue's requantization with accumulator bounds: multiplier(s), shifts, bounds."""

    multiplier: np.ndarray  # int64 (channels,)
    shift: int
    acc_lo: np.ndarray  # int32 (channels,)
    acc_hi: np.ndarray
    multiplier2: np.ndarray | None = None  # the two-stage multiply's second factor
    pre_shift: int = 0


def _shifted(acc, bias, req: BoundedRequant) -> np.ndarray:
    """v(acc): the value the epilogue shifts out, exactly (int64; every product fits)."""
    x = (acc + bias) * req.multiplier
    if req.pre_shift:
        x = (x >> req.pre_shift) * req.multiplier2
    return (x + (1 << (req.shift - 1))) >> req.shift


def _least_reaching(bias, req: BoundedRequant, target: int) -> np.ndarray:
    """Per channel, the least int32 accumulator with v(acc) >= target (v is monotone)."""
    lo = np.full(bias.shape, -(1 << 31), np.int64)  # v(lo) may already reach it
    hi = np.full(bias.shape, (1 << 31) - 1, np.int64)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        reached = _shifted(mid, bias, req) >= target
        hi, lo = np.where(reached, mid, hi), np.where(reached, lo, mid + 1)
    return lo


def _two_factors(target: np.ndarray, top: np.ndarray, tries: int = 1024):
    """Per channel, m1 <= top and m2 with m1 * m2 closest to `target`: for each m2 from the
    least that lets m1 stay under `top` up to twice that (so m2, which scales the first shift's
    rounding error, stays near its least value), m1 = round(target / m2); the best of them
    errs by at most m2 / 2."""
    least = np.maximum(np.ceil(target / top), 1)
    m2 = least[None, :] + np.arange(tries)[:, None]
    m2 = np.minimum(m2, 2 * least[None, :])
    m1 = np.clip(np.round(target[None, :] / m2), 1, top[None, :])
    best = np.argmin(np.abs(m1 * m2 - target[None, :]), axis=0)
    cols = np.arange(target.size)
    return m1[best, cols].astype(np.int64), m2[best, cols].astype(np.int64)


def requant_bounds(
    scale, bias, clip: tuple[int, int] = INT8_RANGE, residual: bool = False, pre_shift: int = 0
) -> BoundedRequant | None:
    """The requantization of an epilogue with `acc_bounds`, or None where a scale is 1 or more
    (v would step by more than one, so no accumulator bound can stand for the clip;
    `requant_params` serves those).

    With v(acc) the value the epilogue shifts out, the bounds are the accumulators where v
    reaches the ends of `clip`, so v(bounded acc) == clip(v(acc)); with a residual (added after
    the shift, then clipped) the ends widen to [lo - 127, hi + 128], beyond which the clip
    decides alone. Every product then stays within 32 bits for every input, which lets the
    shift be 24 (23 with a residual): m carries about 24 + log2(scale) bits, where a bound from
    the weights leaves 8 to 15. With `pre_shift` p (two-stage, about 10), x * m1 >> p * m2
    approximates scale * 2**(p + shift) with m1 as large as the bounds allow and m2 near 2**p:
    the error against the real product falls from ~2**-8 of an output step to ~2**-14.
    """
    scale = np.asarray(scale, np.float64).reshape(-1)
    bias = np.broadcast_to(np.asarray(bias, np.int64), scale.shape)
    if np.any(scale <= 0) or not np.all(np.isfinite(scale)):
        raise ScheduleError(f"requantization scales must be positive and finite, got {scale}")
    if scale.max() >= 1 - 2.0**-12:
        return None
    lo, hi = (clip[0] - 127, clip[1] + 128) if residual else clip
    s = 23 if residual else 24
    reach = (max(-lo, hi + 1) + 2) / scale + np.abs(bias)  # |acc + bias| within the bounds
    for _ in range(8):
        if pre_shift:
            # m1 as large as the bounds allow, but not so large that m2 falls below 2**p (a
            # narrow clip allows a large m1; a small m2 would be a coarse second factor)
            top = np.minimum(np.floor((2**31 - 1) / reach), np.maximum(np.floor(scale * 2.0**s), 1))
            m, m2 = _two_factors(scale * 2.0 ** (s + pre_shift), top.astype(np.int64))
        else:
            m, m2 = np.round(scale * (1 << s)).astype(np.int64), None
        if m.min() == 0:
            raise ScheduleError(f"scale {float(scale.min()):.3g} rounds to a zero multiplier")
        req = BoundedRequant(m, s, m, m, m2, pre_shift)
        acc_hi = _least_reaching(bias, req, hi)
        acc_lo = np.maximum(_least_reaching(bias, req, lo + 1) - 1, -(1 << 31))
        # one stage: v's range keeps (acc + bias) * m + 2**(s-1) within 32 bits (the ALU's
        # wrapping sum is exact); two: the first product is shifted, so it must fit itself
        widest = np.maximum(np.abs(acc_lo + bias), np.abs(acc_hi + bias))
        if not pre_shift or np.all(widest * m < 1 << 31):
            return BoundedRequant(
                m, s, acc_lo.astype(np.int32), acc_hi.astype(np.int32), m2, pre_shift
            )
        reach = reach * 1.01
    raise ScheduleError(f"scales {scale} leave no accumulator bounds within 32 bits")


def _check(a: np.ndarray, shape, name: str) -> None:
    if tuple(a.shape) != tuple(shape):
        raise ScheduleError(f"{name} has shape {tuple(a.shape)}; expected {tuple(shape)}")
