"""The integer epilogue applied to a convolution's or a matrix product's accumulators, and how
it scales them (`Multiplier`): a frozen description the compiler lowers, the artifact records
and the reference (`ops.reference.epilogue`) computes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from tilecraft.errors import ScheduleError
from tilecraft.serial import enum_member

INT8 = (-128, 127)


class Multiplier(str, Enum):
    """How the epilogue scales the accumulators: not at all, by one value for the whole tensor
    (compiled in as an immediate), by one value per output channel (a tensor), or by one
    float32 scale per output channel in onnxruntime's arithmetic (`ops.requant`: the
    requantization unit's, on configs that have one)."""

    NONE = "none"
    TENSOR = "tensor"
    CHANNEL = "channel"
    FLOAT32 = "float32"


@dataclass(frozen=True)
class Epilogue:
    """What happens to the int32 accumulators before the int8 output (`ops.reference.epilogue`
    is the exact definition): per-channel accumulator bounds (`acc_bounds`), bias add,
    multiply by a per-tensor or per-channel multiplier, rounding right shift, residual add,
    `offset` (zero points: the output's less the residual's), then clip (ReLU raises the low
    bound to 0; with zero points the quantizer states the clip itself).

    With `acc_bounds` and no residual the bounds are the clip: the output is the shifted value
    narrowed to int8, and the compiler's quantizer picks bounds that keep it in range (so the
    multiply may use every bit an int8 result leaves free). The clip must then be the full
    int8 range.

    `pre_shift` > 0 makes the multiply two-stage: x * m, floor-shifted right by `pre_shift`,
    times a second per-channel multiplier `m2`, then the rounding shift. Two 32-bit products
    carry a multiplier of about 24 + log2(scale) + 10 bits where one carries 24 + log2(scale):
    the rounding of a model quantized by others (onnxruntime computes it in float32) is
    reproduced on all but a few elements in 10**5, at two more ALU passes per tile.

    `multiplier` FLOAT32 is onnxruntime's requantization instead, every rounding of it
    (`ops.requant.requantize`): y = clip(rne(fl32(fl32(acc + bias) * scale[c])) + offset),
    with `offset` the output's zero point. It runs on the requantization unit (a STORE's
    mode), so it takes no shift, two-stage multiply or accumulator bounds; a residual (configs
    with `requant_residual`) is added after the rounding, before the offset and the clip:
    y = clip(rne(fl32(fl32(acc + bias) * scale[c])) + residual + offset)."""

    bias: bool = False
    multiplier: Multiplier = Multiplier.NONE
    shift: int = 0
    residual: bool = False
    relu: bool = False
    clip: tuple[int, int] = INT8
    acc_bounds: bool = False
    pre_shift: int = 0
    offset: int = 0  # added after the shift and residual: the output's zero point, less the
    # residual's (0 for symmetric tensors)

    def __post_init__(self) -> None:
        multiplier = enum_member(Multiplier, self.multiplier, "multiplier", ScheduleError)
        object.__setattr__(self, "multiplier", multiplier)
        for name in ("bias", "residual", "relu", "acc_bounds"):
            if not isinstance(getattr(self, name), bool):
                raise ScheduleError(f"epilogue {name} must be true or false")
        if isinstance(self.shift, bool) or not isinstance(self.shift, int):
            raise ScheduleError(f"shift must be an int in 0..31, not {self.shift!r}")
        if not 0 <= self.shift <= 31:
            raise ScheduleError(f"shift must be in 0..31, not {self.shift}")
        if isinstance(self.pre_shift, bool) or not isinstance(self.pre_shift, int):
            raise ScheduleError(f"pre_shift must be an int in 0..31, not {self.pre_shift!r}")
        if not 0 <= self.pre_shift <= 31:
            raise ScheduleError(f"pre_shift must be in 0..31, not {self.pre_shift}")
        if self.pre_shift and self.multiplier != Multiplier.CHANNEL:
            raise ScheduleError(
                f"a two-stage multiply (pre_shift {self.pre_shift}) needs per-channel "
                f"multipliers, not multiplier {self.multiplier.value!r}"
            )
        if self.multiplier == Multiplier.FLOAT32:
            extra = {
                "shift": self.shift,
                "pre_shift": self.pre_shift,
                "acc_bounds": self.acc_bounds,
            }
            used = {k: v for k, v in extra.items() if v}
            if used:
                raise ScheduleError(
                    f"a float32 requantization (multiplier 'float32') has no shift, pre_shift "
                    f"or acc_bounds; got {used}"
                )
        if (
            isinstance(self.offset, bool)
            or not isinstance(self.offset, int)
            or not -255 <= self.offset <= 255
        ):
            raise ScheduleError(f"epilogue offset must be an int in -255..255, not {self.offset!r}")
        given = self.clip
        try:
            clip = tuple(given)
        except TypeError:
            clip = ()
        object.__setattr__(self, "clip", clip)
        ints = all(isinstance(c, int) and not isinstance(c, bool) for c in clip)
        if len(clip) != 2 or not ints or not INT8[0] <= clip[0] <= clip[1] <= INT8[1]:
            raise ScheduleError(
                f"clip {given!r} must be two ints (lo, hi) with -128 <= lo <= hi <= 127"
            )
        if self.acc_bounds and not self.residual and (clip != INT8 or self.relu):
            raise ScheduleError(
                f"with acc_bounds and no residual the accumulator bounds are the clip: leave "
                f"clip at {INT8} and relu off (not clip {clip}, relu {self.relu})"
            )

    @property
    def final_clip(self) -> bool:
        """Whether the ALU clips the result (without it the bounds did, or the
        requantization unit does)."""
        return not self.on_unit and (self.residual or not self.acc_bounds)

    @property
    def on_unit(self) -> bool:
        """Whether the requantization unit computes the whole epilogue (FLOAT32)."""
        return self.multiplier == Multiplier.FLOAT32

    @property
    def low(self) -> int:
        return max(self.clip[0], 0) if self.relu else self.clip[0]

    @property
    def high(self) -> int:
        return self.clip[1]

    def describe(self) -> str:
        parts = ["acc bounds"] if self.acc_bounds else []
        parts += ["bias"] if self.bias else []
        if self.on_unit:
            parts.append("x float32 scale (requantization unit)")
        elif self.multiplier != Multiplier.NONE:
            parts.append(f"x{self.multiplier.value}-multiplier")
        if self.pre_shift:
            parts.append(f">>{self.pre_shift} x channel-multiplier2")
        if self.shift:
            parts.append(f">>{self.shift} (rounding)")
        if self.residual:
            parts.append("+residual")
        if self.offset:
            parts.append(f"{self.offset:+d}")
        if self.final_clip or self.on_unit:
            parts.append(f"clip[{self.low}, {self.high}]")
        return ", ".join(parts)
