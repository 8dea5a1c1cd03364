"""ops.requant's formula against onnxruntime's own kernels: single QLinearConv and QLinearMatMul
nodes (int8 and uint8 activations, per-channel weight scales, bias), with accumulators past
2**24 so the int32-to-float32 rounding shows, compared element for element with numpy's
integer convolution followed by `float32_requantize` and by the integer datapath. Equality,
not a tolerance: this is the evidence behind docs/ONNXRUNTIME_ARITHMETIC.md on this machine."""

import numpy as np
import pytest

from tilecraft.ops.requant import (
    add_fields,
    float32_qlinear_add,
    float32_requantize,
    float32_scale,
    gap_scale,
    requantize,
    scale_fields,
)

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _session(model):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options)


def _conv_model(x, w, b, scales, zps, pad):
    (xs, ws, ys), (xz, yz) = scales, zps
    xtype = TensorProto.UINT8 if x.dtype == np.uint8 else TensorProto.INT8
    inits = [
        numpy_helper.from_array(np.float32(xs), "xs"),
        numpy_helper.from_array(np.array(xz, x.dtype), "xz"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(ws.astype(np.float32), "ws"),
        numpy_helper.from_array(np.zeros(len(ws), np.int8), "wz"),
        numpy_helper.from_array(np.float32(ys), "ys"),
        numpy_helper.from_array(np.array(yz, x.dtype), "yz"),
        numpy_helper.from_array(b, "b"),
    ]
    node = helper.make_node(
        "QLinearConv",
        ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
        ["y"],
        pads=[pad] * 4,
    )
    graph = helper.make_graph(
        [node],
        "qconv",
        [helper.make_tensor_value_info("x", xtype, list(x.shape))],
        [helper.make_tensor_value_info("y", xtype, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _acc(x, w, xz, pad):
    """int32 accumulators of the conv, by numpy (zero padding in the zero-point-free domain)."""
    xi = np.pad(x.astype(np.int64) - xz, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(xi, (kh, kw), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", win, w.astype(np.int64))


def _large_case(rng, dtype, channels=512):
    """Inputs and weights that push some accumulators past 2**24: half the output channels
    see weights of one sign against large inputs."""
    lo, hi = (0, 256) if dtype == np.uint8 else (-128, 128)
    x = rng.integers(lo, hi, (1, channels, 6, 6)).astype(dtype)
    x[:, : channels // 2] = (hi - 1) - rng.integers(0, 20, (1, channels // 2, 6, 6))
    w = rng.integers(-127, 128, (16, channels, 3, 3)).astype(np.int8)
    w[:8, : channels // 2] = rng.integers(100, 128, (8, channels // 2, 3, 3))
    return x, w


@pytest.mark.parametrize("dtype, xz, yz", [(np.int8, 0, 0), (np.uint8, 131, 121), (np.int8, -3, 5)])
def test_qlinearconv_requantizes_as_float32_requantize(dtype, xz, yz):
    rng = np.random.default_rng(11)
    x, w = _large_case(rng, dtype)
    b = rng.integers(-(2**20), 2**20, 16).astype(np.int32)
    acc = _acc(x, w, xz, pad=1)
    assert np.abs(acc).max() > 2**24  # the conversion to float32 rounds for some
    xs, ys = np.float32(0.0173), np.float32(0.731)
    # per-channel weight scales that bring each channel's accumulators to the output's range
    reach = np.abs(acc + b[None, :, None, None]).max(axis=(0, 2, 3))
    ws = (rng.uniform(100, 300, 16) / reach * ys / xs).astype(np.float32)
    y = _session(_conv_model(x, w, b, (xs, ws, ys), (xz, yz), pad=1)).run(None, {"x": x})[0]
    scale = float32_scale(xs, ws, ys)
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    v = acc + b[None, :, None, None]
    theirs = y.astype(np.int64)
    assert np.array_equal(float32_requantize(v, scale, yz, lo, hi), theirs)
    assert np.array_equal(requantize(v, scale_fields(scale), yz, lo, hi), theirs)
    assert len(np.unique(theirs)) > 100  # not a saturated, trivially equal output


def _matmul_model(a, b, scales, zps):
    (as_, bs, ys), (az, yz) = scales, zps
    atype = TensorProto.UINT8 if a.dtype == np.uint8 else TensorProto.INT8
    inits = [
        numpy_helper.from_array(np.float32(as_), "as"),
        numpy_helper.from_array(np.array(az, a.dtype), "az"),
        numpy_helper.from_array(b, "b"),
        numpy_helper.from_array(bs.astype(np.float32), "bs"),
        numpy_helper.from_array(np.zeros(len(bs), np.int8), "bz"),
        numpy_helper.from_array(np.float32(ys), "ys"),
        numpy_helper.from_array(np.array(yz, a.dtype), "yz"),
    ]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    graph = helper.make_graph(
        [node],
        "qmatmul",
        [helper.make_tensor_value_info("a", atype, list(a.shape))],
        [helper.make_tensor_value_info("y", atype, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("dtype, az, yz", [(np.int8, 0, 0), (np.uint8, 128, 117)])
def test_qlinearmatmul_requantizes_as_float32_requantize(dtype, az, yz):
    rng = np.random.default_rng(5)
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    a = rng.integers(lo, hi + 1, (64, 512)).astype(dtype)
    b = rng.integers(-127, 128, (512, 32)).astype(np.int8)
    acc = (a.astype(np.int64) - az) @ b.astype(np.int64)
    as_, ys = np.float32(0.02), np.float32(0.05)
    bs = (rng.uniform(60, 200, 32) / np.abs(acc).max(axis=0) * ys / as_).astype(np.float32)
    y = _session(_matmul_model(a, b, (as_, bs, ys), (az, yz))).run(None, {"a": a})[0]
    scale = float32_scale(as_, bs, ys)
    theirs = y.astype(np.int64)
    assert np.array_equal(requantize(acc, scale_fields(scale), yz, lo, hi, channel_axis=1), theirs)
    assert len(np.unique(theirs)) > 100


@pytest.mark.parametrize("dtype, xz, yz", [(np.int8, 0, 3), (np.uint8, 128, 100)])
def test_products_past_int32_saturate_as_the_float_clip_says(dtype, xz, yz):
    """A scale of 2**14 takes |v| >= 2**17 past int32: onnxruntime clips in float before
    converting, so those saturate to the clip's end of their sign (no wrap, no 'integer
    indefinite' from cvtps2dq)."""
    rng = np.random.default_rng(1)
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    x = rng.integers(lo, hi + 1, (1, 64, 6, 6)).astype(dtype)
    w = rng.integers(-127, 128, (16, 64, 3, 3)).astype(np.int8)
    b = np.zeros(16, np.int32)
    ws = np.full(16, 2.0**14, np.float32)
    y = _session(_conv_model(x, w, b, (1.0, ws, 1.0), (xz, yz), pad=1)).run(None, {"x": x})[0]
    acc = _acc(x, w, xz, pad=1)
    past = np.abs(acc) * 2**14 >= 2**31
    assert past.sum() > 50
    theirs = y.astype(np.int64)
    assert np.array_equal(theirs[past], np.where(acc[past] > 0, hi, lo))
    assert np.array_equal(requantize(acc, scale_fields(ws), yz, lo, hi), theirs)


def _qlinear_model(op, inputs, scalars, out_type, domain="com.microsoft", **attrs):
    """A one-node com.microsoft QLinear* model: `inputs` (name, tensor type, shape) fed at run
    time, `scalars` (name, numpy scalar) as initializers, inputs in the op's order."""
    order = [name for name, *_ in inputs] + [name for name, _ in scalars]
    node = helper.make_node(op, attrs.pop("order", order), ["y"], domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        op,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in scalars],
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinearadd_over_every_input_pair(dtype):
    """All 65,536 pairs of 8-bit inputs, for random scales and zero points: equal on every
    output (the x86 kernel's formula; docs/ONNXRUNTIME_ARITHMETIC.md says what ARM computes)."""
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    ttype = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    grid_a, grid_b = np.meshgrid(np.arange(lo, hi + 1), np.arange(lo, hi + 1))
    a, b = grid_a.ravel().astype(dtype), grid_b.ravel().astype(dtype)
    rng = np.random.default_rng(1)
    for _ in range(12):
        sa, sb, sc = (np.float32(rng.uniform(0.005, 0.2)) for _ in range(3))
        za, zb, zc = (dtype(rng.integers(lo, hi + 1)) for _ in range(3))
        order = ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"]
        model = _qlinear_model(
            "QLinearAdd",
            [("a", ttype, [a.size]), ("b", ttype, [b.size])],
            [("sa", sa), ("za", za), ("sb", sb), ("zb", zb), ("sc", sc), ("zc", zc)],
            ttype,
            order=order,
        )
        theirs = _session(model).run(None, {"a": a, "b": b})[0].astype(np.int64)
        fields = add_fields(sa, int(za), sb, int(zb), sc, int(zc))
        ours = float32_qlinear_add(a, b, fields, lo, hi)
        wrong = np.flatnonzero(ours != theirs)
        assert wrong.size == 0, (sa, za, sb, zb, sc, zc, a[wrong[:3]], b[wrong[:3]])


@pytest.mark.parametrize("dtype, xz, yz", [(np.uint8, 131, 9), (np.int8, 3, -7)])
def test_qlinear_global_average_pool(dtype, xz, yz):
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    ttype = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    rng = np.random.default_rng(2)
    x = rng.integers(lo, hi + 1, (2, 64, 7, 7)).astype(dtype)
    xs, ys = np.float32(0.0371), np.float32(0.00913)
    model = _qlinear_model(
        "QLinearGlobalAveragePool",
        [("x", ttype, list(x.shape))],
        [("xs", xs), ("xz", dtype(xz)), ("ys", ys), ("yz", dtype(yz))],
        ttype,
        channels_last=0,
    )
    theirs = _session(model).run(None, {"x": x})[0].astype(np.int64)[:, :, 0, 0]
    acc = x.astype(np.int64).sum(axis=(2, 3)) - xz * 49
    scale = gap_scale(xs, ys, 49)
    assert np.array_equal(requantize(acc, scale_fields(scale), yz, lo, hi), theirs)
    assert len(np.unique(theirs)) > 20
