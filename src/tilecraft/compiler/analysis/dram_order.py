"""The verifier's DRAM ordering rule: a LOAD that reads DRAM bytes an earlier STORE wrote must
start after that STORE completes (raw), and a STORE that overwrites bytes an earlier LOAD reads
must start after that LOAD completes (war), each through stage order or tokens.

Within one layer no LOAD reads what a STORE writes (inputs and outputs are distinct buffers); in
a chained network program the next layer reads what the previous one stored, and the activation
arena reuses bytes, so these orders are what keep a whole-network program correct. Each
instruction's DRAM access is taken as its bounding byte range, which can only over-report.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.analysis.completion import covers


def _spans(acc, attr: str):
    idx, lo, hi, stage = [], [], [], []
    for a in acc:
        ranges = getattr(a, attr)
        if ranges:
            idx.append(a.index)
            lo.append(min(r[0] for r in ranges))
            hi.append(max(r[1] for r in ranges))
            stage.append(a.stage)
    return np.array(idx, np.int64), np.array(lo, np.int64), np.array(hi, np.int64), stage


def dram_order_problem(acc, clocks, lanes, local) -> tuple[int, str, int] | None:
    """(instruction, message, other instruction) for the first unordered pair, else None."""
    w_idx, w_lo, w_hi, w_stage = _spans(acc, "dram_writes")
    r_idx, r_lo, r_hi, r_stage = _spans(acc, "dram_reads")
    if not len(w_idx) or not len(r_idx):
        return None
    w_stage_arr = np.array([int(s) for s in w_stage])
    r_stage_arr = np.array([int(s) for s in r_stage])
    for k, lo, hi, stage in zip(r_idx, r_lo, r_hi, r_stage):
        hit = (w_idx < k) & (w_lo < hi) & (lo < w_hi) & (w_stage_arr != int(stage))
        if hit.any():
            g = int(w_idx[hit].max())  # stores complete in order: the latest covers the rest
            if not covers(clocks[k], lanes[g], local[g]):
                return int(k), "reads DRAM bytes stored by", g
    for k, lo, hi, stage in zip(w_idx, w_lo, w_hi, w_stage):
        hit = (r_idx < k) & (r_lo < hi) & (lo < r_hi) & (r_stage_arr != int(stage))
        for s in np.unique(r_stage_arr[hit]):
            g = int(r_idx[hit & (r_stage_arr == s)].max())
            if not covers(clocks[k], lanes[g], local[g]):
                return int(k), "overwrites DRAM bytes still to be read by", g
    return None
