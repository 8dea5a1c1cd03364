"""Packing logical tensors into the blocked DRAM layouts and back; layouts as strict records."""

import numpy as np
import pytest

from tilecraft.errors import FormatError, ProgramError
from tilecraft.hw.config import preset
from tilecraft.runtime import layout as L
from tilecraft.serial import from_json, to_json

CONFIGS = ["default", "2x16x16", "1x16x8"]


@pytest.mark.parametrize("name", CONFIGS)
def test_activation_round_trip_pads_with_zeros(name):
    cfg = preset(name)
    x = np.random.default_rng(0).integers(-128, 128, (3, 20, 4, 5), dtype=np.int8)
    layout = L.Activation((3, 20, 4, 5))
    p = layout.pack(cfg, x)
    nb, cb = -(-3 // cfg.batch), -(-20 // cfg.block_in)
    assert p.shape == layout.stored_shape(cfg) == (nb, cb, 4, 5, cfg.batch, cfg.block_in)
    assert int(np.abs(p.astype(int)).sum()) == int(np.abs(x.astype(int)).sum())
    np.testing.assert_array_equal(layout.unpack(cfg, p), x)
    # element (n, c, h, w) sits at block (n//B, c//Bi), lane (n%B, c%Bi)
    assert (
        p[2 // cfg.batch, 17 // cfg.block_in, 3, 4, 2 % cfg.batch, 17 % cfg.block_in]
        == x[2, 17, 3, 4]
    )
    out = L.Activation((3, 20, 4, 5), L.Lanes.OUT)
    assert out.stored_shape(cfg)[-1] == cfg.block_out
    np.testing.assert_array_equal(out.unpack(cfg, out.pack(cfg, x)), x)


def test_weight_round_trips_plain_folded_and_dense():
    cfg = preset("1x16x8")
    w = np.random.default_rng(1).integers(-128, 128, (10, 3, 3, 3), dtype=np.int8)
    for folded in (False, True):
        layout = L.Weight((10, 3, 3, 3), folded=folded)
        p = layout.pack(cfg, w)
        assert p.shape == layout.stored_shape(cfg)
        np.testing.assert_array_equal(layout.unpack(cfg, p), w)
    m = np.random.default_rng(2).integers(-128, 128, (20, 9), dtype=np.int8)
    layout = L.DenseWeight((20, 9))
    p = layout.pack(cfg, m)
    assert p.shape == layout.stored_shape(cfg) == (2, 2, 1, 1, 8, 16)
    np.testing.assert_array_equal(layout.unpack(cfg, p), m)


def test_depthwise_weight_is_the_diagonal_of_square_blocks():
    cfg = preset("1x8x8")
    w = np.random.default_rng(3).integers(-128, 128, (11, 1, 3, 2), dtype=np.int8)
    layout = L.DepthwiseWeight((11, 1, 3, 2))
    p = layout.pack(cfg, w)
    assert p.shape == layout.stored_shape(cfg) == (2, 1, 3, 2, 8, 8)
    dense = L.Weight((11, 11, 3, 2)).unpack(
        cfg,
        p.reshape(2, 1, 3, 2, 8, 8).repeat(2, 1)
        * np.eye(2, dtype=np.int8)[:, :, None, None, None, None],
    )
    want = np.zeros((11, 11, 3, 2), np.int8)
    want[np.arange(11), np.arange(11)] = w[:, 0]  # channel c reads only channel c
    np.testing.assert_array_equal(dense, want)
    np.testing.assert_array_equal(layout.unpack(cfg, p), w)
    with pytest.raises(ProgramError, match="BLOCK_OUT == BLOCK_IN, not 8 and 16"):
        layout.stored_shape(preset("1x16x8"))


@pytest.mark.parametrize(
    "shape, kernel, stride, pad, pad_value, cfg_name",
    [
        ((1, 3, 23, 19), (7, 7), (2, 2), (3, 3), 0, "default"),
        ((3, 2, 9, 8), (3, 3), (1, 2), (1, 0), -5, "2x16x16"),  # a missing image in the last block
        ((2, 5, 6, 6), (2, 3), (2, 1), (0, 2), 7, "1x8x8"),
    ],
)
def test_im2col_is_packed_as_the_folded_activation(shape, kernel, stride, pad, pad_value, cfg_name):
    cfg = preset(cfg_name)
    x = np.random.default_rng(3).integers(-128, 128, shape).astype(np.int8)
    layout = L.Im2col(shape, kernel, stride, pad, pad_value)
    want = L.pack_activation(L.im2col(x, kernel, stride, pad, pad_value), cfg.batch, cfg.block_in)
    got = layout.pack(cfg, x)
    assert got.shape == layout.stored_shape(cfg)
    np.testing.assert_array_equal(got, want)


def test_im2col_folds_taps_into_channels():
    x = np.arange(2 * 3 * 5 * 5, dtype=np.int64).reshape(2, 3, 5, 5)
    cols = L.im2col(x, (3, 3), (2, 2), (1, 1))
    assert cols.shape == (2, 27, 3, 3)
    # channel c*9 + kh*3 + kw of pixel (i, j) is x[c, 2i+kh-1, 2j+kw-1], zero outside
    assert cols[1, 2 * 9 + 1 * 3 + 2, 1, 1] == x[1, 2, 2, 3]
    assert cols[0, 0, 0, 0] == 0
    cfg = preset("default")
    layout = L.Im2col((2, 3, 5, 5), (3, 3), (2, 2), (1, 1))
    assert layout.pack(cfg, x.astype(np.int8)).shape == layout.stored_shape(cfg)
    with pytest.raises(ProgramError, match="an im2col layout is an input only"):
        layout.unpack(cfg, np.zeros(layout.stored_shape(cfg), np.int8))


@pytest.mark.parametrize("name", CONFIGS)
def test_rows_channels_and_matrices(name):
    cfg = preset(name)
    rng = np.random.default_rng(3)
    m = rng.integers(-128, 128, (7, 20), dtype=np.int8)
    for layout in (L.Rows((7, 20)), L.Matrix((7, 20)), L.Matrix((7, 20), L.Lanes.OUT)):
        p = layout.pack(cfg, m)
        assert p.shape == layout.stored_shape(cfg)
        np.testing.assert_array_equal(layout.unpack(cfg, p), m)
    t = L.TransposedMatrix((20, 7))
    p = t.pack(cfg, m.T)
    assert p.shape == t.stored_shape(cfg)
    assert p[0, 0, 1, 2] == m[1, 2]  # B^T's row o (a column of B) in BLOCK_OUT tiles
    np.testing.assert_array_equal(t.unpack(cfg, p), m.T)
    v = np.arange(11, dtype=np.int32) - 5
    layout = L.Channels((11,))
    p = layout.pack(cfg, v)
    assert (
        p.shape == layout.stored_shape(cfg) == (-(-11 // cfg.block_out), cfg.batch, cfg.block_out)
    )
    np.testing.assert_array_equal(layout.unpack(cfg, p), v)


def test_bad_layouts_and_shapes_are_refused():
    cfg = preset("default")
    with pytest.raises(ProgramError, match=r"logical shape \(1, 2, 3, 3\) was given shape"):
        L.Activation((1, 2, 3, 3)).pack(cfg, np.zeros((1, 2, 3)))
    with pytest.raises(ProgramError, match="logical shape must be 4 positive ints, not"):
        L.Activation((1, 2, 3))
    with pytest.raises(ProgramError, match="logical shape must be 1 positive ints"):
        L.Channels((0,))


@pytest.mark.parametrize(
    "layout",
    [
        L.Activation((1, 3, 4, 4), L.Lanes.OUT),
        L.Weight((4, 3, 3, 3), folded=True),
        L.DenseWeight((5, 6)),
        L.DepthwiseWeight((5, 1, 3, 3)),
        L.Im2col((1, 3, 8, 8), (7, 7), (2, 2), (3, 3)),
        L.Rows((9, 4)),
        L.Channels((12,)),
        L.Matrix((16, 32)),
        L.TransposedMatrix((32, 16)),
    ],
)
def test_layouts_are_records_that_read_back_exactly(layout):
    assert from_json(L.Layout, to_json(layout)) == layout


def test_layout_records_are_read_strictly():
    with pytest.raises(FormatError, match=r"layout: kind 'tiled' is not one of 'activation'"):
        from_json(L.Layout, {"kind": "tiled", "logical": [1]}, "layout")
    with pytest.raises(FormatError, match=r"layout.logical\[1\]: expected an integer, not str"):
        from_json(L.Layout, {"kind": "rows", "logical": [1, "2"], "lanes": "inp"}, "layout")
    with pytest.raises(FormatError, match=r"layout.lanes: 'wide' is not one of 'inp', 'out'"):
        from_json(L.Layout, {"kind": "rows", "logical": [1, 2], "lanes": "wide"}, "layout")
    with pytest.raises(FormatError, match=r"layout: unknown field\(s\) block"):
        from_json(L.Layout, {"kind": "channels", "logical": [3], "block": "inp"}, "layout")
    with pytest.raises(
        FormatError, match="layout: a rows layout.s logical shape must be 2 positive ints"
    ):
        from_json(L.Layout, {"kind": "rows", "logical": [1, 2, 3]}, "layout")


def test_logical_inputs_are_checked_by_name_before_packing():
    from tilecraft.compiler.operator.conv2d import conv2d
    from tilecraft.errors import DeviceError
    from tilecraft.ops import Conv2d

    program = conv2d(preset("default"), Conv2d(1, 16, 6, 6, 16, kernel=1))  # input, weight
    x, w = np.zeros((1, 16, 6, 6), np.int8), np.zeros((16, 16, 1, 1), np.int8)
    with pytest.raises(DeviceError, match=r"input 'input' has shape \(1, 16, 6, 5\); .*6, 6\)"):
        L.pack_inputs(program, {"input": x[..., :5], "weight": w})
    with pytest.raises(DeviceError, match=r"input 'weight' is float32; the program expects int8"):
        L.pack_inputs(program, {"input": x, "weight": w.astype(np.float32)})
    wide = x.astype(np.int16)
    wide[0, 0, 0, 0] = 300  # would wrap to 44 if cast
    with pytest.raises(DeviceError, match=r"input 'input' is int16 with values 0..300"):
        L.pack_inputs(program, {"input": wide, "weight": w})
    with pytest.raises(DeviceError, match=r"missing \['weight'\]; unknown \['x'\]"):
        L.pack_inputs(program, {"input": x, "x": w})
    packed = L.pack_inputs(program, {"input": wide.clip(-128, 127), "weight": w})
    assert packed["input"].dtype == np.int8
