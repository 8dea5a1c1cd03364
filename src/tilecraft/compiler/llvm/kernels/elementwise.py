"""Element-wise kernels: quantize, dequantize, the scaled int8 add, and the fp32 clip (ReLU
is clip(0, inf)). Each is one flat loop written in scalars; LLVM's loop vectoriser widens it
(on armv7 it keeps fp32 scalar, as NEON is not IEEE: results stay exact).

The float steps are written exactly as `ops.host.run` computes them in numpy: float32
arithmetic in the same order, without fused multiply-adds, rounding half to even."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from llvmlite import ir

from tilecraft.compiler.llvm.irgen import F32, I8, I32, Kernel
from tilecraft.compiler.llvm.spec import Buffer, Spec, positive_shape
from tilecraft.errors import KernelError


def _count(shape) -> int:
    return int(np.prod(shape))


def _f32(value: float) -> ir.Constant:
    return ir.Constant(F32, float(np.float32(value)))


def _to_int8(k: Kernel, y: ir.Value, lo: int, hi: int) -> ir.Value:
    """A float holding an integer, clipped to [lo, hi] (NaN becomes lo), as int8."""
    y = k.b.select(k.b.fcmp_unordered("<", y, _f32(lo)), _f32(lo), y)  # NaN too
    y = k.fmin(y, _f32(hi))
    return k.b.trunc(k.b.fptosi(y, I32), I8)


def _int8(what: str, value: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or not -128 <= value <= 127
    ):
        raise KernelError(f"{what} must be an int8 (-128..127), not {value!r}")
    return int(value)


def _scale(what: str, value: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.floating))
        or not (np.isfinite(value) and value > 0)
    ):
        raise KernelError(f"{what} must be a positive finite number, not {value!r}")
    return float(np.float32(value))


@dataclass(frozen=True)
class Quantize(Spec):
    """float32 -> int8: rint(x / scale) + zero, saturated."""

    shape: tuple[int, ...]
    scale: float
    zero: int = 0
    kind: ClassVar[str] = "quantize"
    gpu: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape("quantize", self.shape, len(self.shape)))
        object.__setattr__(self, "scale", _scale("quantize scale", self.scale))
        object.__setattr__(self, "zero", _int8("quantize zero", self.zero))

    def buffers(self):
        return (Buffer("x", self.shape, "float32"), Buffer("y", self.shape, "int8", "out"))

    def emit(self, k: Kernel) -> None:
        b = k.b
        with k.parallel(_count(self.shape)) as i:
            q = k.roundeven(b.fdiv(k.load(k.arg["x"], F32, i), _f32(self.scale)))
            q = b.fadd(q, _f32(self.zero))
            k.store(_to_int8(k, q, -128, 127), k.arg["y"], i)


@dataclass(frozen=True)
class Dequantize(Spec):
    """int8 -> float32: (x - zero) * scale."""

    shape: tuple[int, ...]
    scale: float
    zero: int = 0
    kind: ClassVar[str] = "dequantize"
    gpu: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape("dequantize", self.shape, len(self.shape)))
        object.__setattr__(self, "scale", _scale("dequantize scale", self.scale))
        object.__setattr__(self, "zero", _int8("dequantize zero", self.zero))

    def buffers(self):
        return (Buffer("x", self.shape, "int8"), Buffer("y", self.shape, "float32", "out"))

    def emit(self, k: Kernel) -> None:
        b = k.b
        with k.parallel(_count(self.shape)) as i:
            x = b.sub(b.sext(k.load(k.arg["x"], I8, i), I32), ir.Constant(I32, self.zero))
            k.store(b.fmul(b.sitofp(x, F32), _f32(self.scale)), k.arg["y"], i)


@dataclass(frozen=True)
class ScaledAdd(Spec):
    """int8 a + b at their own scales to the output's: clip(rint((a - za) * ra + (b - zb) *
    rb) + zy), in float32 (`ops.host.Add`); with `fixed`, onnxruntime's x86 QLinearAdd on
    the uint8 values: fma(a + 128, ra, fma(b + 128, rb, fixed)) rounded to even, clipped,
    less 128."""

    shape: tuple[int, ...]
    ratio_a: float
    ratio_b: float
    clip: tuple[int, int] = (-128, 127)
    zero_a: int = 0
    zero_b: int = 0
    zero_y: int = 0
    fixed: float | None = None
    kind: ClassVar[str] = "add"
    gpu: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape("add", self.shape, len(self.shape)))
        for name in ("ratio_a", "ratio_b"):
            object.__setattr__(self, name, _scale(f"add {name}", getattr(self, name)))
        for name in ("zero_a", "zero_b", "zero_y"):
            object.__setattr__(self, name, _int8(f"add {name}", getattr(self, name)))
        lo, hi = (_int8("add clip", v) for v in self.clip)
        if lo > hi:
            raise KernelError(f"add clip {self.clip} must have lo <= hi")
        object.__setattr__(self, "clip", (lo, hi))

    def buffers(self):
        return (
            Buffer("a", self.shape, "int8"),
            Buffer("b", self.shape, "int8"),
            Buffer("y", self.shape, "int8", "out"),
        )

    def emit(self, k: Kernel) -> None:
        b = k.b

        def side(name, zero, ratio):
            x = b.sub(b.sext(k.load(k.arg[name], I8, i), I32), ir.Constant(I32, zero))
            return b.fmul(b.sitofp(x, F32), _f32(ratio))

        def raw(name):  # the uint8 value onnxruntime reads, in float32 (exact)
            x = b.add(b.sext(k.load(k.arg[name], I8, i), I32), ir.Constant(I32, 128))
            return b.sitofp(x, F32)

        with k.parallel(_count(self.shape)) as i:
            if self.fixed is not None:
                inner = k.fma32(raw("b"), _f32(self.ratio_b), _f32(self.fixed))
                y = b.fsub(k.roundeven(k.fma32(raw("a"), _f32(self.ratio_a), inner)), _f32(128))
            else:
                y = b.fadd(
                    side("a", self.zero_a, self.ratio_a), side("b", self.zero_b, self.ratio_b)
                )
                y = b.fadd(k.roundeven(y), _f32(self.zero_y))
            k.store(_to_int8(k, y, *self.clip), k.arg["y"], i)


@dataclass(frozen=True)
class WrappedScaledAdd(Spec):
    """The accelerator's int8 add (`ops.reference.scaled_add`): each side less its zero point,
    times its weight and multiplier, summed, floor-shifted by `pre_shift`, round-shifted by
    `shift`, plus zero_y, clipped; every step wrapping at 32 bits."""

    shape: tuple[int, ...]
    weight_a: int
    multiplier_a: int
    weight_b: int
    multiplier_b: int
    pre_shift: int = 0
    shift: int = 0
    zero_a: int = 0
    zero_b: int = 0
    zero_y: int = 0
    clip: tuple[int, int] = (-128, 127)
    kind: ClassVar[str] = "scaled_add32"
    gpu: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape("add", self.shape, len(self.shape)))
        for name in ("pre_shift", "shift"):
            if not 0 <= getattr(self, name) <= 31:
                raise KernelError(f"add {name} must be in 0..31, not {getattr(self, name)}")
        object.__setattr__(self, "clip", tuple(int(v) for v in self.clip))

    def buffers(self):
        return (
            Buffer("a", self.shape, "int8"),
            Buffer("b", self.shape, "int8"),
            Buffer("y", self.shape, "int8", "out"),
        )

    def emit(self, k: Kernel) -> None:
        b = k.b

        def i32(v: int) -> ir.Constant:
            return ir.Constant(I32, ((int(v) + 2**31) % 2**32) - 2**31)

        def side(name, zero, weight, multiplier):
            x = b.sub(b.sext(k.load(k.arg[name], I8, i), I32), i32(zero))
            return b.mul(b.mul(x, i32(weight)), i32(multiplier))

        with k.parallel(_count(self.shape)) as i:
            y = b.add(
                side("a", self.zero_a, self.weight_a, self.multiplier_a),
                side("b", self.zero_b, self.weight_b, self.multiplier_b),
            )
            y = b.ashr(y, i32(self.pre_shift)) if self.pre_shift else y
            if self.shift:
                y = b.ashr(b.add(y, i32(1 << (self.shift - 1))), i32(self.shift))
            y = k.clamp(b.add(y, i32(self.zero_y)), i32(self.clip[0]), i32(self.clip[1]))
            k.store(b.trunc(y, I8), k.arg["y"], i)


@dataclass(frozen=True)
class Clip(Spec):
    """float32 min(max(x, lo), hi); ReLU is Clip(shape, 0.0, inf)."""

    shape: tuple[int, ...]
    lo: float = 0.0
    hi: float = float("inf")
    kind: ClassVar[str] = "clip"
    gpu: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape("clip", self.shape, len(self.shape)))
        if not float(self.lo) <= float(self.hi):
            raise KernelError(f"clip bounds must have lo <= hi, not ({self.lo}, {self.hi})")

    def buffers(self):
        return (Buffer("x", self.shape, "float32"), Buffer("y", self.shape, "float32", "out"))

    def emit(self, k: Kernel) -> None:
        b = k.b
        with k.parallel(_count(self.shape)) as i:
            x = k.load(k.arg["x"], F32, i)
            x = b.select(b.fcmp_ordered("<", x, _f32(self.lo)), _f32(self.lo), x)
            x = b.select(b.fcmp_ordered(">", x, _f32(self.hi)), _f32(self.hi), x)
            k.store(x, k.arg["y"], i)


@dataclass(frozen=True)
class FloatAdd(Spec):
    """float32 a + b of equal shapes, then clip(lo, hi) (a fused ReLU is (0, inf))."""

    shape: tuple[int, ...]
    lo: float = float("-inf")
    hi: float = float("inf")
    kind: ClassVar[str] = "float_add"
    gpu: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape("add", self.shape, len(self.shape)))

    def buffers(self):
        return (
            Buffer("a", self.shape, "float32"),
            Buffer("b", self.shape, "float32"),
            Buffer("y", self.shape, "float32", "out"),
        )

    def emit(self, k: Kernel) -> None:
        b = k.b
        with k.parallel(_count(self.shape)) as i:
            y = b.fadd(k.load(k.arg["a"], F32, i), k.load(k.arg["b"], F32, i))
            if self.lo != float("-inf"):
                y = k.fmax(y, _f32(self.lo))
            if self.hi != float("inf"):
                y = k.fmin(y, _f32(self.hi))
            k.store(y, k.arg["y"], i)


@dataclass(frozen=True)
class Softmax(Spec):
    """float32 softmax along the last axis of (rows, cols): exp(x - max) / sum, with exp
    computed here (Cephes' polynomial after a range reduction by ln 2, about 2 ulp): no libm,
    so the same code links libc-free for the boards."""

    rows: int
    cols: int
    kind: ClassVar[str] = "softmax"
    gpu: ClassVar[bool] = True

    def __post_init__(self):
        positive_shape("softmax (rows, cols)", (self.rows, self.cols), 2)

    def buffers(self):
        shape = (self.rows, self.cols)
        return (Buffer("x", shape, "float32"), Buffer("y", shape, "float32", "out"))

    def emit(self, k: Kernel) -> None:
        b = k.b
        with k.parallel(self.rows, name="row") as row:
            base = b.mul(row, k.i(self.cols))
            top, total = k.local(F32), k.local(F32)
            b.store(_f32(-3.0e38), top)
            b.store(_f32(0.0), total)
            with k.loop(self.cols, name="m") as j:
                b.store(k.fmax(b.load(top), k.load(k.arg["x"], F32, b.add(base, j))), top)
            with k.loop(self.cols, name="e") as j:
                e = exp(k, b.fsub(k.load(k.arg["x"], F32, b.add(base, j)), b.load(top)))
                k.store(e, k.arg["y"], b.add(base, j))
                b.store(b.fadd(b.load(total), e), total)
            with k.loop(self.cols, name="d") as j:
                at = b.add(base, j)
                k.store(b.fdiv(k.load(k.arg["y"], F32, at), b.load(total)), k.arg["y"], at)


def exp(k: Kernel, x: ir.Value) -> ir.Value:
    """e**x in float32 without a libcall: x = n ln2 + r, |r| <= ln2 / 2, a degree-6
    polynomial in r, times 2**n built in the exponent bits (x clamped to [-87, 88])."""
    b = k.b
    x = k.fmin(k.fmax(x, _f32(-87.0)), _f32(88.0))
    n = k.roundeven(b.fmul(x, _f32(1.44269504088896341)))
    r = b.fsub(b.fsub(x, b.fmul(n, _f32(0.693359375))), b.fmul(n, _f32(-2.12194440e-4)))
    p = _f32(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = b.fadd(b.fmul(p, r), _f32(c))
    y = b.fadd(b.fadd(b.fmul(b.fmul(p, r), r), r), _f32(1.0))
    scale = b.shl(b.add(b.fptosi(n, I32), ir.Constant(I32, 127)), ir.Constant(I32, 23))
    return b.fmul(y, b.bitcast(scale, F32))
