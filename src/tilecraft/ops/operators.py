"""The operators, as frozen descriptions shared by the compiler (what to build), the artifact (what
a program computes) and the reference (what the answer is): a convolution's or a matrix
product's shape, and what it computes (`Computation`); the integer epilogue applied to its
accumulators is `ops.epilogue`'s (and imported from here too)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from tilecraft.errors import ScheduleError
from tilecraft.hw.isa import IMM_MAX  # the ALU immediate an operator's constants ride in
from tilecraft.ops.epilogue import INT8, Epilogue, Multiplier  # noqa: F401 (re-exported)
from tilecraft.ops.requant import scale_fields


def _pair(v, name: str) -> tuple[int, int]:
    try:
        pair = (v, v) if isinstance(v, (int, float, np.generic)) else tuple(v)
    except TypeError:  # None, an object
        pair = ()
    if len(pair) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in pair):
        raise ScheduleError(f"{name} must be an int or a pair of ints, not {v!r}{_numpy(v)}")
    return pair


def _positive(owner: str, **values) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ScheduleError(
                f"{owner} {name} must be a positive int, not {value!r}{_numpy(value)}"
            )


def _numpy(value) -> str:
    """A hint where a numpy scalar stood for a Python int."""
    return " (a numpy scalar: give int(...))" if isinstance(value, np.generic) else ""


def _int8_pad(owner: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not -128 <= value <= 127:
        what = owner if owner.endswith(":") else f"{owner} pad_value"
        raise ScheduleError(f"{what.rstrip(':')} must be an int8 (-128..127), not {value!r}")


def _pad_text(op) -> str:
    return f" pad value {op.pad_value}" if op.pad_value and any(op.pad) else ""


@dataclass(frozen=True)
class Conv2d:
    """conv2d of an (N, IC, H, W) int8 input with (OC, IC, KH, KW) int8 weights, groups = 1."""

    n: int
    ic: int
    h: int
    w: int
    oc: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int] = (0, 0)
    pad_value: int = 0  # what the padding holds: the input's zero point (the real value 0)
    kind: ClassVar[str] = "conv2d"

    def __post_init__(self) -> None:
        for name in ("kernel", "stride", "pad"):
            object.__setattr__(self, name, _pair(getattr(self, name), name))
        _positive("conv2d", n=self.n, ic=self.ic, h=self.h, w=self.w, oc=self.oc)
        _int8_pad(self.kind, self.pad_value)
        for name, lo in (("kernel", 1), ("stride", 1), ("pad", 0)):
            if min(getattr(self, name)) < lo:
                raise ScheduleError(f"conv2d {name} {getattr(self, name)} must be >= {lo}")
        if self.oh < 1 or self.ow < 1:
            raise ScheduleError(
                f"conv2d kernel {self.kernel} is larger than the padded input "
                f"{self.h + 2 * self.pad[0]}x{self.w + 2 * self.pad[1]}"
            )

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.pad[0] - self.kernel[0]) // self.stride[0] + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.pad[1] - self.kernel[1]) // self.stride[1] + 1

    @property
    def macs(self) -> int:
        return self.n * self.oc * self.oh * self.ow * self.ic * self.kernel[0] * self.kernel[1]

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.ic, self.h, self.w)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.oc, self.ic, *self.kernel)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.oc, self.oh, self.ow)

    @property
    def channels(self) -> int:
        """Output channels: the length of per-channel epilogue vectors."""
        return self.oc

    def describe(self) -> str:
        k, s, p = self.kernel, self.stride, self.pad
        return (
            f"conv2d N={self.n} IC={self.ic} H={self.h} W={self.w} OC={self.oc} "
            f"K={k[0]}x{k[1]} S={s[0]}x{s[1]} P={p[0]}x{p[1]}{_pad_text(self)}"
        )


@dataclass(frozen=True)
class DepthwiseConv2d:
    """Depthwise conv2d: each of C channels of an (N, C, H, W) int8 input convolved with its own
    (KH, KW) kernel; weights (C, 1, KH, KW). On the GEMM core each channel block is multiplied
    by a diagonal weight block: 1 / BLOCK_OUT of the array's products are the layer's."""

    n: int
    c: int
    h: int
    w: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pad: tuple[int, int] = (0, 0)
    pad_value: int = 0  # what the padding holds: the input's zero point (the real value 0)
    kind: ClassVar[str] = "depthwise_conv2d"

    def __post_init__(self) -> None:
        for name in ("kernel", "stride", "pad"):
            object.__setattr__(self, name, _pair(getattr(self, name), name))
        _ = self.dense  # the same checks as the convolution it is read as

    @property
    def dense(self) -> Conv2d:
        """The (block-diagonal) dense convolution with the same input and output."""
        return Conv2d(
            self.n,
            self.c,
            self.h,
            self.w,
            self.c,
            self.kernel,
            self.stride,
            self.pad,
            self.pad_value,
        )

    @property
    def oh(self) -> int:
        return self.dense.oh

    @property
    def ow(self) -> int:
        return self.dense.ow

    @property
    def ic(self) -> int:
        return self.c

    @property
    def oc(self) -> int:
        return self.c

    @property
    def macs(self) -> int:
        return self.n * self.c * self.oh * self.ow * self.kernel[0] * self.kernel[1]

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.h, self.w)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.c, 1, *self.kernel)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.oh, self.ow)

    @property
    def channels(self) -> int:
        return self.c

    def describe(self) -> str:
        k, s, p = self.kernel, self.stride, self.pad
        return (
            f"depthwise conv2d N={self.n} C={self.c} H={self.h} W={self.w} "
            f"K={k[0]}x{k[1]} S={s[0]}x{s[1]} P={p[0]}x{p[1]}{_pad_text(self)}"
        )


@dataclass(frozen=True)
class Dense:
    """x (M, K) int8 @ weight (K, N) int8 -> (M, N); the epilogue's channels are N."""

    m: int
    k: int
    n: int
    kind: ClassVar[str] = "dense"

    def __post_init__(self) -> None:
        _positive("dense", m=self.m, k=self.k, n=self.n)

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n

    @property
    def input_shape(self) -> tuple[int, int]:
        return (self.m, self.k)

    @property
    def weight_shape(self) -> tuple[int, int]:
        return (self.k, self.n)

    @property
    def output_shape(self) -> tuple[int, int]:
        return (self.m, self.n)

    @property
    def channels(self) -> int:
        return self.n

    def describe(self) -> str:
        return f"dense M={self.m} K={self.k} N={self.n}"


@dataclass(frozen=True)
class Gemm:
    """The example job: C = int8(clip((A @ B) >> shift)), A (M, K) and B (K, N) int8, the shift
    arithmetic (rounding down), no other epilogue."""

    m: int
    k: int
    n: int
    shift: int = 8
    kind: ClassVar[str] = "gemm"

    def __post_init__(self) -> None:
        _positive("gemm", m=self.m, k=self.k, n=self.n)
        if isinstance(self.shift, bool) or not isinstance(self.shift, int):
            raise ScheduleError(f"gemm shift must be an int, not {self.shift!r}")
        if not 0 <= self.shift <= 31:
            raise ScheduleError(f"gemm shift must be in 0..31, not {self.shift}")

    @property
    def macs(self) -> int:
        return self.m * self.k * self.n

    def describe(self) -> str:
        return f"gemm M={self.m} K={self.k} N={self.n} >>{self.shift}"


class _Planes:
    """What pooling operators share: an (N, C, H, W) int8 input, no multiply-accumulates."""

    n: int
    c: int
    h: int
    w: int

    @property
    def macs(self) -> int:
        return 0

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.h, self.w)


@dataclass(frozen=True)
class MaxPool2d(_Planes):
    """int8 max pooling of an (N, C, H, W) input, same scale in and out; `pads` are (top, left,
    bottom, right) and padded positions hold `pad_value` (-128 is ONNX's -inf padding: it
    never wins over an int8 value)."""

    n: int
    c: int
    h: int
    w: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    pad_value: int = 0
    kind: ClassVar[str] = "maxpool2d"

    def __post_init__(self) -> None:
        for name in ("kernel", "stride"):
            object.__setattr__(self, name, _pair(getattr(self, name), name))
        pads = tuple(self.pads)
        if len(pads) != 4 or not all(isinstance(p, int) and p >= 0 for p in pads):
            raise ScheduleError(f"maxpool pads {self.pads!r} must be four ints >= 0")
        object.__setattr__(self, "pads", pads)
        _positive("maxpool", n=self.n, c=self.c, h=self.h, w=self.w)
        if min(self.kernel) < 1 or min(self.stride) < 1:
            raise ScheduleError(
                f"maxpool kernel {self.kernel} and stride {self.stride} must be >= 1"
            )
        if not INT8[0] <= self.pad_value <= INT8[1]:
            raise ScheduleError(f"maxpool pad_value {self.pad_value} must be an int8")
        if self.oh < 1 or self.ow < 1:
            raise ScheduleError(f"maxpool kernel {self.kernel} is larger than the padded input")

    @property
    def oh(self) -> int:
        return (self.h + self.pads[0] + self.pads[2] - self.kernel[0]) // self.stride[0] + 1

    @property
    def ow(self) -> int:
        return (self.w + self.pads[1] + self.pads[3] - self.kernel[1]) // self.stride[1] + 1

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.oh, self.ow)

    def describe(self) -> str:
        k, s = self.kernel, self.stride
        return (
            f"maxpool N={self.n} C={self.c} H={self.h} W={self.w} K={k[0]}x{k[1]} "
            f"S={s[0]}x{s[1]} pads={list(self.pads)} (pad value {self.pad_value})"
        )


@dataclass(frozen=True)
class GlobalAvgPool2d(_Planes):
    """int8 (N, C, H, W) -> (N, C, 1, 1): the sum over H x W requantized, ((((sum - H*W *
    input_zero) * weight * multiplier) >> pre_shift) + 2**(shift-1)) >> shift, plus
    output_zero, saturated to int8: the average at the output's scale. The zero points are 0 for
    symmetric tensors; `weight` (the GEMM's diagonal that sums the rows, 1..127) and the 15-bit
    `multiplier` make a multiplier of up to 22 bits, and `pre_shift`, a floor shift, lets the
    total shift pass 15 while the rounding constant fits an ALU immediate.

    With a float32 `scale` the requantization is onnxruntime's QLinearGlobalAveragePool
    instead (`ops.requant`: the sum less H*W*input_zero, times the scale in float32, rounded
    to even, plus output_zero, saturated), on the requantization unit; `multiplier`, `weight`
    1 and `shift`, `pre_shift` 0 then, unused."""

    n: int
    c: int
    h: int
    w: int
    multiplier: int
    shift: int
    input_zero: int = 0
    output_zero: int = 0
    pre_shift: int = 0
    weight: int = 1
    scale: float | None = None  # float32: onnxruntime's requantization, on the unit
    kind: ClassVar[str] = "globalavgpool2d"

    def __post_init__(self) -> None:
        _positive(
            "global average pool",
            n=self.n,
            c=self.c,
            h=self.h,
            w=self.w,
            multiplier=self.multiplier,
        )
        for name in ("shift", "pre_shift"):
            if not 0 <= getattr(self, name) <= 31:
                raise ScheduleError(
                    f"global average pool {name} must be in 0..31, not {getattr(self, name)}"
                )
        for name in ("input_zero", "output_zero"):
            _int8_pad(f"global average pool {name}:", getattr(self, name))
        if (
            isinstance(self.weight, bool)
            or not isinstance(self.weight, int)
            or not 1 <= self.weight <= 127
        ):
            raise ScheduleError(
                f"global average pool weight must be in 1..127, not {self.weight!r}"
            )
        if self.scale is not None:
            fixed = (self.multiplier, self.weight, self.shift, self.pre_shift)
            if fixed != (1, 1, 0, 0):
                raise ScheduleError(
                    f"a global average pool with a float32 scale takes multiplier 1, weight 1, "
                    f"shift 0 and pre_shift 0, not {fixed}"
                )
            object.__setattr__(self, "scale", float(np.float32(self.scale)))
            scale_fields(self.scale)

    @property
    def on_unit(self) -> bool:
        """Whether the requantization unit requantizes it (a float32 `scale`)."""
        return self.scale is not None

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, 1, 1)

    def describe(self) -> str:
        zeros = (
            f" zero points {self.input_zero} -> {self.output_zero}"
            if self.input_zero or self.output_zero
            else ""
        )
        m, s = self.weight * self.multiplier, self.pre_shift + self.shift
        how = f"x float32 {self.scale:.6g}" if self.on_unit else f"x{m} >>{s}"
        return f"global average pool N={self.n} C={self.c} H={self.h} W={self.w} {how}{zeros}"


@dataclass(frozen=True)
class ScaledAdd(_Planes):
    """int8 a + b (both (N, C, H, W)), each at its own scale and zero point, to the output's:
    y = clip((((a - zero_a) * weight_a * multiplier_a + (b - zero_b) * weight_b * multiplier_b)
    >> pre_shift + 2**(shift-1)) >> shift + zero_y), in 32-bit wrapping steps. A weight (1..127)
    is the GEMM diagonal that widens its rows, a multiplier (15 bits) an ALU immediate: each
    side's ratio to the output's scale carries up to 22 bits: onnxruntime's QLinearAdd (float32)
    within about 2**-18 of a step, but an exact half rounds up here and to even there."""

    n: int
    c: int
    h: int
    w: int
    multiplier_a: int
    multiplier_b: int
    shift: int
    weight_a: int = 1
    weight_b: int = 1
    pre_shift: int = 0
    zero_a: int = 0
    zero_b: int = 0
    zero_y: int = 0
    clip: tuple[int, int] = INT8
    kind: ClassVar[str] = "scaled_add"

    def __post_init__(self) -> None:
        _positive(
            "scaled add",
            n=self.n,
            c=self.c,
            h=self.h,
            w=self.w,
            multiplier_a=self.multiplier_a,
            multiplier_b=self.multiplier_b,
        )
        for name, lo, hi in (
            ("shift", 0, 15),
            ("pre_shift", 0, 31),
            ("weight_a", 1, 127),
            ("weight_b", 1, 127),
            ("multiplier_a", 1, IMM_MAX),
            ("multiplier_b", 1, IMM_MAX),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise ScheduleError(f"scaled add {name} must be in {lo}..{hi}, not {value!r}")
        for name in ("zero_a", "zero_b", "zero_y"):
            _int8_pad(f"scaled add {name}:", getattr(self, name))
        clip = tuple(self.clip)
        object.__setattr__(self, "clip", clip)
        if len(clip) != 2 or not INT8[0] <= clip[0] <= clip[1] <= INT8[1]:
            raise ScheduleError(f"scaled add clip {clip} must satisfy -128 <= lo <= hi <= 127")

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return self.input_shape

    def describe(self) -> str:
        s = self.pre_shift + self.shift
        return (
            f"scaled add N={self.n} C={self.c} H={self.h} W={self.w} "
            f"(a x{self.weight_a * self.multiplier_a} + b x"
            f"{self.weight_b * self.multiplier_b}) >>{s}"
        )


@dataclass(frozen=True)
class Computation:
    """What a program computes: the operator, its epilogue (for conv2d and dense), the
    per-tensor multiplier when it is compiled in as an immediate, and a max pool of a conv2d's
    output taken in the same program (`pool`: the program's output is the pool's). The
    reference recomputes a program's outputs from this and its inputs and constants."""

    op: Conv2d | DepthwiseConv2d | Dense | Gemm | MaxPool2d | GlobalAvgPool2d | ScaledAdd
    epilogue: Epilogue | None = None
    multiplier: int | None = None
    pool: MaxPool2d | None = None

    def __post_init__(self) -> None:
        if isinstance(self.op, (Gemm, MaxPool2d, GlobalAvgPool2d, ScaledAdd)) != (
            self.epilogue is None
        ):
            raise ScheduleError(
                "a gemm or maxpool computation has no epilogue (a gemm's shift is part of it); "
                "conv2d and dense have one"
            )
        tensor = self.epilogue is not None and self.epilogue.multiplier == Multiplier.TENSOR
        if tensor != (self.multiplier is not None):
            raise ScheduleError(
                "a per-tensor multiplier value goes with (and only with) a per-tensor "
                f"multiplier epilogue, not {self.multiplier!r}"
            )

        if self.pool is not None:
            if not isinstance(self.op, Conv2d) or self.epilogue.residual:
                raise ScheduleError(
                    "a max pool in the same program follows a conv2d without a residual add, "
                    f"not {self.op.describe()}"
                    + (" with a residual" if isinstance(self.op, Conv2d) else "")
                )
            if self.pool.input_shape != self.op.output_shape:
                raise ScheduleError(
                    f"the max pool's input {self.pool.input_shape} is not the conv2d's output "
                    f"{self.op.output_shape}"
                )

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        """The shape of the program's output tensor (the pool's, where there is one)."""
        return (self.pool or self.op).output_shape

    def stages(self) -> tuple[Computation, ...]:
        """The computation as separate kernels compute it: a conv2d and its max pool as two,
        the pool's input the conv's output; anything else as itself."""
        if self.pool is None:
            return (self,)
        return (replace(self, pool=None), Computation(self.pool))

    def describe(self) -> str:
        text = self.op.describe()
        if self.epilogue is not None:
            text += f", epilogue {self.epilogue.describe()}"
        if self.multiplier is not None:
            text += f" (multiplier {self.multiplier})"
        if self.pool is not None:
            text += f", then {self.pool.describe()}"
        return text
