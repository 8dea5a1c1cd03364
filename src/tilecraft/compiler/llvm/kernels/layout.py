"""The layout transforms between NCHW and the accelerator's blocked activation layout
(`runtime.layout.pack_activation`: (N/B, C/L, H, W, B, L), zero-padded to whole blocks),
for any element type."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from llvmlite import ir

from tilecraft.compiler.llvm.irgen import DTYPES, Kernel
from tilecraft.compiler.llvm.spec import Buffer, Spec, dtype_of, positive_shape


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class _Blocked(Spec):
    shape: tuple[int, int, int, int]  # NCHW
    batch: int
    lanes: int
    dtype: str = "int8"

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape(self.kind, self.shape, 4))
        positive_shape(f"{self.kind} blocks (batch, lanes)", (self.batch, self.lanes), 2)
        object.__setattr__(
            self, "dtype", dtype_of(self.kind, self.dtype, ("int8", "int32", "float32"))
        )

    @property
    def blocked(self) -> tuple[int, ...]:
        n, c, h, w = self.shape
        return (_ceil(n, self.batch), _ceil(c, self.lanes), h, w, self.batch, self.lanes)

    def _walk(self, k: Kernel, move) -> None:
        """For every blocked position: `move(blocked index, NCHW index or None for padding)`."""
        b = k.b
        n, c, h, w = self.shape
        nb, cb = self.blocked[:2]
        with (
            k.loop(nb, name="nb") as i0,
            k.loop(cb, name="cb") as c0,
            k.loop(h * w, name="hw") as p,
            k.loop(self.batch, name="bi") as bi,
            k.loop(self.lanes, name="li") as li,
        ):
            blocked = b.add(
                b.mul(b.add(b.mul(b.add(b.mul(i0, k.i(cb)), c0), k.i(h * w)), p), k.i(self.batch)),
                bi,
            )
            blocked = b.add(b.mul(blocked, k.i(self.lanes)), li)
            ni = b.add(b.mul(i0, k.i(self.batch)), bi)
            ci = b.add(b.mul(c0, k.i(self.lanes)), li)
            inside = b.and_(b.icmp_signed("<", ni, k.i(n)), b.icmp_signed("<", ci, k.i(c)))
            flat = b.add(b.mul(b.add(b.mul(ni, k.i(c)), ci), k.i(h * w)), p)
            move(blocked, flat, inside)


@dataclass(frozen=True)
class PackActivation(_Blocked):
    kind: ClassVar[str] = "pack_activation"

    def buffers(self):
        return (Buffer("x", self.shape, self.dtype), Buffer("y", self.blocked, self.dtype, "out"))

    def emit(self, k: Kernel) -> None:
        t = DTYPES[self.dtype]
        zero = ir.Constant(t, 0.0 if self.dtype == "float32" else 0)

        def move(blocked, flat, inside):
            safe = k.b.select(inside, flat, k.i(0))
            k.store(k.b.select(inside, k.load(k.arg["x"], t, safe), zero), k.arg["y"], blocked)

        self._walk(k, move)


@dataclass(frozen=True)
class UnpackActivation(_Blocked):
    kind: ClassVar[str] = "unpack_activation"

    def buffers(self):
        return (Buffer("x", self.blocked, self.dtype), Buffer("y", self.shape, self.dtype, "out"))

    def emit(self, k: Kernel) -> None:
        t = DTYPES[self.dtype]

        def move(blocked, flat, inside):
            with k.b.if_then(inside):
                k.store(k.load(k.arg["x"], t, blocked), k.arg["y"], flat)

        self._walk(k, move)
