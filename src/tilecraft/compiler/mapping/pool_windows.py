"""Where a max pool's windows lie on a convolution's output, when it is taken on the
convolution's accumulators (operator.pool_epilogue): per dimension (`Axis`) the rows (or
columns) each window reads and the tap every window has inside its tile (its anchor), the bands
of pooled rows (or columns) a tile takes with the convolution rows it computes and the one row
it is handed by the band before (`Band`), and why a pool cannot be taken so (`problems`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tilecraft.ops import Conv2d, Epilogue, MaxPool2d

NEG_INF = -128  # the pad value that stands for ONNX's -inf on int8


@dataclass(frozen=True)
class Axis:
    """One dimension of a pool over a convolution's output: `size` rows (or columns) in, the
    pool's kernel, stride and leading padding, and `outputs` windows."""

    size: int
    kernel: int
    stride: int
    pad: int
    outputs: int

    def at(self, window: int, tap: int) -> int:
        """The row (or column) tap `tap` of window `window` reads (may be outside the image)."""
        return self.stride * window + tap - self.pad

    @property
    def shared(self) -> int:
        """Rows two neighbouring windows share."""
        return max(0, self.kernel - self.stride)

    @property
    def anchor(self) -> int | None:
        """The tap through which each window takes its maximum, or None: inside the image for
        every window, no other window's tap (the maxima are taken in place), and inside each
        band (taps before it may be the band before's last row: `Band.carried`)."""
        for a in range(self.pad, self.kernel):
            if self.at(self.outputs - 1, a) >= self.size:
                break
            if a < self.stride and a >= self.shared:
                return a
        return None

    def inside(self, tap: int, first: int, count: int) -> tuple[int, int]:
        """(first window, windows) of windows first..first+count-1 whose tap `tap` is inside the
        image: a contiguous run."""
        ok = [g for g in range(first, first + count) if 0 <= self.at(g, tap) < self.size]
        return (ok[0], len(ok)) if ok else (first, 0)

    def last_read(self, window: int) -> int:
        """One past the last row window `window` reads inside the image."""
        return min(self.size, self.at(window, self.kernel - 1) + 1)


def axes(pool: MaxPool2d) -> tuple[Axis, Axis]:
    """The pool's rows and columns."""
    (kh, kw), (sh, sw), (pt, pl, _, _) = pool.kernel, pool.stride, pool.pads
    return Axis(pool.h, kh, sh, pt, pool.oh), Axis(pool.w, kw, sw, pl, pool.ow)


def problems(op, epilogue: Epilogue, pool: MaxPool2d) -> list[str]:
    """Why `pool` cannot be taken on `op`'s accumulators whatever the parameters ([] if it
    can): `check_monotone` then decides with them."""
    if not isinstance(op, Conv2d):
        return [f"a max pool is taken on a conv2d's accumulators, not a {op.kind}'s"]
    out = []
    if epilogue.residual:
        out.append("the epilogue adds a residual, which a maximum does not commute with")
    if pool.input_shape != op.output_shape:
        out.append(
            f"the pool's input {pool.input_shape} is not the conv's output {op.output_shape}"
        )
        return out
    if any(pool.pads) and pool.pad_value != NEG_INF:
        out.append(
            f"the pool's padding holds {pool.pad_value}, which takes part in the maximum "
            f"(only {NEG_INF}, ONNX's -inf, never does)"
        )
    for name, axis in zip(("rows", "columns"), axes(pool)):
        if axis.shared > 1:
            out.append(
                f"the pool's windows share {axis.shared} {name} (kernel {pool.kernel}, stride "
                f"{pool.stride}): a tile is handed at most one by the tile before"
            )
        elif axis.anchor is None:
            out.append(
                f"the pool's windows have no {name[:-1]} inside the image that no other window "
                f"reads (kernel {pool.kernel}, stride {pool.stride}, pads {pool.pads})"
            )
    return out


@dataclass(frozen=True)
class Band:
    """A tile's share of one dimension of the pool: pooled rows (or columns) `first`..
    `first+count-1`, from convolution rows `lo`..`hi-1`, which the tile computes, and, where its
    first window's first row is the band before's last (`carried`), that row, which the band
    before hands on."""

    first: int
    count: int
    lo: int
    hi: int
    carried: bool

    @property
    def rows(self) -> int:
        return self.hi - self.lo


@functools.cache
def bands(axis: Axis, per_band: int) -> tuple[Band, ...]:
    """The pool's outputs along `axis` in bands of `per_band` (the last maybe fewer), each
    computing the convolution rows after the band before's up to its last window's last."""
    out, lo = [], 0
    for first in range(0, axis.outputs, per_band):
        count = min(per_band, axis.outputs - first)
        hi = axis.last_read(first + count - 1)
        out.append(Band(first, count, lo, hi, 0 <= axis.at(first, 0) < lo))
        lo = hi
    return tuple(out)


def band_rows(axis: Axis, per_band: int) -> int:
    """The most convolution rows (or columns) a band of `per_band` outputs computes."""
    return max(b.rows for b in bands(axis, per_band))
