"""A max pool taken on a convolution's accumulators, in the convolution's program: the window
maxima of each tile's int32 accumulators on the ALU, then the epilogue and the narrowing STORE
on the pooled rows alone (a quarter of them for a 3x3 stride-2 pool).

Why it is exact: the maximum commutes with any function that never decreases, max(f(a), f(b))
== f(max(a, b)), and an epilogue without a residual is such a function of the accumulator
where its multipliers are not negative and its 32-bit steps agree with exact arithmetic: a
clamp, an add, a product by m >= 0, a floor or rounding shift, a clip, and onnxruntime's
float32 requantization by a scale >= 0 each keep order. `check_monotone` proves it for one
layer, channel by channel, over every accumulator its int8 inputs can make (its weights'
extremes), in 64-bit arithmetic; a layer it cannot prove is compiled as two programs.

Tiles (`mapping/pool_windows.py`): a band of pooled rows by a band of pooled columns, which
computes the convolution rows and columns its windows read that the tiles before did not; the
one row (or column) neighbouring bands share is handed on, not computed again (`PoolTile`).
Windows are taken rows first then columns (`window_max`), each through its anchor tap (inside
the image and its band for every window, and no other window's): the anchor row takes the
maximum of the window's rows, every column at once, then each pooled row the maximum of its
anchor row's columns. A window's taps that fall in the padding are left out, as -inf padding
(`pad_value` -128 on int8) would be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tilecraft.compiler.mapping.blocks import MappedConv
from tilecraft.compiler.mapping.pool_windows import Band, axes
from tilecraft.compiler.operator.epilogue import Slots
from tilecraft.compiler.operator.kernels import ONCE, UopKernels
from tilecraft.compiler.operator.schedule import Tile, pool_bands
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Alu, AluOp, Uop
from tilecraft.ops import ConvSchedule, Epilogue, MaxPool2d, Multiplier

INT32 = (-(2**31), 2**31 - 1)


def accumulator_range(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per output channel, the least and greatest accumulator int8 inputs (the padding is an
    int8 too) can make with `weight` (OIHW int8), clamped to int32 (where the sum wraps, every
    int32 may occur)."""
    w = np.asarray(weight, np.int64).reshape(len(weight), -1)
    lo = np.minimum(w * 127, w * -128).sum(axis=1)
    hi = np.maximum(w * 127, w * -128).sum(axis=1)
    return np.maximum(lo, INT32[0]), np.minimum(hi, INT32[1])


def check_monotone(ep: Epilogue, lo: np.ndarray, hi: np.ndarray, params) -> None:
    """Raise a `ScheduleError` unless `ep` (with `params`: a ConvParams) never decreases over
    accumulators in [lo, hi] (per channel). Each step keeps order on its own in exact
    arithmetic (no multiplier or scale negative), so the exact values at the range's ends bound
    every value between. The 32-bit steps agree with exact arithmetic where nothing wraps, and
    also where a product or sum wraps but only adds, products and shifts follow, down to the
    narrowing store with no clip: modulo 2**32, then 2**(32 - s) after a shift by s, so the
    narrowed int8 is exact where those bits stay >= 8 and the exact result lies in int8 (the
    quantizer's exact requantization lets its second product wrap so)."""

    def need(name, value):
        if value is None:
            raise ScheduleError(
                f"a max pool on the accumulators needs the epilogue's {name} as a constant, to "
                f"prove the epilogue never decreases; it was left as an input"
            )
        return np.asarray(value)

    def not_negative(what: str, value) -> np.ndarray:
        value = np.asarray(value)
        if np.any(~(value >= 0)):  # NaN included
            raise ScheduleError(
                f"the epilogue's {what} has a negative value, so it reverses order: the max "
                f"pool is not taken on the accumulators"
            )
        return value

    bits = None  # after a wrap: the low bits the 32-bit steps still hold exactly
    where = ""

    def step(what: str, a, b, shift: int = 0):
        nonlocal bits, where
        if bits is None and (np.any(a < INT32[0]) or np.any(b > INT32[1])):
            bits, where = 32, what
        if bits is not None:
            bits -= shift
        return (a >> shift, b >> shift) if shift else (a, b)

    def wrapped(why: str) -> ScheduleError:
        return ScheduleError(
            f"the epilogue's {where} may wrap around int32 on these weights and {why}, so it "
            f"may decrease: the max pool is not taken on the accumulators"
        )

    lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
    if ep.acc_bounds:
        bounds = [need(n, v).astype(np.int64) for n, v in (("acc_lo", params.acc_lo),
                                                            ("acc_hi", params.acc_hi))]  # fmt: skip
        lo, hi = np.clip(lo, *bounds), np.clip(hi, *bounds)
    if ep.bias:
        b = need("bias", params.bias).astype(np.int64)
        lo, hi = step("bias add", lo + b, hi + b)
    if ep.on_unit:
        if bits is not None:
            raise wrapped("the requantization unit converts it to float32")
        not_negative("scale", need("scale", params.multiplier))
        return  # float32(x) * scale, rounded, offset, clipped: each keeps order
    if ep.multiplier == Multiplier.TENSOR:
        m = np.int64(not_negative("multiplier", params.tensor_multiplier))
        lo, hi = step("multiply", lo * m, hi * m)
    elif ep.multiplier == Multiplier.CHANNEL:
        m = not_negative("multiplier", need("multiplier", params.multiplier)).astype(np.int64)
        lo, hi = step("multiply", lo * m, hi * m)
    if ep.pre_shift:
        m2 = not_negative("multiplier2", need("multiplier2", params.multiplier2))
        lo, hi = step("multiply", lo, hi, ep.pre_shift)
        lo, hi = step("second multiply", lo * m2.astype(np.int64), hi * m2.astype(np.int64))
    if ep.shift:
        r = 1 << (ep.shift - 1)
        lo, hi = step("rounding", lo + r, hi + r, ep.shift)
    lo, hi = step("zero point's add", lo + ep.offset, hi + ep.offset)
    if bits is not None and ep.final_clip:
        raise wrapped("a clip follows")
    if bits is not None and bits < 8:
        raise wrapped(f"only {bits} exact bits reach the int8 store")
    if not ep.final_clip and (np.any(lo < -128) or np.any(hi > 127)):
        raise ScheduleError(
            "the epilogue narrows to int8 without a clip and its values may leave int8 on these "
            "weights (the narrowing wraps): the max pool is not taken on the accumulators"
        )


@dataclass(frozen=True)
class PoolTile:
    """A tile's share of the pool and where it works in the accumulator: its bands of pooled
    rows and columns (`rows`, `cols`), its `blocks` channel blocks of convolution accumulators
    at `acc` (each block's rows after the one before's, a row `cols.rows` wide), the pooled
    rows it writes at `out` (the same, `cols.count` wide; they hold zeros), and the rows handed
    between tiles: the convolution row above the band (`row_in`, a block's after the one
    before's; read where `rows.carried`) and the window-row maxima at the column left of the
    tile (`col_in`, one per pooled row a block; read where `cols.carried`), and where this
    tile hands its last row down and its last column's maxima right (None: no tile takes
    them)."""

    rows: Band
    cols: Band
    blocks: int
    acc: int
    out: int
    row_in: int
    col_in: int
    row_out: int | None
    col_out: int | None


def window_max(
    cfg: HwConfig, kernels: UopKernels, pool: MaxPool2d, t: PoolTile
) -> tuple[list[Alu], list[Alu]]:
    """The ALU instructions taking a tile's window maxima (`PoolTile`): rows first, each
    window's anchor row taking the max of its other rows in place, every column of the tile,
    then each pooled row from its anchor row's columns, the anchor column first (onto the
    zeros); and, apart, those copying the row and the column maxima the next tiles are handed
    onto zeros. A copy reads this tile's bank and writes the taker's, where the GEMM core
    works (it waits for the step there: the later the better), and must not be the last ALU
    instruction before the GEMM core turns to this tile's bank (verify's unit-overlap rule):
    the caller places them."""
    ya, xa = axes(pool)
    ra, ca = ya.anchor, xa.anchor
    width, rows, cols = t.cols.rows, t.rows, t.cols
    block = rows.rows * width  # a block's accumulators
    pooled = rows.count * cols.count
    alus = []

    def alu(op: AluOp, dst: int, src: int, steps: tuple[int, int], outer, inner, **imm) -> None:
        uops = [Uop(dst + b * steps[0], src + b * steps[1]) for b in range(t.blocks)]
        key = ("pool", op, tuple(uops), outer, inner, tuple(imm.items()))
        alus.append(Alu(op=op, **imm, **kernels.loop(key, uops, outer, inner)))

    def row(window: int, tap: int) -> int:  # the first accumulator of a convolution row
        return t.acc + (ya.at(window, tap) - rows.lo) * width

    def col(window: int, tap: int) -> int:  # the column within the tile
        return xa.at(window, tap) - cols.lo

    down, across = ya.stride * width, (width, 1, 1, 0)
    for tap in range(ya.kernel):  # rows, into each window's anchor row
        first, count = ya.inside(tap, rows.first, rows.count)
        if tap == ra or not count:
            continue
        if ya.at(first, tap) < rows.lo:  # the row above the band: handed down
            alu(AluOp.MAX, row(first, ra), t.row_in, (block, width), across, ONCE)
            first, count = first + 1, count - 1
        if count:
            alu(AluOp.MAX, row(first, ra), row(first, tap), (block, block),
                (count, down, down, 0), across)  # fmt: skip
    anchors = row(rows.first, ra)
    for tap in [ca] + [k for k in range(xa.kernel) if k != ca]:  # columns, into pooled rows
        first, count = xa.inside(tap, cols.first, cols.count)
        if not count:
            continue
        op = AluOp.ADD if tap == ca else AluOp.MAX
        if xa.at(first, tap) < cols.lo:  # the column left of the tile: handed right
            alu(op, t.out, t.col_in, (pooled, rows.count),
                (rows.count, cols.count, 1, 0), ONCE)  # fmt: skip
            first, count = first + 1, count - 1
        if count:
            alu(op, t.out + first - cols.first, anchors + col(first, tap), (pooled, block),
                (rows.count, cols.count, down, 0), (count, 1, xa.stride, 0))  # fmt: skip
    maxima, alus = alus, []
    clear = {"use_imm": True, "imm": -cfg.acc_bits}
    if t.row_out is not None:  # the band's last row (no window's anchor), for the band below
        at = t.row_out
        alu(AluOp.SHR, at, at, (width, width), across, ONCE, **clear)
        alu(AluOp.ADD, at, t.acc + (rows.rows - 1) * width, (width, block), across, ONCE)
    if t.col_out is not None:  # the anchor rows' last column, for the tile to the right
        at, each = t.col_out, (rows.count, 1, down, 0)
        alu(AluOp.SHR, at, at, (rows.count, rows.count), each, ONCE, **clear)
        alu(AluOp.ADD, at, anchors + width - 1, (rows.count, block), each, ONCE)
    return maxima, alus


class PoolLowering:
    """The pool's share of a scheduled convolution's lowering (`lowering._ConvEmitter`): which
    bands a tile takes, where its pool works in the accumulator, and its instructions after its
    GEMMs."""

    def __init__(
        self, cfg: HwConfig, low: MappedConv, s: ConvSchedule, slots: Slots, kernels: UopKernels
    ):
        self.cfg, self.low, self.slots, self.kernels = cfg, low, slots, kernels
        self.row_bands, self.col_bands = pool_bands(low, s)

    def bands(self, tile: Tile) -> tuple[int, Band, int, Band]:
        """The index and band of pooled rows, and of pooled columns, whose convolution rows and
        columns `tile` computes."""
        i = next(k for k, b in enumerate(self.row_bands) if b.lo == tile.oh0)
        j = next(k for k, b in enumerate(self.col_bands) if b.lo == tile.ow0)
        return i, self.row_bands[i], j, self.col_bands[j]

    def pooled(self, tile: Tile) -> Tile:
        """The pooled rows of `tile`'s bands, as a tile of the output."""
        _, rows, _, cols = self.bands(tile)
        return Tile(tile.nb, tile.oc0, tile.toc, rows.first, rows.count, cols.first, cols.count)

    def finish(self, tile: Tile, a: int, epilogue: Callable, store: Callable) -> list:
        """The window maxima of `tile` (in slot `a`), the rows handed on, then `epilogue` and
        `store` (the emitter's, on a tile of the output from a row of the slot) of the pooled
        rows."""
        pooled, at = self.pooled(tile), tile.toc * tile.pix
        maxima, handed = window_max(self.cfg, self.kernels, self.low.pool, self.tile(tile, a))
        after = epilogue(pooled, a, at)
        if not after:  # (on the unit) the copies late, but not last: `window_max`
            maxima, after = maxima[:-1], maxima[-1:]
        return maxima + handed + after + store(pooled, a, at)

    def tile(self, tile: Tile, a: int) -> PoolTile:
        """Where `tile`'s pool works: its rows in slot `a`, then its pooled rows. What tiles
        hand on is kept after the parameters in the reserved rows of the bank of the tile that
        takes it (`schedule.budget`), so that an ALU instruction reads no other bank while the
        GEMM core may work there: each column band's last row, `tile_oc` blocks of it where the
        band starts, then the window-row maxima at a tile's last column, in two places taken in
        turn (with one accumulator slot a tile's own is its taker's). The order is oc_outer: a
        channel tile's row bands in turn, each one's column bands in turn, so the tile to the
        right is the next, and the one below, a row of column bands later."""
        i, rows, j, cols = self.bands(tile)
        n, params = len(self.slots.acc), self.slots.params

        def kept(slot: int) -> int:  # the rows handed to the tile in `slot`
            return params[slot % n % len(params)] + self.low.param_rows()

        below, right = (a + len(self.col_bands)) % n, (a + 1) % n
        down = i + 1 < len(self.row_bands) and self.row_bands[i + 1].carried
        across = j + 1 < len(self.col_bands) and self.col_bands[j + 1].carried
        acc, ow = self.slots.acc[a], self.low.ow
        return PoolTile(
            rows=rows,
            cols=cols,
            blocks=tile.toc,
            acc=acc,
            out=acc + tile.toc * tile.pix,
            row_in=kept(a) + tile.toc * cols.lo,
            col_in=kept(a) + tile.toc * (ow + j % 2 * rows.count),
            row_out=kept(below) + tile.toc * cols.lo if down else None,
            col_out=kept(right) + tile.toc * (ow + (j + 1) % 2 * rows.count) if across else None,
        )
