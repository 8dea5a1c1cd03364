"""An operator's parameters (weights, bias, multiplier), checked before anything is built: each
given array becomes a constant of the program, each one left out a named program input."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.compiler.mapping.blocks import MappedConv
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import isa_for
from tilecraft.ops import Conv2d, Dense, Epilogue, Multiplier
from tilecraft.ops.requant import scale_fields

# Ranges random test inputs take for parameters left as inputs (runtime.layout.random_inputs):
# realistic quantized values, for which nothing wraps in 32 bits.
BIAS_RANGE = (-(1 << 16), 1 << 16)
MULTIPLIER_RANGE = (1, 1 << 12)
ACC_LO_RANGE = (-(1 << 20), 0)  # random bounds cut some accumulators at each end
ACC_HI_RANGE = (0, 1 << 20)


@dataclass(frozen=True)
class ConvParams:
    weight: np.ndarray | None  # logical (OIHW, or (K, N) for dense) int8
    bias: np.ndarray | None  # (channels,) int32
    multiplier: np.ndarray | None  # (channels,) int32, per channel (float32 scales: FLOAT32)
    tensor_multiplier: int | None  # the per-tensor multiplier, compiled in as an immediate
    acc_lo: np.ndarray | None = None  # (channels,) int32 accumulator bounds
    acc_hi: np.ndarray | None = None
    multiplier2: np.ndarray | None = None  # (channels,) int32: the two-stage multiply's


def check_params(
    cfg: HwConfig,
    low: MappedConv,
    weight=None,
    bias=None,
    multiplier=None,
    acc_lo=None,
    acc_hi=None,
    multiplier2=None,
):
    """The parameters of `low` as the epilogue needs them, or a `ScheduleError` naming the tensor,
    its shape or values, and what would be valid."""
    ep, src = low.epilogue, low.source
    tensor = None
    if ep.multiplier == Multiplier.TENSOR:
        imm = isa_for(cfg).field("imm")
        if (
            multiplier is None
            or np.ndim(multiplier) != 0
            or not np.issubdtype(np.asarray(multiplier).dtype, np.integer)
            or not imm.lo <= int(multiplier) <= imm.hi
        ):
            raise ScheduleError(
                f"a per-tensor multiplier must be given at compile time as an int in "
                f"[{imm.lo}, {imm.hi}] (it is an immediate), not {multiplier!r}"
            )
        tensor, multiplier = int(multiplier), None
    elif ep.multiplier == Multiplier.NONE and multiplier is not None:
        raise ScheduleError("a multiplier was given but the epilogue has none")
    elif ep.on_unit:
        if multiplier is None or (ep.bias and bias is None):
            raise ScheduleError(
                "a float32 requantization's scales (and bias) must be given at compile time: "
                "the requantization unit's parameter rows are built from them"
            )
        scales = _scales(multiplier, (src.channels,))
    if bias is not None and not ep.bias:
        raise ScheduleError("a bias was given but the epilogue adds none")
    if (acc_lo is not None or acc_hi is not None) and not ep.acc_bounds:
        raise ScheduleError("accumulator bounds were given but the epilogue has no acc_bounds")
    if multiplier2 is not None and not ep.pre_shift:
        raise ScheduleError("a second multiplier was given but the epilogue has no pre_shift")
    channels = (src.channels,)
    return ConvParams(
        weight=_tensor("weight", weight, src.weight_shape, np.int8),
        bias=_tensor("bias", bias, channels, np.int32),
        multiplier=scales if ep.on_unit else _tensor("multiplier", multiplier, channels, np.int32),
        tensor_multiplier=tensor,
        acc_lo=_tensor("acc_lo", acc_lo, channels, np.int32),
        acc_hi=_tensor("acc_hi", acc_hi, channels, np.int32),
        multiplier2=_tensor("multiplier2", multiplier2, channels, np.int32),
    )


def _scales(value, shape: tuple[int, ...]) -> np.ndarray:
    """A float32 requantization's scales: float32, one per channel, each one the requantization
    unit holds (`ops.requant.scale_fields` names one it cannot)."""
    arr = np.asarray(value)
    if arr.shape != tuple(shape) or arr.dtype.kind != "f":
        raise ScheduleError(
            f"float32 requantization scales must be floats of shape {tuple(shape)}, not "
            f"{arr.dtype} of shape {arr.shape}"
        )
    out = arr.astype(np.float32)
    scale_fields(out)
    out.flags.writeable = False
    return out


def _tensor(name: str, value, shape: tuple[int, ...], dtype) -> np.ndarray | None:
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.shape != tuple(shape):
        raise ScheduleError(f"{name} has shape {arr.shape}; expected {tuple(shape)}")
    info = np.iinfo(dtype)
    if arr.dtype.kind not in "iub":
        raise ScheduleError(f"{name} must hold integers, not {arr.dtype}")
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise ScheduleError(
            f"{name} values must fit {np.dtype(dtype).name} ({info.min}..{info.max}); "
            f"found {arr.min()}..{arr.max()}"
        )
    out = arr.astype(dtype)
    out.flags.writeable = False
    return out


def random_scales(rng: np.random.Generator, channels: int) -> np.ndarray:
    """float32 requantization scales of realistic size (2**-18 to 2**-9)."""
    scale = rng.uniform(1, 2, channels) * 2.0 ** rng.integers(-18, -9, channels)
    return scale.astype(np.float32)


def random_params(
    op: Conv2d | Dense, ep: Epilogue, rng: np.random.Generator, *, arrays: bool = True
) -> dict:
    """Random parameters for `op` (keyword arguments of conv2d/dense): int8 weights, a bias
    and per-channel multipliers in their realistic ranges, and a per-tensor multiplier (always:
    it is an immediate). With `arrays=False` only the per-tensor multiplier, so the rest become
    program inputs."""
    out: dict = {}
    if arrays:
        out["weight"] = rng.integers(-128, 128, op.weight_shape, dtype=np.int8)
        if ep.bias:
            out["bias"] = rng.integers(*BIAS_RANGE, op.channels, dtype=np.int32)
        if ep.multiplier == Multiplier.CHANNEL:
            out["multiplier"] = rng.integers(*MULTIPLIER_RANGE, op.channels, dtype=np.int32)
        if ep.on_unit:  # scales that bring the accumulators into the output's range
            out["multiplier"] = random_scales(rng, op.channels)
        if ep.pre_shift:
            out["multiplier2"] = rng.integers(*MULTIPLIER_RANGE, op.channels, dtype=np.int32)
        if ep.acc_bounds:
            out["acc_lo"] = rng.integers(*ACC_LO_RANGE, op.channels, dtype=np.int32)
            out["acc_hi"] = rng.integers(*ACC_HI_RANGE, op.channels, dtype=np.int32)
    if ep.multiplier == Multiplier.TENSOR:
        out["multiplier"] = int(rng.integers(*MULTIPLIER_RANGE))
    return out
