"""The operators the accelerator runs, as frozen descriptions: a convolution's shape and the
integer epilogue applied to its accumulators. Dense layers are convolutions (see dense.py)."""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.errors import ScheduleError


def _pair(v, name: str) -> tuple[int, int]:
    pair = (v, v) if isinstance(v, int) else tuple(v)
    if len(pair) != 2 or not all(isinstance(x, int) for x in pair):
        raise ScheduleError(f"{name} must be an int or a pair of ints, not {v!r}")
    return pair


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

    def __post_init__(self) -> None:
        for name in ("kernel", "stride", "pad"):
            object.__setattr__(self, name, _pair(getattr(self, name), name))
        for name in ("n", "ic", "h", "w", "oc"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ScheduleError(f"conv2d {name} must be a positive int, not {value!r}")
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

    def describe(self) -> str:
        k, s, p = self.kernel, self.stride, self.pad
        return (
            f"conv2d N={self.n} IC={self.ic} H={self.h} W={self.w} OC={self.oc} "
            f"K={k[0]}x{k[1]} S={s[0]}x{s[1]} P={p[0]}x{p[1]}"
        )


@dataclass(frozen=True)
class Epilogue:
    """What happens to the int32 accumulators before the int8 output (reference.epilogue is
    the exact definition): bias add, multiply by a per-tensor or per-channel multiplier,
    rounding right shift, residual add, then clip (ReLU raises the low bound to 0)."""

    bias: bool = False
    multiplier: str = "none"  # "none", "tensor" (one value) or "channel" (one per channel)
    shift: int = 0
    residual: bool = False
    relu: bool = False
    clip: tuple[int, int] = (-128, 127)

    def __post_init__(self) -> None:
        if self.multiplier not in ("none", "tensor", "channel"):
            raise ScheduleError(
                f"multiplier must be 'none', 'tensor' or 'channel', not {self.multiplier!r}"
            )
        if not 0 <= self.shift <= 31:
            raise ScheduleError(f"shift must be in 0..31, not {self.shift}")
        lo, hi = self.clip
        if not -128 <= lo <= hi <= 127:
            raise ScheduleError(f"clip {self.clip} must satisfy -128 <= lo <= hi <= 127")

    @property
    def low(self) -> int:
        return max(self.clip[0], 0) if self.relu else self.clip[0]

    @property
    def high(self) -> int:
        return self.clip[1]

    def describe(self) -> str:
        parts = ["bias"] if self.bias else []
        if self.multiplier != "none":
            parts.append(f"x{self.multiplier}-multiplier")
        if self.shift:
            parts.append(f">>{self.shift} (rounding)")
        if self.residual:
            parts.append("+residual")
        parts.append(f"clip[{self.low}, {self.high}]")
        return ", ".join(parts)
