"""The default schedule's first half (no tuning): an analytic estimate of the pipeline ranks
every legal schedule; the pipeline (compiler/pipeline.py) then builds the best few and keeps
the one the cycle model finds fastest.

The estimate: compute-stage work (GEMM micro-ops, accumulator resets, epilogue ALU passes,
per-instruction overheads), load-stage work (per-LOAD latency, padding, data beats) and DRAM
port occupancy, counting the loads residency saves. Double-buffered schedules take the largest
of the three plus one step of fill; single-buffered ones take their sum.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.compiler import schedule as S
from tilecraft.compiler.mapping import MappedConv
from tilecraft.compiler.tensorize import merged_blocks
from tilecraft.compiler.tile_work import tile_work
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.ops import ConvSchedule, LoopOrder
from tilecraft.sim.timing import Timing

# the bus's load beyond the transfers' own beats and gaps (1.03-1.07 rank ResNet-18's layers alike)
BUS_SLACK = 1.0


@dataclass(frozen=True)
class Ranked:
    schedule: ConvSchedule
    estimate: float  # cycles


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def estimate(cfg: HwConfig, low: MappedConv, s: ConvSchedule, t: Timing) -> float:
    """Cycles the schedule should take, from per-tile work on each unit, stage and the bus."""
    kh, kw = low.kernel
    kk = kh * kw
    ocs, ohs, ows = _ceil(low.ocb, s.tile_oc), _ceil(low.oh, s.tile_oh), _ceil(low.ow, s.tile_ow)
    steps = _ceil(low.icb, s.tile_ic)
    n_tiles = low.nbb * ocs * ohs * ows
    pix = s.tile_oh * s.tile_ow
    # a LOAD/STORE's own time besides its beats: decode and plan, then the DRAM's latency (the
    # load stage runs one transfer at a time, so nothing hides it)
    fixed = t.dma_overhead + t.dma_plan + t.dram_latency + 1
    work = tile_work(cfg, low, s, t)
    step, gemm, alu, zero = work.step, work.gemm, work.alu, work.zero
    if work.zero_on_gemm:
        gemm, alu = gemm + zero, alu - zero
    eb_i, eb_w, eb_o = (cfg.elem_bytes(b) for b in ("inp", "wgt", "out"))
    wr, wc = S.window(low, s.tile_oh, s.tile_ow)
    row_stride = low.stride[0] * low.w if low.row_skip else low.w
    merged = low.pad[0] == 0 and s.tile_oh == low.oh and merged_blocks(low, wr, 0, row_stride)
    # bus cycles (beats, and the DRAM's gap after each burst) of one transfer of each kind
    whole_rows = wc == low.w and not low.row_skip
    inp_bus = t.transfer(*((1, wr * wc * eb_i) if whole_rows else (wr, wc * eb_i)))
    wgt_bus = t.transfer(s.tile_oc, s.tile_ic * kk * eb_w)
    whole = s.tile_ow == low.ow
    out_bus = t.transfer(*((s.tile_oc, pix * eb_o) if whole else (s.tile_oc * s.tile_oh,
                                                                s.tile_ow * eb_o)))  # fmt: skip
    inp_loads = (1 if merged else s.tile_ic) * fixed + s.tile_ic * (
        inp_bus + (wr * wc - s.tile_oh * s.tile_ow) // 4
    )
    wgt_loads = fixed + wgt_bus
    inp_n = wgt_n = n_tiles * steps
    if steps == 1 and s.double_buffer:
        if s.order == LoopOrder.OC_OUTER:
            wgt_n = low.nbb * ocs
        else:
            inp_n = low.nbb * ohs * ows
    stores = 1 if s.tile_ow == low.ow else s.tile_oc
    store = stores * fixed + out_bus
    bus = inp_n * s.tile_ic * inp_bus + wgt_n * wgt_bus + n_tiles * out_bus
    load = inp_n * inp_loads + wgt_n * wgt_loads
    if not s.double_buffer:
        return n_tiles * (gemm + alu + store) + load
    # Per tile: the units' work, and the chain through the accumulator slot the next tile
    # reuses: epilogue of tile t-1 (under tile t's GEMMs) -> its store -> zeroing -> GEMMs.
    chain = max(gemm - step, alu - zero) + store + zero
    period = max(gemm, alu, chain / (s.acc_slots - 1))
    fill = inp_loads + wgt_loads + alu + store
    # the load stage waits, too, while the stores' beats hold the DRAM port
    load += n_tiles * out_bus
    return max(n_tiles * period, load, bus * BUS_SLACK) + fill


def rank(cfg: HwConfig, low: MappedConv) -> list[Ranked]:
    """Every legal schedule, fastest estimate first (ties: the space's order)."""
    t = Timing.from_config(cfg)
    ranked = [Ranked(s, estimate(cfg, low, s, t)) for s in S.space(cfg, low)]
    if not ranked:
        raise ScheduleError(
            f"no schedule fits {low.describe()} on {cfg.tag}: even the smallest tiles break "
            + "; ".join(S.violations(cfg, low, ConvSchedule(1, 1, 1, 1)))
        )
    ranked.sort(key=lambda r: r.estimate)  # stable
    return ranked
