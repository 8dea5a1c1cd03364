"""The direct convolution: float32 within 1e-5 of a float64 reference, int8 bit-exact with
`ops.reference.conv2d` (epilogues, residuals, zero-point padding, more terms than one exact
float chunk holds), over random shapes, strides and kernels."""

import numpy as np
import pytest

from tilecraft.compiler.llvm.kernels.conv import EXACT_TERMS, Conv2d
from tilecraft.errors import KernelError
from tilecraft.ops import reference as R
from tilecraft.ops.operators import Conv2d as ConvOp
from tilecraft.ops.operators import Epilogue, Multiplier


def float_conv(x, w, stride, pads, bias=None):
    t, left, b, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, b), (left, r)))
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
    y = np.einsum("nchwij,ocij->nohw", win[:, :, :: stride[0], :: stride[1]], w)
    return y if bias is None else y + bias[None, :, None, None]


def _geometry(rng):
    k = int(rng.choice([1, 3, 5, 7]))
    s = int(rng.integers(1, 3))
    p = int(rng.integers(0, k // 2 + 1))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 24)), *map(int, rng.integers(k, 30, 2)))
    return shape, int(rng.integers(1, 30)), (k, k), (s, s), (p, p, p, p)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_float32_conv_matches_float64_reference(jit, seed):
    rng = np.random.default_rng(seed)
    shape, oc, kernel, stride, pads = _geometry(rng)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((oc, shape[1], *kernel)).astype(np.float32)
    bias = rng.standard_normal(oc).astype(np.float32)
    got = jit.kernel(Conv2d(shape, oc, kernel, stride, pads, bias=True, relu=True))(x, w, bias)
    want = np.maximum(float_conv(x, w, stride, pads, bias), 0)
    np.testing.assert_allclose(
        got,
        want,
        rtol=1e-5,
        atol=1e-5 * np.abs(want).max(),
        err_msg=f"seed {seed}: {shape} -> {oc}, {kernel} {stride}",
    )


EPILOGUES = [
    Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=12, relu=True, offset=2),
    Epilogue(acc_bounds=True, bias=True, multiplier=Multiplier.CHANNEL, shift=8),
    Epilogue(bias=True, multiplier=Multiplier.CHANNEL, pre_shift=6, shift=9, residual=True),
    Epilogue(multiplier=Multiplier.TENSOR, shift=14, residual=True, relu=True, offset=-7),
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_int8_conv_is_bit_exact(jit, seed):
    rng = np.random.default_rng(seed)
    shape, oc, kernel, stride, pads = _geometry(rng)
    ep = EPILOGUES[seed % len(EPILOGUES)]
    pad_value = int(rng.integers(-128, 128)) if seed % 2 else 0
    spec = Conv2d(shape, oc, kernel, stride, pads, "int8", epilogue=ep, pad_value=pad_value)
    tensors = {
        "x": rng.integers(-128, 128, shape).astype(np.int8),
        "weight": rng.integers(-128, 128, (oc, shape[1], *kernel)).astype(np.int8),
        "bias": rng.integers(-5000, 5000, oc).astype(np.int32),
        "multiplier": rng.integers(1, 200, 1 if ep.multiplier == Multiplier.TENSOR else oc).astype(
            np.int32
        ),
        "multiplier2": rng.integers(1, 50, oc).astype(np.int32),
        "acc_lo": rng.integers(-40000, -100, oc).astype(np.int32),
        "acc_hi": rng.integers(100, 40000, oc).astype(np.int32),
        "residual": rng.integers(-128, 128, spec.out_shape).astype(np.int8),
    }
    names = [b.name for b in spec.buffers() if b.role == "in"]
    got = jit.kernel(spec)(*[tensors[n] for n in names])
    op = ConvOp(
        n=shape[0],
        ic=shape[1],
        h=shape[2],
        w=shape[3],
        oc=oc,
        kernel=kernel,
        stride=stride,
        pad=pads[:2],
        pad_value=pad_value,
    )
    params = {n: tensors[n] for n in names[2:]}
    want = R.conv2d(op, ep, tensors["x"], tensors["weight"], **params)
    assert np.array_equal(got, want), f"seed {seed}: {spec}"


def test_int8_sums_past_one_exact_float_chunk(jit):
    """3x3 x 300 channels: 2,700 products of -128 * -128, far past 2**24 in one float sum."""
    shape, oc = (1, 300, 5, 6), 7
    spec = Conv2d(shape, oc, (3, 3), (1, 1), (1, 1, 1, 1), "int8", epilogue=Epilogue(shift=20))
    assert spec.chunk * 9 <= EXACT_TERMS < 300 * 9
    x = np.full(shape, -128, np.int8)
    w = np.full((oc, 300, 3, 3), -128, np.int8)
    op = ConvOp(n=1, ic=300, h=5, w=6, oc=oc, kernel=(3, 3), stride=(1, 1), pad=(1, 1))
    assert np.array_equal(jit.kernel(spec)(x, w), R.conv2d(op, Epilogue(shift=20), x, w))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kernel": (9, 9)}, "larger than the padded input"),
        ({"dtype": "int16"}, "no kernel for dtype int16"),
        ({"epilogue": Epilogue(shift=3)}, "not an int8 epilogue"),
        ({"dtype": "int8", "relu": True}, "states bias and ReLU in its epilogue"),
        ({"pads": (1, 1, 1)}, "pads must be 4 ints"),
    ],
)
def test_bad_conv_records_are_refused(kwargs, message):
    args = {"shape": (1, 3, 8, 8), "out_channels": 4, "kernel": (3, 3), **kwargs}
    with pytest.raises(KernelError, match=message):
        Conv2d(**args)
