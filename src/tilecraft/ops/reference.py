"""The reference: the integer semantics of every operator, in numpy. **The reference is the
spec**: compiled programs must match it bit for bit, on every device. `outputs` computes what a
`Computation` gives for its tensors; conv2d, dense, gemm and epilogue are its parts.

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

from tilecraft.errors import ScheduleError
from tilecraft.ops.operators import INT8 as INT8_RANGE
from tilecraft.ops.operators import (
    Computation,
    Conv2d,
    Dense,
    Epilogue,
    Gemm,
    GlobalAvgPool2d,
    MaxPool2d,
    Multiplier,
)

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
    if ep.multiplier != Multiplier.NONE:
        m = np.asarray(multiplier, np.int64)
        x = wrap32(x * (m.reshape(shape) if ep.multiplier == Multiplier.CHANNEL else m.reshape(())))
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


def gemm(op: Gemm, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The example job: int32-wrapping A @ B, arithmetic right shift (rounding down), clip to
    int8."""
    _check(a, (op.m, op.k), "a")
    _check(b, (op.k, op.n), "b")
    acc = wrap32(a.astype(np.int64) @ b.astype(np.int64))
    return np.clip(acc >> op.shift, -128, 127).astype(np.int8)


# the tensors each operator reads, by the names programs give them
OPERANDS = {Conv2d: ("input", "weight"), Dense: ("input", "weight"), Gemm: ("a", "b"),
            MaxPool2d: ("input",), GlobalAvgPool2d: ("input",)}  # fmt: skip
RESULT = {Conv2d: "output", Dense: "output", Gemm: "c", MaxPool2d: "output",
          GlobalAvgPool2d: "output"}  # fmt: skip


def global_avgpool2d(op: GlobalAvgPool2d, x: np.ndarray) -> np.ndarray:
    """The requantized sum over each plane, in the accelerator's 32-bit wrapping steps."""
    _check(x, op.input_shape, "input")
    total = wrap32(np.asarray(x, np.int64).sum(axis=(2, 3), keepdims=True))
    y = wrap32(total * op.multiplier)
    if op.shift:
        y = wrap32(y + (1 << (op.shift - 1))) >> op.shift
    return np.clip(y, INT8_RANGE[0], INT8_RANGE[1]).astype(np.int8)


def maxpool2d(op: MaxPool2d, x: np.ndarray) -> np.ndarray:
    """The window maximum, padded positions holding `op.pad_value`."""
    _check(x, op.input_shape, "input")
    t, left, b, r = op.pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)), constant_values=op.pad_value)
    (kh, kw), (sh, sw) = op.kernel, op.stride
    taps = [xp[:, :, i : i + sh * (op.oh - 1) + 1 : sh, j : j + sw * (op.ow - 1) + 1 : sw]
            for i in range(kh) for j in range(kw)]  # fmt: skip
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
    params = {
        "bias": tensors.get("bias"),
        "multiplier": comp.multiplier if comp.multiplier is not None else tensors.get("multiplier"),
        "residual": tensors.get("residual"),
    }
    for name, needed in (
        ("bias", ep.bias),
        ("multiplier", ep.multiplier != Multiplier.NONE),
        ("residual", ep.residual),
    ):
        if needed and params[name] is None:
            raise ScheduleError(f"the epilogue [{ep.describe()}] needs tensor {name!r}")
    x, w = tensors["input"], tensors["weight"]
    if isinstance(op, Conv2d):
        return {"output": conv2d(op, ep, x, w, **params)}
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


def _check(a: np.ndarray, shape, name: str) -> None:
    if tuple(a.shape) != tuple(shape):
        raise ScheduleError(f"{name} has shape {tuple(a.shape)}; expected {tuple(shape)}")
