"""Schedules for the convolution template: the tunable knobs, their legal values, and the
scratchpad/micro-op/field budget every legal schedule must fit.

A `ConvSchedule` tiles the lowered convolution (see mapping.py) into output tiles of
`tile_oc` channel blocks x `tile_oh` rows x `tile_ow` columns, each reduced in steps of
`tile_ic` input-channel blocks; `order` says whether output-channel tiles are the outer loop
(weights stay resident while the window slides) or the inner one (the input window stays while
the channels change); `double_buffer` splits every scratchpad into two halves so loads, compute
and stores of neighbouring steps overlap, and `acc_slots` (2 or 4, when double-buffered) is how
many accumulator tiles rotate, alternating between the accumulator's halves: with 4, a tile's
epilogue and store have three tile-times, not one, before its slot is zeroed again. It is
frozen and hashable: the tuner's search space.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from tilecraft.compiler.mapping import Lowered
from tilecraft.compiler.tensorize import kernel_size, window
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa.formats import ITER_BITS

ORDERS = ("oc_outer", "spatial_outer")
MAX_ITER = (1 << ITER_BITS) - 1
MAX_PAD = 15  # the LOAD pad fields are 4 bits
MAX_DMA = (1 << 16) - 1  # y_size, x_size, x_stride


@dataclass(frozen=True)
class ConvSchedule:
    tile_oc: int
    tile_ic: int
    tile_oh: int
    tile_ow: int
    order: str = "oc_outer"
    double_buffer: bool = True
    acc_slots: int = 2  # when double-buffered: 2 or 4 accumulator tiles in rotation

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"tiles oc={self.tile_oc} ic={self.tile_ic} oh={self.tile_oh} ow={self.tile_ow} "
            f"({self.order}, "
            + (
                f"double-buffered, {self.acc_slots} acc slots"
                if self.double_buffer
                else "single buffer"
            )
            + ")"
        )


@dataclass(frozen=True)
class Budget:
    """Scratchpad rows a schedule needs, per buffer, against what the config has."""

    slots: int
    acc_slots: int
    inp_window: int  # rows of one input-window slot
    inp_residual: int  # rows of one residual slot
    wgt_tile: int
    wgt_reserved: int
    acc_tile: int
    acc_reserved: int

    def needs(self, cfg: HwConfig) -> dict[str, tuple[int, int]]:
        """buffer -> (rows needed, rows available). Double-buffered accumulator tiles live in
        separate halves (so the GEMM and ALU units may overlap), the parameters in the first."""
        slot = {1: "acc", 2: "acc half", 4: "acc quarter"}[self.acc_slots]
        return {
            "inp": (self.slots * (self.inp_window + self.inp_residual), cfg.depth("inp")),
            "wgt": (self.slots * self.wgt_tile + self.wgt_reserved, cfg.depth("wgt")),
            slot: (self.acc_tile + self.acc_reserved, cfg.depth("acc") // self.acc_slots),
        }


@dataclass(frozen=True)
class Tile:
    nb: int
    oc0: int
    toc: int
    oh0: int
    toh: int
    ow0: int
    tow: int

    @property
    def pix(self) -> int:
        return self.toh * self.tow


def ranges(total: int, step: int) -> list[tuple[int, int]]:
    return [(a, min(step, total - a)) for a in range(0, total, step)]


def tiles(low: Lowered, s: ConvSchedule) -> Iterator[Tile]:
    ocs, ohs, ows = (
        ranges(low.ocb, s.tile_oc),
        ranges(low.oh, s.tile_oh),
        ranges(low.ow, s.tile_ow),
    )
    for nb in range(low.nbb):
        if s.order == "oc_outer":
            for (oc0, toc), (oh0, toh), (ow0, tow) in itertools.product(ocs, ohs, ows):
                yield Tile(nb, oc0, toc, oh0, toh, ow0, tow)
        else:
            for (oh0, toh), (ow0, tow), (oc0, toc) in itertools.product(ohs, ows, ocs):
                yield Tile(nb, oc0, toc, oh0, toh, ow0, tow)


def budget(cfg: HwConfig, low: Lowered, s: ConvSchedule) -> Budget:
    kh, kw = low.kernel
    wr, wc = window(low, s.tile_oh, s.tile_ow)
    res_blocks = low.residual_blocks(s.tile_oc, cfg) if low.epilogue.residual else 0
    return Budget(
        slots=2 if s.double_buffer else 1,
        acc_slots=s.acc_slots if s.double_buffer else 1,
        inp_window=s.tile_ic * wr * wc,
        inp_residual=res_blocks * s.tile_oh * s.tile_ow,
        wgt_tile=s.tile_oc * s.tile_ic * kh * kw,
        wgt_reserved=low.select_rows(cfg),
        acc_tile=s.tile_oc * s.tile_oh * s.tile_ow,
        acc_reserved=low.param_rows(),
    )


def violations(cfg: HwConfig, low: Lowered, s: ConvSchedule) -> list[str]:
    """Every limit `s` breaks, each naming the limit and by how much; [] if legal."""
    out = []
    if s.order not in ORDERS:
        out.append(f"order {s.order!r} is not one of {ORDERS}")
    if s.acc_slots not in (2, 4):
        out.append(f"acc_slots = {s.acc_slots!r} must be 2 or 4")
    for name, value, top in (
        ("tile_oc", s.tile_oc, low.ocb),
        ("tile_ic", s.tile_ic, low.icb),
        ("tile_oh", s.tile_oh, low.oh),
        ("tile_ow", s.tile_ow, low.ow),
    ):
        if not isinstance(value, int) or not 1 <= value <= top:
            out.append(f"{name} = {value!r} must be in 1..{top}")
    if out:
        return out
    b = budget(cfg, low, s)
    for buf, (need, have) in b.needs(cfg).items():
        if need > have:
            out.append(
                f"{buf} scratchpad: needs {need} rows ({_explain(buf, b)}), has {have} "
                f"(exceeds by {need - have})"
            )
    uops, have = kernel_size(low, s.tile_oc, s.tile_ic, s.tile_oh, s.tile_ow), cfg.depth("uop")
    # at least one kernel per accumulator slot in use (the exact count is known at emission)
    tiles = low.nbb * -(-low.ocb // s.tile_oc) * -(-low.oh // s.tile_oh) * -(-low.ow // s.tile_ow)
    kernels = min(b.acc_slots, tiles)
    if uops * kernels > have:
        out.append(
            f"micro-op buffer: needs at least {kernels} GEMM kernel(s) of {uops} micro-ops = "
            f"{uops * kernels}, has {have} (exceeds by {uops * kernels - have})"
        )
    pix = s.tile_oh * s.tile_ow
    if pix > MAX_ITER:
        out.append(f"ALU loop over {pix} tile pixels exceeds the {ITER_BITS}-bit iteration field")
    if max(low.pad) > MAX_PAD:
        out.append(f"padding {max(low.pad)} exceeds the LOAD pad field (max {MAX_PAD})")
    stride_rows = low.w * (low.stride[0] if low.row_skip else 1)
    for what, value in (
        ("input row stride", stride_rows),
        ("output plane", low.oh * low.ow),
        ("weight row", low.icb * low.kernel[0] * low.kernel[1]),
    ):
        if value > MAX_DMA:
            out.append(f"{what} of {value} elements exceeds the 16-bit DMA stride (max {MAX_DMA})")
    return out


def check(cfg: HwConfig, low: Lowered, s: ConvSchedule) -> None:
    problems = violations(cfg, low, s)
    if problems:
        raise ScheduleError(
            f"schedule {s.describe()} is illegal for {low.describe()} on {cfg.tag}:\n  "
            + "\n  ".join(problems)
        )


def space(cfg: HwConfig, low: Lowered, double_buffer=(True, False)) -> Iterator[ConvSchedule]:
    """Every legal schedule (tile sizes that divide their dimension, or the whole of it)."""
    for db in double_buffer:
        for oc, ic, oh, ow, order, acc in itertools.product(
            _sizes(low.ocb),
            _sizes(low.icb),
            _sizes(low.oh),
            _sizes(low.ow),
            ORDERS,
            (2, 4) if db else (2,),
        ):
            single = oc == low.ocb or (oh == low.oh and ow == low.ow)
            if order == "spatial_outer" and single:
                continue  # one loop has a single trip: the orders are the same program
            s = ConvSchedule(oc, ic, oh, ow, order, db, acc)
            if not violations(cfg, low, s):
                yield s


def shaping_limits(cfg: HwConfig, low: Lowered, s: ConvSchedule) -> list[str]:
    """Why each tile is not larger: the limit that growing it to the next size would break."""
    notes = []
    for name, top in (
        ("tile_oc", low.ocb),
        ("tile_ic", low.icb),
        ("tile_oh", low.oh),
        ("tile_ow", low.ow),
    ):
        value = getattr(s, name)
        bigger = [v for v in _sizes(top) if v > value]
        if not bigger:
            notes.append(f"{name}={value} covers the whole dimension")
            continue
        grown = ConvSchedule(**{**s.to_dict(), name: bigger[0]})
        problems = violations(cfg, low, grown)
        if problems:
            notes.append(f"{name}={value}: {bigger[0]} would break {problems[0]}")
        else:
            notes.append(f"{name}={value}: chosen by the cost model ({bigger[0]} would fit)")
    return notes


def _sizes(n: int) -> list[int]:
    """Tile sizes tried for a dimension of n: its divisors (ragged edges only via the user)."""
    return [d for d in range(1, n + 1) if n % d == 0]


def _explain(buf: str, b: Budget) -> str:
    if buf.startswith("inp"):
        res = f" + {b.inp_residual} residual" if b.inp_residual else ""
        return f"{b.slots} x ({b.inp_window} window{res})"
    if buf.startswith("wgt"):
        extra = f" + {b.wgt_reserved} residual selectors" if b.wgt_reserved else ""
        return f"{b.slots} x {b.wgt_tile} weight tile{extra}"
    extra = f" + {b.acc_reserved} epilogue parameters" if b.acc_reserved else ""
    return f"{b.acc_tile} accumulator tile{extra}"
