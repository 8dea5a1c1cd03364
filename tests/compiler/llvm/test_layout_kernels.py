"""NCHW <-> the accelerator's blocked activation layout, as `runtime.layout` defines it."""

import numpy as np
import pytest

from tilecraft.compiler.llvm.kernels.layout import PackActivation, UnpackActivation
from tilecraft.runtime.layout import pack_activation


@pytest.mark.parametrize(
    "shape, batch, lanes, dtype",
    [
        ((3, 37, 5, 6), 2, 16, "int8"),
        ((1, 16, 7, 7), 1, 16, "int8"),
        ((2, 5, 3, 3), 1, 8, "float32"),
        ((1, 70, 2, 9), 1, 32, "int32"),
    ],
)
def test_pack_and_unpack_round_trip(jit, shape, batch, lanes, dtype):
    x = np.random.default_rng(0).integers(-128, 128, shape).astype(dtype)
    packed = jit.kernel(PackActivation(shape, batch, lanes, dtype))(x)
    assert np.array_equal(packed, pack_activation(x, batch, lanes))
    assert np.array_equal(jit.kernel(UnpackActivation(shape, batch, lanes, dtype))(packed), x)
