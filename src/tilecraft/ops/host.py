"""The host operators of a compiled network (what runs between accelerator programs) as frozen
records, and their integer semantics in numpy: the reference every host kernel (numpy's, and
the llvmlite-generated ones of `compiler.llvm`) must match bit for bit.

Requantization on the host is the accelerator's: (x * m + 2**(s-1)) >> s, clipped to int8, in
64-bit integers (the host has no 32-bit ALU limit, so nothing wraps).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar, Union

import numpy as np

from tilecraft.errors import ScheduleError
from tilecraft.ops.operators import INT8, Epilogue
from tilecraft.ops.reference import epilogue as apply_epilogue
from tilecraft.ops.requant import AddFields, float32_qlinear_add, requantize, scale_fields


def _finite_positive(owner: str, value: float) -> None:
    if not (isinstance(value, float) and np.isfinite(value) and value > 0):
        raise ScheduleError(f"{owner} scale must be a positive finite float, not {value!r}")


def _int8(what: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not INT8[0] <= value <= INT8[1]:
        raise ScheduleError(f"{what} must be an int8 (-128..127), not {value!r}")


def _shift(owner: str, shift: int) -> None:
    if not 0 <= shift <= 62:
        raise ScheduleError(f"{owner} shift must be in 0..62, not {shift}")


@dataclass(frozen=True)
class Quantize:
    """float -> int8: round-half-even(x / scale) + zero, saturated (ONNX QuantizeLinear; a
    uint8 model's zero point is stored less 128, as its values are)."""

    scale: float
    zero: int = 0
    kind: ClassVar[str] = "quantize"

    def __post_init__(self) -> None:
        _finite_positive("quantize", self.scale)
        _int8("quantize zero", self.zero)


@dataclass(frozen=True)
class Dequantize:
    """int8 -> float32: (x - zero) * scale."""

    scale: float
    zero: int = 0
    kind: ClassVar[str] = "dequantize"

    def __post_init__(self) -> None:
        _finite_positive("dequantize", self.scale)
        _int8("dequantize zero", self.zero)


@dataclass(frozen=True)
class MaxPool:
    """int8 max pooling (same scale in and out); padding never wins (it is -inf)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    kind: ClassVar[str] = "maxpool"


@dataclass(frozen=True)
class GlobalAvgPool:
    """int8 (N, C, H, W) -> (N, C, 1, 1): ((((sum over H, W less H*W*input_zero) * multiplier)
    >> pre_shift) + 2**(shift-1)) >> shift, plus output_zero, saturated (in 64 bits: nothing
    wraps); with a float32 `scale`, onnxruntime's requantization of that sum instead
    (`ops.requant`), as the accelerator's requantization unit computes it."""

    multiplier: int
    shift: int
    input_zero: int = 0
    output_zero: int = 0
    pre_shift: int = 0
    scale: float | None = None
    kind: ClassVar[str] = "globalavgpool"

    def __post_init__(self) -> None:
        _shift("globalavgpool", self.shift)
        _shift("globalavgpool pre_", self.pre_shift)
        if self.scale is not None:
            object.__setattr__(self, "scale", float(np.float32(self.scale)))
            scale_fields(self.scale)
        for name in ("input_zero", "output_zero"):
            _int8(f"globalavgpool {name}", getattr(self, name))


@dataclass(frozen=True)
class Add:
    """int8 a + b, each at its own scale, to the output's scale: y = clip(rint((a - zero_a) *
    ratio_a + (b - zero_b) * ratio_b) + zero_y) computed in float32 in that order, rounding
    half to even, with ratio = the side's scale over the output's (as float32). This is close
    to onnxruntime's QLinearAdd but not its x86 kernel, which rounds through two fused
    multiply-adds of the raw 8-bit values with the zero points folded into a constant
    (`ops.requant.float32_qlinear_add`, docs/ONNXRUNTIME_ARITHMETIC.md): the two differ by a
    step on near-ties, about one output in 200,000.

    With `fixed` it is that kernel (`ops.requant.float32_qlinear_add`, fixed = its constant
    F from the zero points): on the uint8 values onnxruntime reads (int8 + 128), whatever
    the model's activation type, as onnxruntime on x86 computes every QLinearAdd."""

    ratio_a: float
    ratio_b: float
    clip: tuple[int, int] = INT8
    zero_a: int = 0
    zero_b: int = 0
    zero_y: int = 0
    fixed: float | None = None
    kind: ClassVar[str] = "add"

    def __post_init__(self) -> None:
        for name in ("ratio_a", "ratio_b"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (np.isfinite(value) and value > 0)
            ):
                raise ScheduleError(f"add {name} must be a positive finite float, not {value!r}")
        object.__setattr__(self, "ratio_a", float(np.float32(self.ratio_a)))
        object.__setattr__(self, "ratio_b", float(np.float32(self.ratio_b)))
        object.__setattr__(self, "clip", tuple(self.clip))
        for name in ("zero_a", "zero_b", "zero_y"):
            _int8(f"add {name}", getattr(self, name))
        if self.fixed is not None:
            if isinstance(self.fixed, bool) or not np.isfinite(self.fixed):
                raise ScheduleError(f"add fixed must be a finite float, not {self.fixed!r}")
            object.__setattr__(self, "fixed", float(np.float32(self.fixed)))


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
    pad_value: int = 0  # what the padding holds: the input's zero point
    kind: ClassVar[str] = "depthwiseconv"


HostOp = Union[Quantize, Dequantize, MaxPool, GlobalAvgPool, Add, Flatten, DepthwiseConv]


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
    taps = [
        xp[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]
    return np.maximum.reduce(taps)


def add(op: Add, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`op` on int8 tensors `a` and `b` by its formula (the class's docstring), element by
    element: what `add_table` tabulates."""
    if op.fixed is not None:
        fields = AddFields(np.float32(op.ratio_a), np.float32(op.ratio_b), np.float32(op.fixed))
        a, b = (np.asarray(x, np.int64) + 128 for x in (a, b))
        lo, hi = op.clip
        return (float32_qlinear_add(a, b, fields, lo + 128, hi + 128) - 128).astype(np.int8)
    a, b = (np.asarray(x, np.int32) - z for x, z in zip((a, b), (op.zero_a, op.zero_b)))
    y = a.astype(np.float32) * np.float32(op.ratio_a) + b.astype(np.float32) * np.float32(
        op.ratio_b
    )
    return np.clip(np.rint(y) + op.zero_y, op.clip[0], op.clip[1]).astype(np.int8)


@lru_cache(maxsize=64)
def add_table(op: Add) -> np.ndarray:
    """`op`'s output for every pair of int8 inputs, 65,536 bytes: entry (a + 128) * 256 + (b +
    128) is `add(op, a, b)`. Its parameters are per tensor, so this table is the operator:
    computed once per Add (a few ms: the exact FMAs of onnxruntime's form are slow in numpy),
    looked up for every element after (about 20 times faster on ResNet-18's Adds)."""
    values = np.arange(-128, 128)
    table = add(op, values[:, None], values[None, :]).reshape(-1)
    table.flags.writeable = False
    return table


def run(op: HostOp, inputs: list[np.ndarray], constants: dict[str, np.ndarray]) -> np.ndarray:
    """The integer (or float, at the boundaries) result of one host operator."""
    if isinstance(op, Quantize):  # in float32, as ONNX (and onnxruntime) compute it
        q = np.rint(np.asarray(inputs[0], np.float32) / np.float32(op.scale)) + op.zero
        return np.clip(q, *INT8).astype(np.int8)
    if isinstance(op, Dequantize):
        x = np.asarray(inputs[0], np.int32) - op.zero if op.zero else inputs[0]
        return np.asarray(x, np.float32) * np.float32(op.scale)
    if isinstance(op, MaxPool):
        return _maxpool(np.asarray(inputs[0]), op)
    if isinstance(op, GlobalAvgPool):
        x = np.asarray(inputs[0], np.int64)
        total = x.sum(axis=(2, 3), keepdims=True) - x.shape[2] * x.shape[3] * op.input_zero
        if op.scale is not None:
            y = requantize(total, scale_fields(op.scale), op.output_zero, *INT8)
            return y.astype(np.int8)
        y = (total * op.multiplier) >> op.pre_shift
        if op.shift:
            y = (y + (1 << (op.shift - 1))) >> op.shift
        return np.clip(y + op.output_zero, *INT8).astype(np.int8)
    if isinstance(op, Add):  # a function of the two int8 values alone: its table of them
        a, b = ((np.asarray(x).astype(np.int8, copy=False).view(np.uint8) ^ 0x80) for x in inputs)
        return add_table(op).take((a.astype(np.uint16) << 8) | b)
    if isinstance(op, Flatten):
        return inputs[0].reshape(inputs[0].shape[0], -1)
    if isinstance(op, DepthwiseConv):
        win = _windows(np.asarray(inputs[0], np.int64), op.kernel, op.stride, op.pads, op.pad_value)
        w = np.asarray(constants["weight"], np.int64)[:, 0]  # (C, KH, KW)
        acc = np.einsum("nchwij,cij->nchw", win, w)
        vectors = {k: v for k, v in constants.items() if k != "weight"}
        return apply_epilogue(op.epilogue, acc, **vectors)
    raise ScheduleError(f"no semantics for host operator {op!r}")
