"""NCHW <-> the accelerator's blocked activation layout, as `runtime.layout` defines it."""

import re

import numpy as np
import pytest

from tilecraft.compiler.llvm.kernels.layout import PackActivation, PackIm2col, UnpackActivation
from tilecraft.errors import KernelError
from tilecraft.runtime.layout import pack_activation, pack_im2col


@pytest.mark.parametrize(
    "shape, batch, lanes, dtype",
    [
        ((3, 37, 5, 6), 2, 16, "int8"),
        ((1, 16, 7, 7), 1, 16, "int8"),
        ((2, 5, 3, 3), 1, 8, "float32"),
        ((1, 70, 2, 9), 1, 32, "int32"),
        # transposed in 16 x 16 blocks: whole ones, a partial channel block with whole pixel
        # chunks, pixels past the last 16 only, batch lanes
        ((1, 64, 56, 56), 1, 16, "int8"),
        ((2, 512, 7, 7), 1, 16, "int8"),
        ((1, 5, 4, 4), 1, 16, "int8"),
        ((5, 20, 1, 3), 4, 16, "int8"),
        ((1, 8, 6, 6), 1, 8, "int8"),  # 8 lanes: the walk
    ],
)
def test_pack_and_unpack_round_trip(jit, shape, batch, lanes, dtype):
    x = np.random.default_rng(0).integers(-128, 128, shape).astype(dtype)
    packed = jit.kernel(PackActivation(shape, batch, lanes, dtype))(x)
    assert np.array_equal(packed, pack_activation(x, batch, lanes))
    assert np.array_equal(jit.kernel(UnpackActivation(shape, batch, lanes, dtype))(packed), x)


@pytest.mark.parametrize(
    "shape, kernel, stride, pad, pad_value, batch, lanes, dtype",
    [
        ((1, 3, 224, 224), (7, 7), (2, 2), (3, 3), 0, 1, 16, "int8"),  # ResNet-18's first conv
        ((1, 3, 32, 32), (3, 3), (2, 2), (1, 1), -7, 1, 16, "int8"),  # MobileNetV2's: 27 taps
        ((3, 2, 9, 11), (3, 3), (1, 1), (1, 1), 5, 2, 16, "int8"),  # an image past N
        ((2, 3, 13, 10), (5, 3), (2, 1), (2, 0), 200, 4, 8, "uint8"),  # 2 images past N
        ((1, 1, 20, 21), (11, 9), (3, 4), (0, 4), 131, 1, 32, "uint8"),  # runs over 8 bytes
        ((1, 5, 6, 6), (1, 1), (1, 1), (0, 0), 0, 1, 16, "int8"),  # one tap, 5 lanes used
    ],
)
def test_im2col_packing_matches_the_runtimes(
    jit, shape, kernel, stride, pad, pad_value, batch, lanes, dtype
):
    low, high = (-128, 128) if dtype == "int8" else (0, 256)
    x = np.random.default_rng(1).integers(low, high, shape).astype(dtype)
    spec = PackIm2col(shape, kernel, stride, pad, pad_value, batch, lanes, dtype)
    want = pack_im2col(x, kernel, stride, pad, pad_value, batch, lanes)
    got = jit.kernel(spec)(x)
    assert got.shape == want.shape
    assert np.array_equal(got, want)
    assert np.array_equal(
        jit.kernel(spec)(x + np.ones_like(x)),
        pack_im2col(x + np.ones_like(x), kernel, stride, pad, pad_value, batch, lanes),
    )  # scratch reused


@pytest.mark.parametrize(
    "change, message",
    [
        ({"pad_value": 128}, "pad_value 128 does not fit int8"),
        ({"dtype": "int32"}, "valid: int8, uint8"),
        ({"pad": (-1, 0)}, "pad must be 2 ints >= 0"),
        ({"kernel": (9, 9)}, "does not fit an input of (4, 4)"),
    ],
)
def test_im2col_packing_refuses_what_it_cannot_pack(change, message):
    fields = dict(
        shape=(1, 1, 4, 4),
        kernel=(3, 3),
        stride=(1, 1),
        pad=(0, 0),
        pad_value=0,
        batch=1,
        lanes=16,
        dtype="int8",
    )
    with pytest.raises(KernelError, match=re.escape(message)):
        PackIm2col(**{**fields, **change})
