"""The numpy oracle: integer-exact conv2d, dense and epilogue. **The reference is the spec**:
the compiled programs must match it bit for bit.

Epilogue, in this order, on the int32 accumulator `acc` of output channel c:

    x = acc + bias[c]                        (if bias)
    x = x * m[c]                             (if a multiplier; m one value or one per channel)
    x = (x + 2**(s-1)) >> s                  (if s = shift > 0: round half up, arithmetic shift)
    x = x + residual                         (if residual: an int8 tensor shaped like the output)
    y = int8(clip(x, lo, hi))                (lo raised to 0 by ReLU)

Every step wraps at 32 bits (two's complement), exactly as the accelerator's ALU does.
`requant_params` turns float scales into (m, s) so that nothing wraps for realistic inputs.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.ops import Conv2d, Epilogue
from tilecraft.errors import ScheduleError

MULTIPLIER_BITS = 15  # m < 2**15 keeps |acc * m| < 2**31 for |acc| < 2**16


def wrap32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.int64).astype(np.int32).astype(np.int64)


def conv2d_acc(op: Conv2d, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The int32 accumulators (wrapping) of conv2d, as int64 values: (N, OC, OH, OW)."""
    _check(x, op.input_shape, "input")
    _check(w, op.weight_shape, "weight")
    (kh, kw), (sh, sw), (ph, pw) = op.kernel, op.stride, op.pad
    padded = np.zeros((op.n, op.ic, op.h + 2 * ph, op.w + 2 * pw), np.int64)
    padded[:, :, ph : ph + op.h, pw : pw + op.w] = x
    acc = np.zeros(op.output_shape, np.int64)
    w64 = w.astype(np.int64)
    for i in range(kh):
        for j in range(kw):
            tap = padded[:, :, i : i + sh * op.oh : sh, j : j + sw * op.ow : sw]
            acc += np.einsum("nchw,oc->nohw", tap, w64[:, :, i, j])
    return wrap32(acc)


def epilogue(
    ep: Epilogue,
    acc: np.ndarray,
    *,
    bias: np.ndarray | None = None,
    multiplier: np.ndarray | None = None,
    residual: np.ndarray | None = None,
    channel_axis: int = 1,
) -> np.ndarray:
    """int8 outputs from int32 accumulators, exactly as defined in the module docstring."""
    shape = [1] * acc.ndim
    shape[channel_axis] = acc.shape[channel_axis]
    x = wrap32(acc)
    if ep.bias:
        x = wrap32(x + np.asarray(bias, np.int64).reshape(shape))
    if ep.multiplier != "none":
        m = np.asarray(multiplier, np.int64)
        x = wrap32(x * (m.reshape(shape) if ep.multiplier == "channel" else m.reshape(())))
    if ep.shift:
        x = wrap32(x + (1 << (ep.shift - 1))) >> ep.shift
    if ep.residual:
        x = wrap32(x + np.asarray(residual, np.int64))
    return np.clip(x, ep.low, ep.high).astype(np.int8)


def conv2d(op: Conv2d, ep: Epilogue, x, w, **params) -> np.ndarray:
    return epilogue(ep, conv2d_acc(op, x, w), **params)


def dense(ep: Epilogue, x: np.ndarray, w: np.ndarray, **params) -> np.ndarray:
    """x (M, K) int8 @ w (K, N) int8 -> (M, N) int8 through the epilogue (channels = N)."""
    acc = wrap32(x.astype(np.int64) @ w.astype(np.int64))
    return epilogue(ep, acc, channel_axis=1, **params)


def requant_params(scale, acc_bound: int) -> tuple[np.ndarray, int]:
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
    for s in range(31, -1, -1):
        m = np.round(scale * (1 << s)).astype(np.int64)
        if m.max() < (1 << MULTIPLIER_BITS) and int(m.max()) * acc_bound < (1 << 31):
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


def _check(a: np.ndarray, shape, name: str) -> None:
    if tuple(a.shape) != tuple(shape):
        raise ScheduleError(f"{name} has shape {tuple(a.shape)}; expected {tuple(shape)}")
