"""The host operators of a compiled network (what runs between accelerator programs) as frozen
records, and their integer semantics in numpy: the reference every host kernel (numpy today,
llvmlite-generated later) must match bit for bit.

Requantization on the host is the accelerator's: (x * m + 2**(s-1)) >> s, clipped to int8, in
64-bit integers (the host has no 32-bit ALU limit, so nothing wraps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Union

import numpy as np

from tilecraft.errors import ScheduleError
from tilecraft.ops.operators import INT8, Epilogue
from tilecraft.ops.reference import epilogue as apply_epilogue


def _finite_positive(owner: str, value: float) -> None:
    if not (isinstance(value, float) and np.isfinite(value) and value > 0):
        raise ScheduleError(f"{owner} scale must be a positive finite float, not {value!r}")


def _shift(owner: str, shift: int) -> None:
    if not 0 <= shift <= 62:
        raise ScheduleError(f"{owner} shift must be in 0..62, not {shift}")


@dataclass(frozen=True)
class Quantize:
    """float -> int8: round-half-even(x / scale), saturated (ONNX QuantizeLinear, zero point 0)."""

    scale: float
    kind: ClassVar[str] = "quantize"

    def __post_init__(self) -> None:
        _finite_positive("quantize", self.scale)


@dataclass(frozen=True)
class Dequantize:
    """int8 -> float32: x * scale."""

    scale: float
    kind: ClassVar[str] = "dequantize"

    def __post_init__(self) -> None:
        _finite_positive("dequantize", self.scale)


@dataclass(frozen=True)
class MaxPool:
    """int8 max pooling (same scale in and out); padding never wins (it is -inf)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    kind: ClassVar[str] = "maxpool"


@dataclass(frozen=True)
class GlobalAvgPool:
    """int8 (N, C, H, W) -> (N, C, 1, 1): requantize(sum over H, W; multiplier, shift)."""

    multiplier: int
    shift: int
    kind: ClassVar[str] = "globalavgpool"

    def __post_init__(self) -> None:
        _shift("globalavgpool", self.shift)


@dataclass(frozen=True)
class Add:
    """int8 a + b, each at its own scale, to the output's scale: y = clip(rint(a * ratio_a +
    b * ratio_b)) computed in float32 in that order, rounding half to even, with ratio = the
    side's scale over the output's (as float32). It is onnxruntime's QLinearAdd on x86 (MLAS),
    so a model quantized by onnxruntime adds exactly as there."""

    ratio_a: float
    ratio_b: float
    clip: tuple[int, int] = INT8
    kind: ClassVar[str] = "add"

    def __post_init__(self) -> None:
        for name in ("ratio_a", "ratio_b"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                np.isfinite(value) and value > 0
            ):
                raise ScheduleError(f"add {name} must be a positive finite float, not {value!r}")
        object.__setattr__(self, "ratio_a", float(np.float32(self.ratio_a)))
        object.__setattr__(self, "ratio_b", float(np.float32(self.ratio_b)))
        object.__setattr__(self, "clip", tuple(self.clip))


@dataclass(frozen=True)
class Flatten:
    """(N, ...) -> (N, prod(...)): a view."""

    kind: ClassVar[str] = "flatten"


@dataclass(frozen=True)
class DepthwiseConv:
    """int8 depthwise conv (groups = channels) with the accelerator's epilogue; constants
    `weight` (C, 1, KH, KW) int8, `bias` and `multiplier` (C,) int32."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    epilogue: Epilogue
    kind: ClassVar[str] = "depthwiseconv"


HostOp = Union[Quantize, Dequantize, MaxPool, GlobalAvgPool, Add, Flatten, DepthwiseConv]


def requantize(x: np.ndarray, m: int | np.ndarray, shift: int, clip=INT8) -> np.ndarray:
    x = np.asarray(x, np.int64) * np.asarray(m, np.int64)
    if shift:
        x = (x + (1 << (shift - 1))) >> shift
    return np.clip(x, clip[0], clip[1]).astype(np.int8)


def _windows(x: np.ndarray, kernel, stride, pads, fill: int) -> np.ndarray:
    t, left, b, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, tuple(kernel), axis=(2, 3))
    return win[:, :, :: stride[0], :: stride[1]]


def _maxpool(x: np.ndarray, op: MaxPool) -> np.ndarray:
    """The maximum over the window's taps, one strided view per tap (no window copies)."""
    t, left, b, r = op.pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)), constant_values=INT8[0])
    (kh, kw), (sh, sw) = op.kernel, op.stride
    oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    taps = [xp[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
            for i in range(kh) for j in range(kw)]  # fmt: skip
    return np.maximum.reduce(taps)


def run(op: HostOp, inputs: list[np.ndarray], constants: dict[str, np.ndarray]) -> np.ndarray:
    """The integer (or float, at the boundaries) result of one host operator."""
    if isinstance(op, Quantize):  # in float32, as ONNX (and onnxruntime) compute it
        q = np.rint(np.asarray(inputs[0], np.float32) / np.float32(op.scale))
        return np.clip(q, *INT8).astype(np.int8)
    if isinstance(op, Dequantize):
        return np.asarray(inputs[0], np.float32) * np.float32(op.scale)
    if isinstance(op, MaxPool):
        return _maxpool(np.asarray(inputs[0]), op)
    if isinstance(op, GlobalAvgPool):
        total = np.asarray(inputs[0], np.int64).sum(axis=(2, 3), keepdims=True)
        return requantize(total, op.multiplier, op.shift)
    if isinstance(op, Add):
        a, b = (np.asarray(x, np.float32) for x in inputs)
        y = a * np.float32(op.ratio_a) + b * np.float32(op.ratio_b)
        return np.clip(np.rint(y), op.clip[0], op.clip[1]).astype(np.int8)
    if isinstance(op, Flatten):
        return inputs[0].reshape(inputs[0].shape[0], -1)
    if isinstance(op, DepthwiseConv):
        win = _windows(np.asarray(inputs[0], np.int64), op.kernel, op.stride, op.pads, 0)
        w = np.asarray(constants["weight"], np.int64)[:, 0]  # (C, KH, KW)
        acc = np.einsum("nchwij,cij->nchw", win, w)
        vectors = {k: v for k, v in constants.items() if k != "weight"}
        return apply_epilogue(op.epilogue, acc, **vectors)
    raise ScheduleError(f"no semantics for host operator {op!r}")
