"""Dense layers: float32 close to numpy, int8 bit-exact with `ops.reference.dense`."""

import numpy as np
import pytest

from tilecraft.compiler.llvm.kernels.dense import Dense
from tilecraft.errors import KernelError
from tilecraft.ops import reference as R
from tilecraft.ops.operators import Epilogue, Multiplier


@pytest.mark.parametrize("seed", range(4))
def test_dense_float_and_int8(jit, seed):
    rng = np.random.default_rng(seed)
    m, k, n = int(rng.integers(1, 5)), int(rng.integers(1, 900)), int(rng.integers(1, 70))
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n))
    w, bias = w.astype(np.float32), rng.standard_normal(n).astype(np.float32)
    got = jit.kernel(Dense(m, k, n, bias=True, relu=True))(x, w, bias)
    want = np.maximum(x.astype(np.float64) @ w + bias, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    ep = Epilogue(
        bias=True, multiplier=Multiplier.CHANNEL, shift=14, offset=-3, residual=bool(seed % 2)
    )
    xi, wi = (rng.integers(-128, 128, s).astype(np.int8) for s in ((m, k), (k, n)))
    b, mult = rng.integers(-9000, 9000, n).astype(np.int32), rng.integers(1, 99, n)
    res = rng.integers(-128, 128, (m, n)).astype(np.int8)
    args = [xi, wi, b, mult.astype(np.int32)] + ([res] if ep.residual else [])
    got = jit.kernel(Dense(m, k, n, "int8", epilogue=ep))(*args)
    want = R.dense(ep, xi, wi, bias=b, multiplier=mult, residual=res if ep.residual else None)
    assert np.array_equal(got, want), f"seed {seed}"


def test_dense_refuses_a_float_epilogue():
    with pytest.raises(KernelError, match="not an int8 epilogue"):
        Dense(1, 2, 3, epilogue=Epilogue(shift=2))
