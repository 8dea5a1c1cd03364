"""Max, average and global-average pooling and the int8 depthwise conv: bit-exact with the
host operators (int8) and the numpy definitions (float32) on random shapes, strides and
(asymmetric) pads."""

import numpy as np
import pytest

from tilecraft.compiler.llvm.kernels import window as W
from tilecraft.errors import KernelError
from tilecraft.ops import host as H
from tilecraft.ops.operators import Epilogue, Multiplier


def _case(seed):
    rng = np.random.default_rng(seed)
    kernel = tuple(int(k) for k in rng.integers(1, 4, 2))
    stride = tuple(int(s) for s in rng.integers(1, 3, 2))
    pads = tuple(int(rng.integers(0, k)) for k in (*kernel, *kernel))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 20)), *map(int, rng.integers(4, 15, 2)))
    return rng, shape, kernel, stride, pads


@pytest.mark.parametrize("seed", range(6))
def test_maxpool_int8_and_float(jit, seed):
    rng, shape, kernel, stride, pads = _case(seed)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    want = H.run(H.MaxPool(kernel, stride, pads), [x], {})
    assert np.array_equal(jit.kernel(W.MaxPool(shape, kernel, stride, pads))(x), want)
    f = jit.kernel(W.MaxPool(shape, kernel, stride, pads, "float32"))(x.astype(np.float32))
    assert np.array_equal(f, want.astype(np.float32)), f"seed {seed}"


@pytest.mark.parametrize("seed", range(4))
def test_avgpool_does_not_count_padding(jit, seed):
    rng, shape, kernel, stride, pads = _case(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    t, left, b, r = pads
    windows = [
        np.lib.stride_tricks.sliding_window_view(
            np.pad(v, ((0, 0), (0, 0), (t, b), (left, r))), kernel, axis=(2, 3)
        )[:, :, :: stride[0], :: stride[1]].sum(axis=(-1, -2))
        for v in (x, np.ones_like(x))
    ]
    got = jit.kernel(W.AvgPool(shape, kernel, stride, pads))(x)
    np.testing.assert_allclose(got, windows[0] / windows[1], rtol=1e-5, atol=1e-6)


WIDE = [  # rows of several vectors of outputs, a partial last one or none
    ((1, 5, 9, 37), (3, 3), (1, 1), (1, 1, 1, 1)),
    ((1, 3, 11, 64), (3, 3), (2, 2), (1, 1, 1, 1)),
    ((2, 4, 8, 50), (5, 5), (2, 2), (2, 1, 2, 3)),
    ((1, 2, 7, 33), (7, 3), (1, 3), (3, 0, 3, 2)),
    ((1, 3, 6, 32), (1, 1), (1, 1), (0, 0, 0, 0)),
]


@pytest.mark.parametrize("seed", range(6 + len(WIDE)))
def test_depthwise_conv_with_the_accelerator_epilogue(jit, seed):
    rng, shape, kernel, stride, pads = _case(seed)
    if seed >= 6:
        shape, kernel, stride, pads = WIDE[seed - 6]
    ep = [
        Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=9, relu=True, offset=3),
        Epilogue(acc_bounds=True, bias=True, multiplier=Multiplier.CHANNEL, shift=6, pre_shift=4),
        Epilogue(multiplier=Multiplier.TENSOR, shift=3, clip=(-20, 90)),
    ][seed % 3]
    c = shape[1]
    consts = {
        "weight": rng.integers(-128, 128, (c, 1, *kernel)).astype(np.int8),
        "bias": rng.integers(-2000, 2000, c).astype(np.int32),
        "multiplier": rng.integers(1, 300, c if ep.multiplier == Multiplier.CHANNEL else 1).astype(
            np.int32
        ),
        "acc_lo": rng.integers(-9000, -100, c).astype(np.int32),
        "acc_hi": rng.integers(100, 9000, c).astype(np.int32),
        "multiplier2": rng.integers(1, 40, c).astype(np.int32),
    }
    pad_value = int(rng.integers(-128, 128))
    x = rng.integers(-128, 128, shape).astype(np.int8)
    spec = W.DepthwiseConv(shape, kernel, stride, pads, ep, pad_value)
    names = [b.name for b in spec.buffers() if b.role == "in"][1:]
    got = jit.kernel(spec)(x, *[consts[n] for n in names])
    used = {n: consts[n] for n in names}
    want = H.run(H.DepthwiseConv(kernel, stride, pads, ep, pad_value), [x], used)
    assert np.array_equal(got, want), f"seed {seed}"


@pytest.mark.parametrize("seed", range(4))
def test_global_avgpool_int8_and_float(jit, seed):
    rng = np.random.default_rng(seed)
    shape = (2, int(rng.integers(1, 30)), *map(int, rng.integers(1, 9, 2)))
    op = H.GlobalAvgPool(
        int(rng.integers(1, 2**20)), int(rng.integers(0, 30)), *map(int, rng.integers(-128, 128, 2))
    )
    x = rng.integers(-128, 128, shape).astype(np.int8)
    spec = W.GlobalAvgPool(shape, "int8", op.multiplier, op.shift, op.input_zero, op.output_zero)
    assert np.array_equal(jit.kernel(spec)(x), H.run(op, [x], {})), f"seed {seed}"
    f = rng.standard_normal(shape).astype(np.float32)
    got = jit.kernel(W.GlobalAvgPool(shape, "float32"))(f)
    np.testing.assert_allclose(got, f.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


def test_window_records_refuse_bad_geometry():
    with pytest.raises(KernelError, match="does not fit"):
        W.MaxPool((1, 1, 2, 2), (3, 3), (1, 1), (0, 0, 0, 0))
    with pytest.raises(KernelError, match="pads must be 4 ints"):
        W.MaxPool((1, 1, 4, 4), (3, 3), (1, 1), (0, -1, 0, 0))
    with pytest.raises(KernelError, match="no kernel for dtype int32"):
        W.MaxPool((1, 1, 4, 4), (3, 3), (1, 1), (0, 0, 0, 0), "int32")
    with pytest.raises(KernelError, match="no residual"):
        W.DepthwiseConv((1, 1, 4, 4), (3, 3), (1, 1), (1, 1, 1, 1), Epilogue(residual=True))


def test_float_depthwise_with_bias_and_relu6(jit):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 6, 9, 8)).astype(np.float32)
    w, bias = rng.standard_normal((6, 1, 3, 3)).astype(np.float32), rng.standard_normal(6)
    spec = W.DepthwiseConv(x.shape, (3, 3), (2, 1), (1, 1, 1, 1), dtype="float32",
                           clip=(0.0, 6.0))  # fmt: skip
    got = jit.kernel(spec)(x, w, bias.astype(np.float32))
    win = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))),
                                                   (3, 3), axis=(2, 3))[:, :, ::2]  # fmt: skip
    want = np.einsum("nchwij,cij->nchw", win, w[:, 0]) + bias[None, :, None, None]
    np.testing.assert_allclose(got, np.clip(want, 0, 6), rtol=1e-5, atol=1e-5)
