"""The legality of schedules for the convolution template: the scratchpad, micro-op and field
budget every legal schedule must fit (`violations`), the legal space (`space`), the tiles a
schedule cuts the output into, and why each tile is not larger (`shaping_limits`).

A `ConvSchedule` (tilecraft.ops.schedules) tiles the mapped convolution (mapping.py) into output
tiles of `tile_oc` channel blocks x `tile_oh` rows x `tile_ow` columns, each reduced in steps of
`tile_ic` input-channel blocks. Every limit here comes from the config and the ISA's field
widths; none is typed as a number.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass, replace

from tilecraft.compiler.mapping.blocks import MappedConv, alu_passes
from tilecraft.compiler.mapping.pool_windows import Band, axes, band_rows, bands
from tilecraft.compiler.operator.tensorize import kernel_size, window
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import isa_for
from tilecraft.ops import ConvSchedule, LoopOrder
from tilecraft.ops.schedules import ACC_SLOTS


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
    acc_reserved: int  # after each slot's tile: the epilogue's parameters, handed rows
    one_bank: bool = False  # each slot within one bank (the requantization unit reads one)
    acc_handed: int = 0  # of acc_reserved, the rows a max pool's tiles hand on (`carry_rows`)

    def needs(self, cfg: HwConfig) -> dict[str, tuple[int, int]]:
        """buffer -> (rows needed, rows available). Double-buffered accumulator tiles alternate
        between the banks (so the GEMM and ALU units may overlap), each slot's region holding
        its tile and a copy of the epilogue's parameters; on the requantization unit a lone
        slot keeps to one bank too (a STORE's rows and parameters in the bank it reads)."""
        slot = {1: "acc", 2: "acc half", 4: "acc quarter"}[self.acc_slots]
        return {
            "inp": (self.slots * (self.inp_window + self.inp_residual), cfg.depth("inp")),
            "wgt": (self.slots * self.wgt_tile + self.wgt_reserved, cfg.depth("wgt")),
            slot: (self.acc_tile + self.acc_reserved, self.acc_region(cfg)),
        }

    def acc_region(self, cfg: HwConfig) -> int:
        """Rows of one accumulator slot's region."""
        region = cfg.depth("acc") // self.acc_slots
        return min(region, cfg.acc_bank_rows) if self.one_bank else region


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


def pool_bands(low: MappedConv, s: ConvSchedule) -> tuple[tuple[Band, ...], tuple[Band, ...]]:
    """Under a max pool on the accumulators, the bands of pooled rows and of pooled columns
    the tiles take (`tile_oh` and `tile_ow` count the convolution rows and columns a band
    adds: the pool's stride a pooled row or column)."""
    rows, cols = axes(low.pool)
    return bands(rows, pooled(low, s)[0]), bands(cols, pooled(low, s)[1])


def pooled(low: MappedConv, s: ConvSchedule) -> tuple[int, int]:
    """The pooled rows and columns of a tile under a max pool; (0, 0) without one."""
    if not low.pool:
        return 0, 0
    (sh, sw) = low.pool.stride
    return max(1, s.tile_oh // sh), max(1, s.tile_ow // sw)


def tile_shape(low: MappedConv, s: ConvSchedule) -> tuple[int, int]:
    """The most convolution rows and columns a tile computes: `tile_oh` x `tile_ow`, or under
    a pool its bands' (a band computes the rows it does not share with the band before)."""
    if not low.pool:
        return s.tile_oh, s.tile_ow
    rows, cols = axes(low.pool)
    return band_rows(rows, pooled(low, s)[0]), band_rows(cols, pooled(low, s)[1])


def carry_rows(low: MappedConv, s: ConvSchedule) -> int:
    """Accumulator rows a pool keeps between tiles: each column band's last row and, in two
    places, the window-row maxima at a tile's last column, per channel block of a tile."""
    return s.tile_oc * (low.ow + 2 * pooled(low, s)[0]) if low.pool else 0


def tiles(low: MappedConv, s: ConvSchedule) -> Iterator[Tile]:
    ocs, ohs, ows = (
        ranges(low.ocb, s.tile_oc),
        ranges(low.oh, s.tile_oh),
        ranges(low.ow, s.tile_ow),
    )
    if low.pool:  # the bands' convolution rows and columns
        row_bands, col_bands = pool_bands(low, s)
        ohs = [(b.lo, b.rows) for b in row_bands]
        ows = [(b.lo, b.rows) for b in col_bands]
    for nb in range(low.nbb):
        if s.order == LoopOrder.OC_OUTER:
            for (oc0, toc), (oh0, toh), (ow0, tow) in itertools.product(ocs, ohs, ows):
                yield Tile(nb, oc0, toc, oh0, toh, ow0, tow)
        else:
            for (oh0, toh), (ow0, tow), (oc0, toc) in itertools.product(ohs, ows, ocs):
                yield Tile(nb, oc0, toc, oh0, toh, ow0, tow)


def budget(cfg: HwConfig, low: MappedConv, s: ConvSchedule) -> Budget:
    rows, cols = tile_shape(low, s)
    wr, wc = window(low, rows, cols)
    res_blocks = low.residual_blocks(s.tile_oc, cfg) if low.epilogue.residual else 0
    tp, tq = pooled(low, s)  # under a pool, the pooled rows after the tile's
    return Budget(
        slots=s.slots,
        acc_slots=s.acc_tiles,
        inp_window=s.tile_ic * wr * wc,
        inp_residual=res_blocks * s.tile_oh * s.tile_ow,
        wgt_tile=s.tile_oc * s.tile_ic * low.wgt_taps,
        wgt_reserved=low.select_rows(cfg),
        acc_tile=s.tile_oc * (rows * cols + tp * tq),
        acc_reserved=low.param_rows() + carry_rows(low, s),
        acc_handed=carry_rows(low, s),
        one_bank=low.epilogue.on_unit,
    )


def violations(cfg: HwConfig, low: MappedConv, s: ConvSchedule) -> list[str]:
    """Every limit `s` breaks, each naming the limit and by how much; [] if legal."""
    out = []
    for name, value, top in (
        ("tile_oc", s.tile_oc, 1 if low.grouped else low.ocb),  # depthwise: a block a tile
        ("tile_ic", s.tile_ic, low.icb),
        ("tile_oh", s.tile_oh, max(low.oh, _sizes(low, "tile_oh")[-1])),
        ("tile_ow", s.tile_ow, max(low.ow, _sizes(low, "tile_ow")[-1])),
    ):
        if not 1 <= value <= top:
            out.append(f"{name} = {value!r} must be in 1..{top}")
    for name, stride in zip(("tile_oh", "tile_ow"), low.pool.stride if low.pool else ()):
        if getattr(s, name) not in _sizes(low, name):
            out.append(
                f"{name} = {getattr(s, name)} must be the pool's stride {stride} times a "
                f"divisor of its outputs: one of {_sizes(low, name)}"
            )
    if low.pool and s.order != LoopOrder.OC_OUTER and s.tile_oc < low.ocb:
        out.append(
            "under a max pool a channel tile's bands go one after another (each hands rows "
            f"on to the next): loop order {LoopOrder.OC_OUTER.value}, not {s.order.value}"
        )
    if out:
        return out
    return _tile_violations(cfg, low, s) + _layer_violations(cfg, low)


def _tile_violations(cfg: HwConfig, low: MappedConv, s: ConvSchedule) -> list[str]:
    """The limits of `violations` that depend on the tiles (their sizes in range)."""
    out = []
    spec = isa_for(cfg)
    b = budget(cfg, low, s)
    for buf, (need, have) in b.needs(cfg).items():
        if need > have:
            out.append(
                f"{buf} scratchpad: needs {need} rows ({_explain(buf, b)}), has {have} "
                f"(exceeds by {need - have})"
            )
    rows, cols = tile_shape(low, s)
    uops, have = kernel_size(low, s.tile_oc, s.tile_ic, rows, cols), cfg.depth("uop")
    # at least one kernel per accumulator slot in use (the exact count is known at emission)
    tiles = low.nbb * -(-low.ocb // s.tile_oc) * -(-low.oh // s.tile_oh) * -(-low.ow // s.tile_ow)
    kernels = min(b.acc_slots, tiles)
    if uops * kernels > have:
        out.append(
            f"micro-op buffer: needs at least {kernels} GEMM kernel(s) of {uops} micro-ops = "
            f"{uops * kernels}, has {have} (exceeds by {uops * kernels - have})"
        )
    pix = b.acc_tile // s.tile_oc  # the zeroing's loop: the tile's rows (and pooled rows)
    it = spec.field("iter_out")
    if pix > it.hi:
        out.append(
            f"ALU loop over {pix} tile pixels exceeds the {it.width}-bit iteration field "
            f"(max {it.hi})"
        )
    return out


def _layer_violations(cfg: HwConfig, low: MappedConv) -> list[str]:
    """The limits of `violations` that no tiling changes: field widths against the layer."""
    out = []
    spec = isa_for(cfg)
    pad = spec.field("x_pad0")
    if max(low.pad) > pad.hi:
        out.append(f"padding {max(low.pad)} exceeds the LOAD pad field (max {pad.hi})")
    stride_rows = low.w * (low.stride[0] if low.row_skip else 1)
    dma = spec.field("x_stride")
    for what, value in (
        ("input row stride", stride_rows),
        ("output plane", low.oh * low.ow),
        ("weight row", low.icb * low.wgt_taps),
    ):
        if value > dma.hi:
            out.append(
                f"{what} of {value} elements exceeds the {dma.width}-bit DMA stride (max {dma.hi})"
            )
    return out


def instruction_bound(cfg: HwConfig, low: MappedConv, s: ConvSchedule) -> int:
    """At most how many instructions the lowering emits for `s` (every load counted, none
    skipped as resident): the program's size, known before it is built."""
    n_tiles = low.nbb * -(-low.ocb // s.tile_oc) * -(-low.oh // s.tile_oh) * -(-low.ow // s.tile_ow)
    steps = -(-low.icb // s.tile_ic)
    per_step = s.tile_ic + 2  # a LOAD per input block, the weights, the GEMM
    residual = low.residual_blocks(s.tile_oc, cfg) if low.epilogue.residual else 0
    per_tile = 8 + residual + 1 + s.tile_oc  # zeroing, epilogue passes, residual, stores
    per_tile += 2 * sum(low.pool.kernel) + 4 if low.pool else 0  # the window maxima, carries
    # the last tile's epilogue goes one channel block at a time (its passes once per block),
    # and the first step's GEMM one input block at a time (lowering.py)
    passes = 0 if low.epilogue.residual else sum(alu_passes(low)) - 1  # zeroing left out
    split = (s.tile_oc - 1) * passes + s.tile_ic - 1
    return n_tiles * (steps * per_step + per_tile) + split + 16 + 2 * low.ocb


def check(cfg: HwConfig, low: MappedConv, s: ConvSchedule) -> None:
    problems = violations(cfg, low, s)
    if problems:
        raise ScheduleError(
            f"schedule {s.describe()} is illegal for {low.describe()} on {cfg.tag}:\n  "
            + "\n  ".join(problems)
        )


MAX_SPACE = 20_000  # tile-size combinations a space may try (each a legality check)


def candidate_sizes(cfg: HwConfig, low: MappedConv) -> list[list[int]]:
    """Tile sizes tried for (oc, ic, oh, ow): the divisors of each dimension that could fit at
    all (no tile has more rows than its scratchpad), thinned evenly in log scale when their
    combinations would exceed MAX_SPACE (only for dimensions with very many divisors)."""
    acc, inp = cfg.depth("acc"), cfg.depth("inp")
    lists = [
        [1] if low.grouped else [d for d in divisors(low.ocb) if d <= acc],
        [d for d in divisors(low.icb) if d <= inp],
        [d for d in divisors(low.oh) if d <= acc],
        [d for d in divisors(low.ow) if d <= acc],
    ]
    if low.pool:  # bands of whole pooled rows and columns
        lists[2] = [d for d in _sizes(low, "tile_oh") if d <= acc]
        lists[3] = [d for d in _sizes(low, "tile_ow") if d <= acc]
    while math.prod(len(x) for x in lists) > MAX_SPACE:
        k = max(range(4), key=lambda i: len(lists[i]))
        lists[k] = _thin(lists[k], len(lists[k]) - 1)
    return lists


def _thin(sizes: list[int], keep: int) -> list[int]:
    """`keep` of `sizes` (ascending divisors, which lie roughly evenly in log scale) spread
    evenly over the list, the smallest and largest included."""
    picks = {round(i * (len(sizes) - 1) / (keep - 1)) for i in range(keep)}
    return [sizes[i] for i in sorted(picks)]


def space(cfg: HwConfig, low: MappedConv, double_buffer=(True, False)) -> Iterator[ConvSchedule]:
    """Every legal schedule among `candidate_sizes` (tile sizes that divide their dimension,
    or the whole of it)."""
    if _layer_violations(cfg, low):
        return
    oc_sizes, ic_sizes, oh_sizes, ow_sizes = candidate_sizes(cfg, low)
    for db in double_buffer:
        slots = ACC_SLOTS if db else ACC_SLOTS[:1]
        for oc, ic, oh, ow in itertools.product(oc_sizes, ic_sizes, oh_sizes, ow_sizes):
            # the loop order changes no limit: each slot count is checked once for both
            fit = [
                acc
                for acc in slots
                if not _tile_violations(
                    cfg, low, ConvSchedule(oc, ic, oh, ow, LoopOrder.OC_OUTER, db, acc)
                )
            ]
            if not fit:
                continue
            single = oc == low.ocb or (oh == low.oh and ow == low.ow)
            for order in LoopOrder:
                if order == LoopOrder.SPATIAL_OUTER and (single or low.pool):
                    continue  # one loop has a single trip: the orders are the same program
                    # (under a pool: a channel tile's bands in turn, `violations`)
                for acc in fit:
                    yield ConvSchedule(oc, ic, oh, ow, order, db, acc)


def shaping_limits(
    cfg: HwConfig, low: MappedConv, s: ConvSchedule, chooser: str = "the cost model"
) -> list[str]:
    """Why each tile is not larger: the limit that growing it to the next size would break, or
    `chooser` (who picked the schedule) where none would."""
    notes = []
    for name in ("tile_oc", "tile_ic", "tile_oh", "tile_ow"):
        value = getattr(s, name)
        bigger = [v for v in _sizes(low, name) if v > value]
        if not bigger:
            notes.append(f"{name}={value} covers the whole dimension")
            continue
        grown = replace(s, **{name: bigger[0]})
        problems = violations(cfg, low, grown)
        if problems:
            notes.append(f"{name}={value}: {bigger[0]} would break {problems[0]}")
        else:
            notes.append(f"{name}={value}: chosen by {chooser} ({bigger[0]} would fit)")
    return notes


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending (O(sqrt n) steps)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _sizes(low: MappedConv, name: str) -> list[int]:
    """Tile sizes tried for a dimension: its divisors (ragged edges only via the user); under a
    max pool, bands of a divisor of the pooled rows (columns), the pool's stride a row."""
    if low.pool and name == "tile_oh":
        return [low.pool.stride[0] * d for d in divisors(low.pool.oh)]
    if low.pool and name == "tile_ow":
        return [low.pool.stride[1] * d for d in divisors(low.pool.ow)]
    top = {"tile_oc": low.ocb, "tile_ic": low.icb, "tile_oh": low.oh, "tile_ow": low.ow}[name]
    return divisors(top)


def _explain(buf: str, b: Budget) -> str:
    if buf.startswith("inp"):
        res = f" + {b.inp_residual} residual" if b.inp_residual else ""
        return f"{b.slots} x ({b.inp_window} window{res})"
    if buf.startswith("wgt"):
        extra = f" + {b.wgt_reserved} residual selectors" if b.wgt_reserved else ""
        return f"{b.slots} x {b.wgt_tile} weight tile{extra}"
    params = b.acc_reserved - b.acc_handed
    extra = f" + {params} epilogue parameters" if params else ""
    extra += f" + {b.acc_handed} rows handed between a pool's tiles" if b.acc_handed else ""
    return f"{b.acc_tile} accumulator tile{extra}"
