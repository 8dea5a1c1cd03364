"""Quantize, dequantize, the scaled int8 add and the float clip: bit-exact with the host
operators' numpy semantics (`ops.host.run`) on random shapes and values."""

import numpy as np
import pytest

from tilecraft.compiler.llvm.kernels import elementwise as E
from tilecraft.errors import KernelError
from tilecraft.ops import host as H


@pytest.mark.parametrize("seed", range(4))
def test_quantize_and_dequantize_match_the_host_semantics(jit, seed):
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(1, 9, rng.integers(1, 5)))
    scale, zero = float(rng.uniform(0.001, 2)), int(rng.integers(-128, 128))
    x = (rng.standard_normal(shape) * rng.uniform(1, 300)).astype(np.float32)
    x.flat[0] = 2.5 * scale  # a tie: half to even, as numpy rounds
    q = jit.kernel(E.Quantize(shape, scale, zero))(x)
    assert np.array_equal(q, H.run(H.Quantize(scale, zero), [x], {})), f"seed {seed}"
    y = jit.kernel(E.Dequantize(shape, scale, zero))(q)
    assert np.array_equal(y, H.run(H.Dequantize(scale, zero), [q], {})), f"seed {seed}"


def test_quantize_rounds_ties_to_even_and_saturates(jit):
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1e9, -1e9, 127.49, 3e6 + 0.5], np.float32)
    q = jit.kernel(E.Quantize(x.shape, 1.0))(x)
    assert q.tolist() == [0, 2, 2, 0, -2, 127, -128, 127, 127]


@pytest.mark.parametrize("seed", range(4))
def test_scaled_add_matches_onnxruntime_style_float_add(jit, seed):
    rng = np.random.default_rng(seed)
    shape = (2, int(rng.integers(1, 40)), 3, 5)
    op = H.Add(
        float(rng.uniform(0.01, 3)),
        float(rng.uniform(0.01, 3)),
        (int(rng.integers(-128, 0)), 127),
        *map(int, rng.integers(-128, 128, 3)),
    )
    a, b = (rng.integers(-128, 128, shape).astype(np.int8) for _ in range(2))
    spec = E.ScaledAdd(shape, op.ratio_a, op.ratio_b, op.clip, op.zero_a, op.zero_b, op.zero_y)
    assert np.array_equal(jit.kernel(spec)(a, b), H.run(op, [a, b], {})), f"seed {seed}"


def test_clip_is_relu_by_default(jit):
    x = np.random.default_rng(0).standard_normal((7, 9)).astype(np.float32)
    assert np.array_equal(jit.kernel(E.Clip(x.shape))(x), np.maximum(x, 0))
    assert np.array_equal(jit.kernel(E.Clip(x.shape, -0.5, 0.25))(x), np.clip(x, -0.5, 0.25))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: E.Quantize((3, 0), 1.0), "positive ints"),
        (lambda: E.Quantize((3,), -1.0), "positive finite"),
        (lambda: E.Quantize((3,), 1.0, 200), "int8"),
        (lambda: E.ScaledAdd((3,), 1.0, 1.0, (5, 1)), "lo <= hi"),
        (lambda: E.Clip((3,), 1.0, 0.0), "lo <= hi"),
    ],
)
def test_bad_records_are_refused_by_name(make, message):
    with pytest.raises(KernelError, match=message):
        make()


def test_a_kernel_checks_its_inputs(jit):
    k = jit.kernel(E.Quantize((4,), 1.0))
    with pytest.raises(Exception, match=r"input 'x' is float64\[4\], expected float32\[4\]"):
        k(np.zeros(4))
    with pytest.raises(Exception, match="takes 1 inputs"):
        k(np.zeros(4, np.float32), np.zeros(4, np.float32))


def test_a_kernel_returns_fresh_outputs_and_takes_strided_inputs(jit):
    """Each call's result is an array of its own (the kernel keeps its scratch space and its
    argument array between calls, never the outputs), and a strided input is copied
    contiguous for the call."""
    k = jit.kernel(E.Quantize((4,), 1.0))
    x = np.arange(8, dtype=np.float32)
    even, odd = k(x[::2]), k(x[1::2])
    assert not np.shares_memory(even, odd)
    assert np.array_equal(even, k(np.ascontiguousarray(x[::2])))
    assert np.array_equal(odd, k(np.ascontiguousarray(x[1::2])))
    assert even.tolist() != odd.tolist()
