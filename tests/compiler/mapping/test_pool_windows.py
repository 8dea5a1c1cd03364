"""A max pool's windows over a conv's output, as tiles take them: bands cover every row once,
a band whose first window reaches above it is handed that one row, and every window has an
anchor inside its band that no other window reads."""

import pytest

from tilecraft.compiler.mapping.pool_windows import Axis, axes, band_rows, bands, problems
from tilecraft.ops import Conv2d, Epilogue, MaxPool2d


@pytest.mark.parametrize(
    "size, kernel, stride, pad",
    [(112, 3, 2, 1), (15, 3, 2, 1), (13, 3, 2, 0), (12, 2, 2, 0), (17, 3, 3, 1), (9, 1, 2, 0)],
)
def test_bands_cover_every_row_once_and_hand_on_the_row_they_share(size, kernel, stride, pad):
    outputs = (size + 2 * pad - kernel) // stride + 1
    axis = Axis(size, kernel, stride, pad, outputs)
    for per_band in (1, 2, 3, 8):
        got = bands(axis, per_band)
        assert [b.first for b in got] == list(range(0, outputs, per_band))
        assert got[0].lo == 0 and all(a.hi == b.lo for a, b in zip(got, got[1:]))
        for b in got:
            windows = range(b.first, b.first + b.count)
            reads = {axis.at(g, t) for g in windows for t in range(kernel)}
            reads = {r for r in reads if 0 <= r < size}
            assert max(reads) == b.hi - 1  # the band computes up to its last window's last row
            above = sorted(r for r in reads if r < b.lo)
            assert above == ([b.lo - 1] if b.carried else [])  # at most the row handed on
            anchor = axis.anchor
            assert all(b.lo <= axis.at(g, anchor) < b.hi for g in windows)
        others = {axis.at(g, t) for g in range(outputs) for t in range(kernel) if t != anchor}
        assert not others & {axis.at(g, anchor) for g in range(outputs)}  # read by none else
        assert band_rows(axis, per_band) == max(b.rows for b in got)


def test_resnets_pool_hands_one_row_down_and_one_column_right():
    rows, cols = axes(MaxPool2d(1, 64, 112, 112, kernel=3, stride=2, pads=(1, 1, 1, 1)))
    assert rows.anchor == 1 and rows.shared == 1
    first, second = bands(rows, 4)[:2]
    assert (first.lo, first.hi, first.carried) == (0, 8, False)
    assert (second.lo, second.hi, second.carried) == (8, 16, True)


def test_what_no_band_can_take_is_named():
    conv = Conv2d(1, 8, 10, 10, 8, kernel=3, pad=1)
    pool = MaxPool2d(1, 8, 10, 10, kernel=3, stride=1, pads=(1, 1, 1, 1), pad_value=-128)
    assert problems(conv, Epilogue(), pool) == [
        "the pool's windows share 2 rows (kernel (3, 3), stride (1, 1)): a tile is handed at "
        "most one by the tile before",
        "the pool's windows share 2 columns (kernel (3, 3), stride (1, 1)): a tile is handed at "
        "most one by the tile before",
    ]
    ok = MaxPool2d(1, 8, 10, 10, kernel=3, stride=2, pads=(1, 1, 1, 1), pad_value=-128)
    assert problems(conv, Epilogue(), ok) == []
    assert "residual" in problems(conv, Epilogue(residual=True), ok)[0]
    assert "not a dense's" in problems(type("Dense", (), {"kind": "dense"})(), Epilogue(), ok)[0]
