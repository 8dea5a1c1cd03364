"""The default schedule's first half (no tuning): an analytic estimate of the pipeline ranks
every legal schedule; the pipeline (compiler/operator/pipeline.py) then builds the best few
and keeps the one the cycle model finds fastest.

The estimate: compute-stage work (GEMM micro-ops, accumulator resets, epilogue ALU passes,
per-instruction overheads), load-stage work (per-LOAD latency, padding, data beats) and DRAM
port occupancy, counting the loads residency saves. Double-buffered schedules take the largest
of the three plus one step of fill; single-buffered ones take their sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.compiler.mapping.blocks import MappedConv
from tilecraft.compiler.operator import schedule as S
from tilecraft.compiler.operator.tensorize import merged_blocks
from tilecraft.compiler.operator.tile_work import TileWork, tile_work
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.timing import Timing
from tilecraft.ops import ConvSchedule, LoopOrder

# the bus's load beyond the transfers' own beats and gaps (1.03-1.07 rank ResNet-18's layers alike)
BUS_SLACK = 1.0


@dataclass(frozen=True)
class Ranked:
    schedule: ConvSchedule
    estimate: float  # cycles


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class _TileCosts:
    """What `estimate` needs that depends on the tile sizes alone (not on the loop order,
    buffering or accumulator slots), worked out once per tiling by `rank`."""

    n_tiles: int
    steps: int
    work: TileWork  # the units' work per tile
    inp_bus: int  # bus cycles of one input-block load
    wgt_bus: int
    out_bus: int  # of one tile's stores
    inp_loads: int  # load-stage cycles of one step's input loads
    wgt_loads: int
    store: int  # store-stage cycles of one tile


def _tile_costs(cfg: HwConfig, low: MappedConv, s: ConvSchedule, t: Timing) -> _TileCosts:
    ocs, (ohs, ows) = _ceil(low.ocb, s.tile_oc), _spatial(low, s)
    rows, cols = S.tile_shape(low, s)  # the convolution rows and columns a tile computes
    out_rows, out_cols = S.pooled(low, s) if low.pool else (rows, cols)  # what it stores
    pix = out_rows * out_cols
    # a LOAD/STORE's own time besides its beats: decode and plan, then the DRAM's latency (the
    # load stage runs one transfer at a time, so nothing hides it)
    fixed = t.dma_overhead + t.dma_plan + t.dram_latency + 1
    work = tile_work(cfg, low, s, t)
    if work.zero_on_gemm:
        work = TileWork(work.step, work.gemm + work.zero, work.alu - work.zero, work.zero)
    eb_i, eb_w, eb_o = (cfg.elem_bytes(b) for b in ("inp", "wgt", "out"))
    wr, wc = S.window(low, rows, cols)
    row_stride = low.stride[0] * low.w if low.row_skip else low.w
    merged = low.pad[0] == 0 and rows == low.oh and merged_blocks(low, wr, 0, row_stride)
    # bus cycles (beats, and the DRAM's gap after each burst) of one transfer of each kind
    whole_rows = wc == low.w and not low.row_skip
    inp_bus = t.transfer(*((1, wr * wc * eb_i) if whole_rows else (wr, wc * eb_i)))
    wgt_bus = t.transfer(s.tile_oc, s.tile_ic * low.wgt_taps * eb_w)
    whole = out_cols == (low.pool or low).ow
    out_bus = t.transfer(
        *((s.tile_oc, pix * eb_o) if whole else (s.tile_oc * out_rows, out_cols * eb_o))
    )
    inp_loads = (1 if merged else s.tile_ic) * fixed + s.tile_ic * (
        inp_bus + (wr * wc - rows * cols) // 4
    )
    stores = 1 if whole else s.tile_oc
    return _TileCosts(
        n_tiles=low.nbb * ocs * ohs * ows,
        steps=_ceil(low.icb, s.tile_ic),
        work=work,
        inp_bus=inp_bus,
        wgt_bus=wgt_bus,
        out_bus=out_bus,
        inp_loads=inp_loads,
        wgt_loads=fixed + wgt_bus,
        store=stores * fixed + out_bus,
    )


def _spatial(low: MappedConv, s: ConvSchedule) -> tuple[int, int]:
    """Tiles down the rows and across the columns: bands of pooled ones under a max pool."""
    if low.pool:
        tp, tq = S.pooled(low, s)
        return _ceil(low.pool.oh, tp), _ceil(low.pool.ow, tq)
    return _ceil(low.oh, s.tile_oh), _ceil(low.ow, s.tile_ow)


def slot_misses(low: MappedConv, s: ConvSchedule) -> tuple[int, int]:
    """(input windows, weight tiles) the lowering loads: its slot caches (`lowering.SlotCache`,
    least recently used, `s.slots` slots) keep a window or weight tile that the next tiles use
    again. The tiles go (batch, then output channels, then rows and columns, or the spatial
    tiles outside the channels), each through `steps` reduction steps, so the keys cycle: a
    cycle no longer than the slots misses once, a longer one misses every time."""
    ocs, (ohs, ows) = _ceil(low.ocb, s.tile_oc), _spatial(low, s)
    spatial = ohs * ows
    steps = _ceil(low.icb, s.tile_ic)
    every = low.nbb * ocs * spatial * steps
    if s.order == LoopOrder.OC_OUTER:  # per batch block: each channel tile's spatial tiles
        # weights (oc, step): the same through a channel tile's spatial tiles; all of them
        # stay across batch blocks when every channel tile's steps fit
        if ocs * steps <= s.slots:
            wgt = ocs * steps
        else:
            wgt = low.nbb * ocs * steps if steps <= s.slots else every
        # windows (batch, spatial, step): the same through the channel tiles when they fit
        inp = low.nbb * spatial * steps if spatial * steps <= s.slots else every
    else:  # per batch block and spatial tile: each channel tile
        wgt = ocs * steps if ocs * steps <= s.slots else every
        inp = low.nbb * spatial * steps if steps <= s.slots else every
    return inp, wgt


def estimate(
    cfg: HwConfig, low: MappedConv, s: ConvSchedule, t: Timing, costs: _TileCosts | None = None
) -> float:
    """Cycles the schedule should take, from per-tile work on each unit, stage and the bus.
    `costs`: `_tile_costs` of its tile sizes, when known."""
    c = costs or _tile_costs(cfg, low, s, t)
    n_tiles = c.n_tiles
    step, gemm, alu, zero = c.work.step, c.work.gemm, c.work.alu, c.work.zero
    inp_n, wgt_n = slot_misses(low, s)
    bus = inp_n * s.tile_ic * c.inp_bus + wgt_n * c.wgt_bus + n_tiles * c.out_bus
    load = inp_n * c.inp_loads + wgt_n * c.wgt_loads
    if not s.double_buffer:
        return n_tiles * (gemm + alu + c.store) + load
    # Per tile: the units' work, and the chain through the accumulator slot the next tile
    # reuses: epilogue of tile t-1 (under tile t's GEMMs) -> its store -> zeroing -> GEMMs.
    chain = max(gemm - step, alu - zero) + c.store + zero
    period = max(gemm, alu, chain / (s.acc_slots - 1))
    if low.pool and c.steps == 1:  # the rows a pool hands on are copied into the next tile's
        # bank, where its one GEMM runs: the copies wait for it, the epilogue behind them
        # (ResNet-18's conv_2 and its pool: 511 K estimated, 837 K measured, without this)
        period = max(period, gemm + alu - zero)
    fill = c.inp_loads + c.wgt_loads + alu + c.store
    # each transfer stage waits, too, while the other's beats hold the DRAM port (ResNet-18's
    # C4, 4 4 28 1 spatial-outer: four 28-row stores a tile, 34.5 K estimated without the
    # store stage, 41.3 K measured)
    store = n_tiles * c.store + (bus - n_tiles * c.out_bus)
    load += n_tiles * c.out_bus
    compute = n_tiles * period + _change_stalls(c, inp_n, wgt_n)
    return max(compute, load, store, bus * BUS_SLACK) + fill


def _change_stalls(c: _TileCosts, inp_n: int, wgt_n: int) -> int:
    """Where a resident operand changes (a new channel tile's weights, a new spatial tile's
    windows), each step of that tile loads it and the other operand into the one slot the
    previous step freed, within one step's GEMMs: what does not fit stalls the core (ResNet-18's
    conv_45, 1 2 4 14 spatial-outer: 23.5 K cycles measured above the steady-state estimate,
    14 changes x 2 steps x 835)."""
    every = c.n_tiles * c.steps
    stalls = 0
    for resident, loads, other_n, other_loads in (
        (wgt_n, c.wgt_loads, inp_n, c.inp_loads),
        (inp_n, c.inp_loads, wgt_n, c.wgt_loads),
    ):
        if resident < every:  # `resident` loads: a change's steps, each with the other's
            step_loads = loads + (other_loads if other_n == every else 0)
            stalls += resident * max(0, step_loads - c.work.step)
    return stalls


def rank(cfg: HwConfig, low: MappedConv) -> list[Ranked]:
    """Every legal schedule, fastest estimate first (ties: the space's order)."""
    t = Timing.from_config(cfg)
    costs: dict[tuple[int, int, int, int], _TileCosts] = {}
    ranked = []
    for s in S.space(cfg, low):
        tiles = (s.tile_oc, s.tile_ic, s.tile_oh, s.tile_ow)
        if tiles not in costs:
            costs[tiles] = _tile_costs(cfg, low, s, t)
        ranked.append(Ranked(s, estimate(cfg, low, s, t, costs[tiles])))
    if not ranked:
        raise ScheduleError(
            f"no schedule fits {low.describe()} on {cfg.tag}: even the smallest tiles break "
            + "; ".join(S.violations(cfg, low, ConvSchedule(1, 1, 1, 1)))
        )
    ranked.sort(key=lambda r: r.estimate)  # stable
    return ranked
