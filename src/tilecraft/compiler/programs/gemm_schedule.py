"""Planning the example GEMM's tiles: the largest tiles that fit the scratchpads (halves of them
with overlap) under a simple estimate of the pipeline."""

from __future__ import annotations

import itertools

from tilecraft.compiler.operator.schedule import divisors
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import isa_for
from tilecraft.hw.timing import Timing
from tilecraft.ops import GemmTiles


def fits(cfg: HwConfig, t: GemmTiles) -> bool:
    """Whether tiles of (tm, tn, tk) blocks fit the scratchpads (in halves with overlap), the
    micro-op buffer and the GEMM's iteration field."""
    halves = 2 if t.overlap else 1
    return (
        t.tm * t.tk <= cfg.depth("inp") // halves
        and t.tn * t.tk <= cfg.depth("wgt") // halves
        and t.tm * t.tn <= cfg.depth("acc") // halves
        and halves * halves * t.tn * t.tk + halves * t.tn <= cfg.depth("uop")
        and isa_for(cfg).fits("iter_out", t.tm)
    )


def choose_tiles(cfg: HwConfig, mb: int, kb: int, nb: int, overlap: bool) -> GemmTiles:
    """Tiles (in blocks) that fit and minimise a simple estimate of the pipeline: with overlap,
    fill (one DMA) + steps x max(GEMM, DMA) + drain (one GEMM); without, steps x (GEMM + DMA)."""
    timing = Timing.from_config(cfg)
    best = None
    # only sizes that could fit at all: a tile has no more rows than its scratchpad
    rows = max(cfg.depth(b) for b in ("inp", "wgt", "acc"))
    sizes = [[d for d in divisors(n) if d <= rows] for n in (mb, nb, kb)]
    for tm, tn, tk in itertools.product(*sizes):
        tiles = GemmTiles(tm, tn, tk, overlap)
        if not fits(cfg, tiles):
            continue
        gemm = tm * tn * tk + 16  # micro-ops plus a few cycles of instruction overhead
        dma = timing.transfer(tm, tk * cfg.elem_bytes("inp"))
        dma += timing.transfer(tn, tk * cfg.elem_bytes("wgt"))
        dma += 2 * (cfg.dram_latency + timing.insn_overhead)
        steps = (mb // tm) * (nb // tn) * (kb // tk)
        cost = dma + steps * max(gemm, dma) + gemm if overlap else steps * (gemm + dma)
        key = (cost, -tm * tn * tk)
        if best is None or key < best[0]:
            best = (key, tiles)
    if best is None:
        raise ScheduleError(f"no tiling of a {mb}x{kb}x{nb}-block GEMM fits the scratchpads")
    return best[1]
