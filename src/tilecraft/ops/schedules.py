"""Schedules: the tunable knobs of an operator's program, as frozen, hashable records (the tuner's
search space, and what an artifact says it was compiled with). Which values are legal for an
operator on a config is the compiler's question (`compiler.schedule.violations`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

from tilecraft.errors import ScheduleError
from tilecraft.serial import enum_member


class LoopOrder(str, Enum):
    """Output-channel tiles outside (weights stay resident while the window slides) or inside
    (the input window stays while the channels change)."""

    OC_OUTER = "oc_outer"
    SPATIAL_OUTER = "spatial_outer"


ACC_SLOTS = (2, 4)  # accumulator tiles in rotation when double-buffered


@dataclass(frozen=True)
class ConvSchedule:
    """Output tiles of `tile_oc` channel blocks x `tile_oh` rows x `tile_ow` columns, reduced in
    steps of `tile_ic` input-channel blocks, in `order`; `double_buffer` splits every scratchpad
    into two halves so loads, compute and stores of neighbouring steps overlap, and `acc_slots`
    accumulator tiles (2 or 4) rotate between the accumulator's banks: with 4, a tile's epilogue
    and store have three tile-times, not one, before its slot is zeroed again."""

    tile_oc: int
    tile_ic: int
    tile_oh: int
    tile_ow: int
    order: LoopOrder = LoopOrder.OC_OUTER
    double_buffer: bool = True
    acc_slots: int = 2
    kind: ClassVar[str] = "conv"

    def __post_init__(self) -> None:
        if type(self.order) is not LoopOrder:  # a value (a record's string) becomes a member
            order = enum_member(LoopOrder, self.order, "order", ScheduleError)
            object.__setattr__(self, "order", order)
        for name in ("tile_oc", "tile_ic", "tile_oh", "tile_ow", "acc_slots"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ScheduleError(f"{name} must be an int, not {value!r}")
        if not isinstance(self.double_buffer, bool):
            raise ScheduleError(f"double_buffer must be true or false, not {self.double_buffer!r}")
        if self.acc_slots not in ACC_SLOTS:
            raise ScheduleError(f"acc_slots = {self.acc_slots} must be one of {ACC_SLOTS}")

    @property
    def slots(self) -> int:
        """Slots of each input/weight scratchpad."""
        return 2 if self.double_buffer else 1

    @property
    def acc_tiles(self) -> int:
        """Accumulator tiles in rotation."""
        return self.acc_slots if self.double_buffer else 1

    def describe(self) -> str:
        buffering = (
            f"double-buffered, {self.acc_slots} acc slots"
            if self.double_buffer
            else "single buffer"
        )
        return (
            f"tiles oc={self.tile_oc} ic={self.tile_ic} oh={self.tile_oh} ow={self.tile_ow} "
            f"({self.order.value}, {buffering})"
        )


@dataclass(frozen=True)
class GemmTiles:
    """The example GEMM's tiles, in blocks of rows (tm), columns (tn) and reduction (tk); with
    `overlap` every scratchpad is split in two so loads run under the previous step's GEMM."""

    tm: int
    tn: int
    tk: int
    overlap: bool = True
    kind: ClassVar[str] = "gemm"

    def __post_init__(self) -> None:
        for name in ("tm", "tn", "tk"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ScheduleError(f"tile {name} must be a positive int, not {value!r}")

    def describe(self) -> str:
        mode = "overlap" if self.overlap else "serial"
        return f"tiles m,n,k = {self.tm},{self.tn},{self.tk} ({mode})"
