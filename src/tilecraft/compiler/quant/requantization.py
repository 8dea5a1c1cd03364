"""The requantization each int8 layer gets, chosen from its float scales: a conv's or dense's
epilogue (`conv_requant`: the unit's float32 requantization, with or without its residual add,
or the ALU's integer multiplier and shifts), and the ALU forms of a global average pool's
(`gap_requant`) and an Add's (`add_requant`) scales. `quantize` asks them per layer."""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.frontend.ir import Node
from tilecraft.errors import ModelError
from tilecraft.hw.isa import IMM_MAX
from tilecraft.ops import Epilogue, Multiplier
from tilecraft.ops.operators import INT8
from tilecraft.ops.reference import requant_bounds, requant_params
from tilecraft.ops.requant import scale_fields

PRE_SHIFT = 10  # the two-stage multiply's first shift (requant_bounds)
REQUANT_ONNXRUNTIME = "onnxruntime"  # `quantize`'s exact: every rounding onnxruntime's


def conv_requant(
    node: Node,
    qw: np.ndarray,
    qb: np.ndarray,
    scale: np.ndarray,
    axis: int,
    clip: tuple[int, int],
    residual: bool,
    exact: bool,
    offset: int = 0,
    unit: bool = False,
    unit_residual: bool = False,
):
    """The epilogue's requantization and its per-channel vectors by parameter name. `exact`:
    accumulator bounds and a two-stage multiply (`requant_bounds`), within ~2**-14 of an
    output step of the real product, where every scale is below 1. `offset` (zero points) is
    added after the shift, so the bounds stand for the clip less it. Otherwise (or failing
    that) one multiplier bounded by the weights (`requant_params`) and the ALU's clip: within
    ~2**-8 to 2**-4 of a step, which calibrated quantization cannot tell apart (ResNet-18's
    output SQNR 27.2 dB either way) and which costs four fewer ALU passes per tile. With the
    requantization `unit` (a config with one) and no residual: onnxruntime's own float32
    requantization, every rounding of it, on the unit (no ALU pass at all); with a residual
    too where the unit adds one (`unit_residual`: a config with `requant_residual`), the
    residual added after its rounding."""
    if unit and (unit_residual or not residual):
        try:
            scale_fields(scale.astype(np.float32))
        except Exception as e:
            raise ModelError(f"node {node.name}: cannot requantize on the unit: {e}") from None
        ep = Epilogue(
            bias=True, multiplier=Multiplier.FLOAT32, clip=clip, offset=offset, residual=residual
        )
        return ep, {"multiplier": scale.astype(np.float32)}
    found = None
    if exact:
        try:
            shifted = (clip[0] - offset, clip[1] - offset)
            found = requant_bounds(scale, qb, shifted, residual, PRE_SHIFT)
        except Exception as e:
            raise ModelError(f"node {node.name}: cannot requantize: {e}") from None
    if found is not None:
        ep = Epilogue(
            bias=True,
            multiplier=Multiplier.CHANNEL,
            shift=found.shift,
            residual=residual,
            clip=clip if residual else INT8,
            acc_bounds=True,
            pre_shift=found.pre_shift,
            offset=offset,
        )
        vectors = {
            "multiplier": found.multiplier.astype(np.int32),
            "acc_lo": found.acc_lo,
            "acc_hi": found.acc_hi,
        }
        if found.pre_shift:
            vectors["multiplier2"] = found.multiplier2.astype(np.int32)
        return ep, vectors
    other = tuple(i for i in range(qw.ndim) if i != axis)
    # |x - zero point| <= 255 with zero points, else 128
    reach = 256 if offset else 128
    bound = int((np.abs(qw.astype(np.int64)).sum(axis=other) * reach + np.abs(qb)).max()) or 1
    try:
        m, s = requant_params(scale, bound)
    except Exception as e:
        raise ModelError(f"node {node.name}: cannot requantize: {e}") from None
    ep = Epilogue(
        bias=True,
        multiplier=Multiplier.CHANNEL,
        shift=int(s),
        residual=residual,
        clip=clip,
        offset=offset,
    )
    return ep, {"multiplier": m.astype(np.int32)}


def gap_requant(scale: float, count: int, zero: int) -> tuple[int, int, int] | None:
    """(weight, multiplier, shift) with weight * multiplier / 2**shift closest to `scale`: the
    GEMM's diagonal weight (1..127) times a 15-bit multiplier, their product on a sum of
    `count` int8 values less `count` zero points within 32 bits, and `count * zero * weight`
    within the ALU immediate; None if no shift of 30 or less serves."""
    reach = count * (256 if zero else 128)
    best = None
    for weight in range(1, 128):
        if count * abs(zero) * weight > IMM_MAX:
            break
        for s in range(30, -1, -1):
            m = round(scale * 2**s / weight)
            if 0 < m <= IMM_MAX and reach * weight * m < 1 << 31:
                error = abs(weight * m / 2**s - scale)
                if best is None or error < best[0]:
                    best = (error, weight, m, s)
                break
    return None if best is None else best[1:]


def add_requant(ratio_a: float, ratio_b: float) -> tuple[int, int, int, int, int] | None:
    """(weight_a, multiplier_a, weight_b, multiplier_b, shift): weight x multiplier / 2**shift
    closest to each ratio (a 1..127 GEMM diagonal times a 15-bit ALU immediate), with both
    products on an int8 difference (|x| <= 255) and their sum within 32 bits; the shift that
    makes the larger of the two errors (in output steps) least. None if no shift serves."""
    weights = np.arange(1, 128)
    best = None
    for s in range(0, 41):
        pairs = []
        for ratio in (ratio_a, ratio_b):
            m = np.rint(ratio * 2.0**s / weights)
            ok = (m >= 1) & (m <= IMM_MAX)
            if not ok.any():
                break
            err = np.where(ok, np.abs(weights * m - ratio * 2.0**s), np.inf)
            k = int(np.argmin(err))
            pairs.append((int(weights[k]), int(m[k]), float(err[k]) * 255 / 2.0**s))
        if len(pairs) < 2:
            continue
        (wa, ma, ea), (wb, mb, eb) = pairs
        if 255 * (wa * ma + wb * mb) + (1 << 14) >= 1 << 31:
            break
        if best is None or max(ea, eb) < best[0]:
            best = (max(ea, eb), wa, ma, wb, mb, s)
    return None if best is None else best[1:]
