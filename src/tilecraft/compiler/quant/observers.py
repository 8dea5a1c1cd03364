"""Observers: from the values a tensor took during calibration, the clipping threshold T of a
symmetric int8 scale (scale = T / 127).

- `minmax`: the largest |x| seen.
- `percentile`: the given percentile of |x| (99.99 by default): ignores rare outliers.
- `entropy`: TensorRT's KL-divergence calibration: the threshold whose 128-level quantized
  histogram loses the least information against the 2048-bin reference histogram of |x|.

Percentile and entropy read histograms over [0, max |x|], so calibration passes the data twice:
once for the maxima, once for the histograms.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

BINS = 2048
LEVELS = 128


class Observer(str, Enum):
    MINMAX = "minmax"
    PERCENTILE = "percentile"
    ENTROPY = "entropy"
    MODEL = "model"  # the scales a quantized (QDQ) model brings

    @property
    def needs_histogram(self) -> bool:
        return self is not Observer.MINMAX


def histogram(x: np.ndarray, top: float) -> np.ndarray:
    top = top if top > 0 else 1.0
    return np.histogram(np.abs(x), bins=BINS, range=(0.0, top))[0].astype(np.int64)


def percentile_threshold(hist: np.ndarray, top: float, percentile: float = 99.99) -> float:
    total = hist.sum()
    if total == 0 or top <= 0:
        return top
    cdf = np.cumsum(hist) / total
    i = int(np.searchsorted(cdf, percentile / 100.0))
    return float(top * (min(i, BINS - 1) + 1) / BINS)


def entropy_threshold(hist: np.ndarray, top: float) -> float:
    """The |x| threshold minimising KL(P || Q) (P: the histogram clipped at the threshold, outliers
    folded into its last bin; Q: P quantized to 128 levels and expanded back)."""
    if hist.sum() == 0 or top <= 0:
        return top
    hist = hist.astype(np.float64)
    best, best_kl = BINS, np.inf
    for i in range(LEVELS, BINS + 1, 16):
        p = hist[:i].copy()
        p[-1] += hist[i:].sum()
        nonzero = hist[:i] > 0
        # quantize the i bins into LEVELS groups, spread each group's mass over its non-empty bins
        edges = np.linspace(0, i, LEVELS + 1).astype(int)
        q = np.zeros(i)
        for lo, hi in zip(edges[:-1], edges[1:]):
            mass = hist[lo:hi].sum()
            n = nonzero[lo:hi].sum()
            if n:
                q[lo:hi] = np.where(nonzero[lo:hi], mass / n, 0.0)
        keep = p > 0
        ps, qs = p[keep] / p.sum(), q[keep]
        if np.any(qs == 0):
            qs = np.where(qs == 0, 1e-12, qs)
        qs = qs / q.sum()
        kl = float(np.sum(ps * np.log(ps / qs)))
        if kl < best_kl:
            best, best_kl = i, kl
    return float(top * best / BINS)


def threshold(observer: Observer, top: float, hist: np.ndarray | None) -> float:
    if observer is Observer.MINMAX or hist is None:
        return top
    if observer is Observer.PERCENTILE:
        return percentile_threshold(hist, top)
    return entropy_threshold(hist, top)
