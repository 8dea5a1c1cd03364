"""The cases of `cpu-fallback`: for each, the kernel record, its inputs, numpy's way of
computing the same thing, onnxruntime's (a one-node model, one thread), and the check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilecraft.compiler.llvm.kernels import conv, dense, layout, window
from tilecraft.compiler.llvm.spec import Spec
from tilecraft.ops import host as H
from tilecraft.ops import reference as R
from tilecraft.ops.operators import Epilogue, Multiplier
from tilecraft.runtime.layout import im2col, pack_activation, unpack_activation

EPILOGUE = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=16, relu=True)


@dataclass
class Made:
    spec: Spec
    inputs: list
    numpy: Callable
    onnxruntime: Callable  # () -> a callable running the same model, or None
    check: Callable
    macs: int = 0


@dataclass(frozen=True)
class Case:
    name: str
    dtype: str
    make: Callable


def _exact(a, b) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


def _close(a, b) -> bool:
    return a.shape == b.shape and bool(
        np.allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(b).max() or 1))
    )


def _conv(shape, oc, k, s, p, dtype):
    def make(rng):
        c = shape[1]
        spec = conv.Conv2d(
            shape,
            oc,
            (k, k),
            (s, s),
            (p,) * 4,
            dtype,
            bias=dtype == "float32",
            relu=dtype == "float32",
            epilogue=EPILOGUE if dtype == "int8" else Epilogue(),
        )
        oh, ow = spec.out_hw
        macs = oh * ow * oc * c * k * k
        if dtype == "float32":
            x, w = (
                rng.standard_normal(shape, np.float32),
                rng.standard_normal((oc, c, k, k), np.float32),
            )
            bias = rng.standard_normal(oc, np.float32)

            def numpy_conv(x, w, bias):
                cols = im2col(x, (k, k), (s, s), (p, p)).reshape(c * k * k, -1)
                y = w.reshape(oc, -1) @ cols + bias[:, None]
                return np.maximum(y, 0).reshape(1, oc, oh, ow)

            return Made(
                spec, [x, w, bias], numpy_conv, lambda: _ort_conv(x, w, bias, k, s, p), _close, macs
            )
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        # weights as symmetric quantizers give them (tilecraft's and onnxruntime's: [-127,
        # 127]), which the A9's paired taps take (dot_conv.DotConv2d's `paired`)
        w = rng.integers(-127, 128, (oc, c, k, k), dtype=np.int8)
        bias = rng.integers(-(2**14), 2**14, oc).astype(np.int32)
        mult = rng.integers(1, 2**7, oc).astype(np.int32)

        def numpy_int8(x, w, bias, mult):
            cols = im2col(x.astype(np.float64), (k, k), (s, s), (p, p)).reshape(c * k * k, -1)
            acc = (w.reshape(oc, -1).astype(np.float64) @ cols).astype(np.int64)
            return R.epilogue(EPILOGUE, acc.reshape(1, oc, oh, ow), bias=bias, multiplier=mult)

        return Made(
            spec,
            [x, w, bias, mult],
            numpy_int8,
            lambda: _ort_qconv(x, w, bias, k, s, p),
            _exact,
            macs,
        )

    return make


def _dense(m, kk, n, dtype):
    def make(rng):
        if dtype == "float32":
            spec = dense.Dense(m, kk, n, bias=True)
            x, w = (
                rng.standard_normal((m, kk), np.float32),
                rng.standard_normal((kk, n), np.float32),
            )
            bias = rng.standard_normal(n, np.float32)
            return Made(
                spec,
                [x, w, bias],
                lambda x, w, b: x @ w + b,
                lambda: _ort_gemm(x, w, bias),
                _close,
                m * kk * n,
            )
        ep = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=16)
        spec = dense.Dense(m, kk, n, "int8", epilogue=ep)
        x = rng.integers(-128, 128, (m, kk), dtype=np.int8)
        w = rng.integers(-128, 128, (kk, n), dtype=np.int8)
        bias = rng.integers(-(2**14), 2**14, n).astype(np.int32)
        mult = rng.integers(1, 2**7, n).astype(np.int32)

        def numpy_int8(x, w, bias, mult):
            acc = (x.astype(np.float64) @ w.astype(np.float64)).astype(np.int64)
            return R.epilogue(ep, acc, bias=bias, multiplier=mult)

        return Made(
            spec, [x, w, bias, mult], numpy_int8, lambda: _ort_qmatmul(x, w), _exact, m * kk * n
        )

    return make


def _maxpool(dtype):
    def make(rng):
        shape = (1, 64, 112, 112)
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        x = x if dtype == "int8" else x.astype(np.float32)
        spec = window.MaxPool(shape, (3, 3), (2, 2), (1, 1, 1, 1), dtype)
        op = H.MaxPool((3, 3), (2, 2), (1, 1, 1, 1))

        def numpy_pool(v):
            return H._maxpool(v, op) if dtype == "float32" else H.run(op, [v], {})

        return Made(spec, [x], numpy_pool, lambda: _ort_one("MaxPool", x, kernel_shape=[3, 3],
                    strides=[2, 2], pads=[1, 1, 1, 1]), _exact)  # fmt: skip

    return make


def _gap(dtype):
    def make(rng):
        shape = (1, 512, 7, 7)
        if dtype == "float32":
            x = rng.standard_normal(shape, np.float32)
            return Made(
                window.GlobalAvgPool(shape, "float32"),
                [x],
                lambda v: v.mean(axis=(2, 3), keepdims=True),
                lambda: _ort_one("GlobalAveragePool", x),
                _close,
            )
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        op = H.GlobalAvgPool(1337, 16)
        spec = window.GlobalAvgPool(shape, "int8", op.multiplier, op.shift)
        return Made(spec, [x], lambda v: H.run(op, [v], {}), lambda: None, _exact)

    return make


def _layout(pack: bool):
    def make(rng):
        shape = (1, 64, 56, 56)
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        if pack:
            return Made(
                layout.PackActivation(shape, 1, 16),
                [x],
                lambda v: pack_activation(v, 1, 16),
                lambda: None,
                _exact,
            )
        packed = pack_activation(x, 1, 16)
        return Made(
            layout.UnpackActivation(shape, 1, 16),
            [packed],
            lambda v: unpack_activation(v, 1, 64),
            lambda: None,
            _exact,
        )

    return make


CASES = [
    Case("conv3x3_64to64_56x56", "float32", _conv((1, 64, 56, 56), 64, 3, 1, 1, "float32")),
    Case("conv3x3_64to64_56x56", "int8", _conv((1, 64, 56, 56), 64, 3, 1, 1, "int8")),
    Case("conv1x1_64to128_s2_56x56", "float32", _conv((1, 64, 56, 56), 128, 1, 2, 0, "float32")),
    Case("conv1x1_64to128_s2_56x56", "int8", _conv((1, 64, 56, 56), 128, 1, 2, 0, "int8")),
    Case("dense_512to1000", "float32", _dense(1, 512, 1000, "float32")),
    Case("dense_512to1000", "int8", _dense(1, 512, 1000, "int8")),
    Case("maxpool3x3_s2_64x112x112", "int8", _maxpool("int8")),
    Case("maxpool3x3_s2_64x112x112", "float32", _maxpool("float32")),
    Case("globalavgpool_512x7x7", "int8", _gap("int8")),
    Case("globalavgpool_512x7x7", "float32", _gap("float32")),
    Case("pack_nchw_to_blocked_64x56x56", "int8", _layout(True)),
    Case("unpack_blocked_to_nchw_64x56x56", "int8", _layout(False)),
]
from tilecraft.benchmarks.cpu_onnx import (  # noqa: E402  (the onnxruntime side)
    _ort_conv,
    _ort_gemm,
    _ort_one,
    _ort_qconv,
    _ort_qmatmul,
)


def arm_builds(specs: list[Spec], folder: str, emulate: bool) -> list[dict]:
    """Each ARM target: the bench's kernels compiled and linked (seconds, bytes), and a
    smaller conv and the dense layer run under emulation (instructions per MAC), each the
    record the target builds (`for_target`: int8 convs on NEON's widening products)."""
    from tilecraft.compiler.llvm.emulate import Emulator, available
    from tilecraft.compiler.llvm.kernels.dot_conv import for_target
    from tilecraft.compiler.llvm.library import build_library
    from tilecraft.compiler.llvm.targets import target
    from tilecraft.errors import KernelError

    rng = np.random.default_rng(1)
    small = [
        ("conv3x3_64to64_14x14_int8", _conv((1, 64, 14, 14), 64, 3, 1, 1, "int8")(rng)),
        ("conv3x3_64to64_14x14_float32", _conv((1, 64, 14, 14), 64, 3, 1, 1, "float32")(rng)),
        ("dense_512to1000_int8", _dense(1, 512, 1000, "int8")(rng)),
    ]
    out = []
    for name in ("armv7", "aarch64"):
        t = target(name)
        own = {id(m): for_target(m.spec, t) for _, m in small}  # what the board builds
        try:
            lib = build_library(
                [for_target(s, t) for s in specs] + list(own.values()), t, folder, name
            )
        except KernelError as exc:
            out.append({"target": name, "error": str(exc)})
            continue
        row = {
            "target": name,
            "triple": t.triple,
            "cpu": t.cpu,
            "kernels": lib.kernels,
            "compile_seconds": lib.compile_seconds,
            "link_seconds": lib.link_seconds,
            "bytes": lib.bytes,
            "emulated": [],
        }
        if emulate and not available():
            emu = Emulator(Path(lib.shared_object).read_bytes())
            for case, made in small:
                run = emu.call(own[id(made)].signature(), made.inputs)
                ok = made.check(run.outputs[0], made.numpy(*made.inputs))
                row["emulated"].append(
                    {
                        "name": case,
                        "instructions": run.instructions,
                        "macs": made.macs,
                        "matches_numpy": ok,
                        "instructions_per_mac": run.instructions / made.macs,
                    }
                )
            row["ok"] = all(e["matches_numpy"] for e in row["emulated"])
        out.append(row)
    return out
