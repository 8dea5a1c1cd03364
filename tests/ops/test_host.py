"""The host operators' integer semantics, against plain definitions."""

import numpy as np
import pytest

from tilecraft.errors import FormatError, ScheduleError
from tilecraft.ops import Conv2d, Epilogue, Multiplier
from tilecraft.ops import host as H
from tilecraft.ops.reference import conv2d_acc, epilogue
from tilecraft.serial import from_json, to_json

rng = np.random.default_rng(0)


def test_maxpool_is_the_window_maximum_padding_never_wins():
    x = rng.integers(-128, 128, (1, 3, 7, 7), dtype=np.int8)
    y = H.run(H.MaxPool((3, 3), (2, 2), (1, 1, 1, 1)), [x], {})
    assert y.shape == (1, 3, 4, 4) and y.dtype == np.int8
    for i in range(4):
        for j in range(4):
            r0, c0 = max(2 * i - 1, 0), max(2 * j - 1, 0)
            win = x[:, :, r0 : 2 * i + 2, c0 : 2 * j + 2]
            np.testing.assert_array_equal(y[:, :, i, j], win.max(axis=(2, 3)))


def test_global_average_pool_rounds_like_the_accelerator():
    x = rng.integers(-128, 128, (2, 5, 7, 7), dtype=np.int8)
    m, s = 1337, 16  # ~ 1/49
    y = H.run(H.GlobalAvgPool(m, s), [x], {})
    total = x.astype(np.int64).sum(axis=(2, 3), keepdims=True)
    want = np.clip((total * m + (1 << 15)) >> 16, -128, 127)
    np.testing.assert_array_equal(y, want)
    assert np.abs(y - np.rint(total / 49)).max() <= 1


def test_add_requantizes_both_sides_in_float32_rounding_half_to_even():
    a, b = (rng.integers(-128, 128, (1, 4, 3, 3), dtype=np.int8) for _ in range(2))
    y = H.run(H.Add(0.5, 1.0, (0, 127)), [a, b], {})
    want = np.clip(np.rint(a / 2 + b), 0, 127)  # a / 2 is exact: ties go to even
    np.testing.assert_array_equal(y, want)
    ones = np.ones((1, 1, 1, 2), np.int8)
    halves = H.run(H.Add(0.5, 1.0), [ones, np.array([[[[0, 1]]]], np.int8)], {})
    np.testing.assert_array_equal(halves, [[[[0, 2]]]])  # 0.5 -> 0, 1.5 -> 2
    assert H.Add(0.1, 0.2).ratio_a == float(np.float32(0.1))  # the ratios are float32
    with pytest.raises(ScheduleError, match="ratio_b must be a positive finite float"):
        H.Add(1.0, -2.0)


@pytest.mark.parametrize(
    "op",
    [
        H.Add(0.7, 1.3, (0, 127), 1, -2, 3),
        H.Add(0.013, 2.9, (-128, 127), -5, 7, -1),
        H.Add(0.7, 1.3, (0, 127), 1, -2, 3, fixed=-41.3),  # onnxruntime's x86 form
        H.Add(1.9, 0.031, (-100, 90), fixed=11.25),
    ],
    ids=str,
)
def test_an_add_runs_as_the_table_of_its_formula(op):
    """The host runs an Add as a look-up in the table of every pair of int8 inputs
    (`add_table`, built once per operator): each element its formula's (`add`), on whole
    tensors, broadcast ones and the corners of the int8 range."""
    a, b = (rng.integers(-128, 128, (1, 64, 20, 20), dtype=np.int8) for _ in range(2))
    np.testing.assert_array_equal(H.run(op, [a, b], {}), H.add(op, a, b))
    row = b[:, :, :1, :]
    np.testing.assert_array_equal(H.run(op, [a, row], {}), H.add(op, a, row))
    corners = np.array([-128, -127, -1, 0, 1, 126, 127], np.int8)
    x, y = np.meshgrid(corners, corners)
    np.testing.assert_array_equal(H.run(op, [x, y], {}), H.add(op, x, y))
    assert H.add_table(op) is H.add_table(op) and H.add_table(op).shape == (65536,)
    assert H.add_table(op)[(3 + 128) * 256 + (-7 + 128)] == H.add(op, np.int8(3), np.int8(-7))


def test_depthwise_conv_is_one_conv_per_channel():
    c = 4
    x = rng.integers(-128, 128, (1, c, 6, 6), dtype=np.int8)
    w = rng.integers(-127, 128, (c, 1, 3, 3), dtype=np.int8)
    bias = rng.integers(-500, 500, c).astype(np.int32)
    mul = rng.integers(1, 200, c).astype(np.int32)
    ep = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=9, relu=True)
    y = H.run(H.DepthwiseConv((3, 3), (1, 1), (1, 1, 1, 1), ep), [x],
              {"weight": w, "bias": bias, "multiplier": mul})  # fmt: skip
    op = Conv2d(1, 1, 6, 6, 1, 3, 1, 1)
    acc = np.concatenate([conv2d_acc(op, x[:, k : k + 1], w[k : k + 1]) for k in range(c)], 1)
    np.testing.assert_array_equal(y, epilogue(ep, acc, bias=bias, multiplier=mul))


def test_quantize_rounds_half_to_even_and_saturates():
    y = H.run(H.Quantize(0.5), [np.array([0.25, 0.75, 100.0, -100.0])], {})
    np.testing.assert_array_equal(y, [0, 2, 127, -128])
    with pytest.raises(ScheduleError, match="positive finite float"):
        H.Quantize(0.0)


def test_records_round_trip_strictly():
    ops = [
        H.MaxPool((3, 3), (2, 2), (1, 1, 1, 1)),
        H.GlobalAvgPool(5, 8),
        H.Flatten(),
        H.Add(0.75, 1.25, (0, 127)),
        H.Quantize(0.1),
        H.Dequantize(0.2),
    ]
    for op in ops:
        assert from_json(H.HostOp, to_json(op)) == op
    with pytest.raises(FormatError, match="kind 'sigmoid' is not one of"):
        from_json(H.HostOp, {"kind": "sigmoid"})
