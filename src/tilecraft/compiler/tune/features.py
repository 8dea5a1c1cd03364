"""Features of a schedule for the cost model: what decides its cycles, computed without
building it. Tile sizes and loop trip counts (log2), the loop order and buffering, scratchpad
occupancy, the per-tile work of the GEMM core and the ALU, DMA bytes per buffer, and the
analytic estimate the default schedule ranks by (and its parts): the model learns where the
estimate is wrong."""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.operator import schedule as S
from tilecraft.compiler.operator.heuristic import estimate
from tilecraft.compiler.operator.tile_work import tile_work
from tilecraft.hw.timing import Timing
from tilecraft.ops import ConvSchedule, LoopOrder

NAMES = (
    "log_tile_oc",
    "log_tile_ic",
    "log_tile_oh",
    "log_tile_ow",
    "oc_outer",
    "double_buffer",
    "acc_slots",
    "log_oc_trips",
    "log_ic_steps",
    "log_oh_trips",
    "log_ow_trips",
    "log_tiles",
    "inp_window",
    "halo_ratio",
    "wgt_tile",
    "acc_tile",
    "log_gemm_per_tile",
    "log_alu_per_tile",
    "alu_over_gemm",
    "log_inp_bytes",
    "log_wgt_bytes",
    "log_out_bytes",
    "log_estimate",
    "ic_resident",
)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def features(task, schedules: list[ConvSchedule] | None = None) -> np.ndarray:
    """One row of `NAMES` per schedule (all of the task's space by default)."""
    cfg, low = task.config, task.mapped
    t = Timing.from_config(cfg)
    kh, kw = low.kernel
    rows = []
    for s in schedules if schedules is not None else task.space:
        ocs, ohs, ows = (
            _ceil(low.ocb, s.tile_oc),
            _ceil(low.oh, s.tile_oh),
            _ceil(low.ow, s.tile_ow),
        )
        steps = _ceil(low.icb, s.tile_ic)
        tiles = low.nbb * ocs * ohs * ows
        wr, wc = S.window(low, s.tile_oh, s.tile_ow)
        work = tile_work(cfg, low, s, t)
        pix = s.tile_oh * s.tile_ow
        eb_i, eb_w, eb_o = (cfg.elem_bytes(b) for b in ("inp", "wgt", "out"))
        inp = tiles * steps * s.tile_ic * wr * wc * eb_i
        wgt = tiles * steps * s.tile_oc * s.tile_ic * kh * kw * eb_w
        out = tiles * s.tile_oc * pix * eb_o
        rows.append(
            [
                np.log2(s.tile_oc),
                np.log2(s.tile_ic),
                np.log2(s.tile_oh),
                np.log2(s.tile_ow),
                float(s.order == LoopOrder.OC_OUTER),
                float(s.double_buffer),
                float(s.acc_slots),
                np.log2(ocs),
                np.log2(steps),
                np.log2(ohs),
                np.log2(ows),
                np.log2(tiles),
                s.slots * s.tile_ic * wr * wc / cfg.depth("inp"),
                wr * wc / pix,
                s.slots * s.tile_oc * s.tile_ic * kh * kw / cfg.depth("wgt"),
                s.acc_slots * s.tile_oc * pix / cfg.depth("acc"),
                np.log2(max(work.gemm, 1)),
                np.log2(max(work.alu, 1)),
                work.alu / max(work.gemm, 1),
                np.log2(inp + 1),
                np.log2(wgt + 1),
                np.log2(out + 1),
                np.log2(estimate(cfg, low, s, t)),
                float(steps == 1),
            ]
        )
    return np.asarray(rows, np.float64)
