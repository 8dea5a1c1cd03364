"""Packing logical tensors into the blocked DRAM layouts and back."""

import numpy as np
import pytest

from tilecraft.errors import ProgramError
from tilecraft.hw.config import preset
from tilecraft.runtime import layout as L

CONFIGS = ["default", "2x16x16", "1x16x8"]


@pytest.mark.parametrize("name", CONFIGS)
def test_activation_round_trip_pads_with_zeros(name):
    cfg = preset(name)
    x = np.random.default_rng(0).integers(-128, 128, (3, 20, 4, 5), dtype=np.int8)
    layout = {"pack": "activation", "logical": [3, 20, 4, 5]}
    p = L.pack(cfg, layout, x)
    nb, cb = -(-3 // cfg.batch), -(-20 // cfg.block_in)
    assert p.shape == (nb, cb, 4, 5, cfg.batch, cfg.block_in)
    assert int(np.abs(p.astype(int)).sum()) == int(np.abs(x.astype(int)).sum())
    np.testing.assert_array_equal(L.unpack(cfg, layout, p), x)
    # element (n, c, h, w) sits at block (n//B, c//Bi), lane (n%B, c%Bi)
    assert (
        p[2 // cfg.batch, 17 // cfg.block_in, 3, 4, 2 % cfg.batch, 17 % cfg.block_in]
        == x[2, 17, 3, 4]
    )


def test_weight_round_trips_plain_folded_and_dense():
    cfg = preset("1x16x8")
    w = np.random.default_rng(1).integers(-128, 128, (10, 3, 3, 3), dtype=np.int8)
    for folded in (False, True):
        layout = {"pack": "weight", "logical": [10, 3, 3, 3], "folded": folded}
        np.testing.assert_array_equal(L.unpack(cfg, layout, L.pack(cfg, layout, w)), w)
    m = np.random.default_rng(2).integers(-128, 128, (20, 9), dtype=np.int8)
    layout = {"pack": "weight", "logical": [20, 9], "dense": True}
    p = L.pack(cfg, layout, m)
    assert p.shape == (2, 2, 1, 1, 8, 16)
    np.testing.assert_array_equal(L.unpack(cfg, layout, p), m)


def test_im2col_folds_taps_into_channels():
    x = np.arange(2 * 3 * 5 * 5, dtype=np.int64).reshape(2, 3, 5, 5)
    cols = L.im2col(x, (3, 3), (2, 2), (1, 1))
    assert cols.shape == (2, 27, 3, 3)
    # channel c*9 + kh*3 + kw of pixel (i, j) is x[c, 2i+kh-1, 2j+kw-1], zero outside
    assert cols[1, 2 * 9 + 1 * 3 + 2, 1, 1] == x[1, 2, 2, 3]
    assert cols[0, 0, 0, 0] == 0


@pytest.mark.parametrize("name", CONFIGS)
def test_rows_and_channels(name):
    cfg = preset(name)
    m = np.random.default_rng(3).integers(-128, 128, (7, 20), dtype=np.int8)
    layout = {"pack": "rows", "logical": [7, 20]}
    np.testing.assert_array_equal(L.unpack(cfg, layout, L.pack(cfg, layout, m)), m)
    v = np.arange(11, dtype=np.int32) - 5
    layout = {"pack": "channels", "logical": [11]}
    p = L.pack(cfg, layout, v)
    assert p.shape == (-(-11 // cfg.block_out), cfg.batch, cfg.block_out)
    np.testing.assert_array_equal(L.unpack(cfg, layout, p), v)


def test_bad_layouts_and_shapes_are_refused():
    cfg = preset("default")
    with pytest.raises(ProgramError, match="unknown buffer layout 'tiled'"):
        L.pack(cfg, {"pack": "tiled", "logical": [1]}, np.zeros(1))
    with pytest.raises(ProgramError, match=r"logical shape \(1, 2, 3, 3\) was given shape"):
        L.pack(cfg, {"pack": "activation", "logical": [1, 2, 3, 3]}, np.zeros((1, 2, 3)))
