"""What a kernel is before it is code: a frozen record of its operator and static shapes (the
cache key), its buffers in calling order (inputs, outputs, scratch space), and `emit`, which
writes its body. The buffers' list is also what a board needs to call a prebuilt kernel, so it
turns into plain data (`signature`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tilecraft.errors import KernelError

ROLES = ("in", "out", "work")


@dataclass(frozen=True)
class Buffer:
    name: str
    shape: tuple[int, ...]
    dtype: str  # a numpy dtype name
    role: str = "in"  # "in", "out", or "work" (scratch space the caller provides)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "role": self.role,
        }


class Spec:
    """Base of the kernel records (frozen dataclasses): `kind`, `buffers()` and `emit(k)`."""

    kind: ClassVar[str]
    gpu: ClassVar[bool] = False  # written with `parallel` loops and no shared scratch space
    # its compile time, roughly, in hundredths of a second (a register-tiled conv ~15, an
    # element-wise loop ~2): Jit.build starts the longest first, so that the cores finish
    # together
    compile_cost: ClassVar[int] = 2
    # whether LLVM's loop vectorizer and unroller run on it; False for a kernel that is
    # vectorised and unrolled by hand, whose other loops they would only multiply (a
    # dot-product conv's phase copies: a shared kernel's compile took 2-4x as long)
    loop_passes: ClassVar[bool] = True

    def buffers(self) -> tuple[Buffer, ...]:
        raise NotImplementedError

    def emit(self, k) -> None:  # k: irgen.Kernel, with one pointer per buffer
        raise NotImplementedError

    def code_key(self) -> str:
        """What the kernel's code depends on (its digest's input): the whole record, unless
        its code serves a family of records."""
        return repr(self)

    @property
    def symbol(self) -> str:
        """The kernel's exported name: its kind and a digest of its parameters."""
        from tilecraft.compiler.llvm.cache import spec_digest

        return f"tc_{self.kind}_{spec_digest(self)[:12]}"

    def signature(self) -> dict:
        return {
            "kind": self.kind,
            "symbol": self.symbol,
            "buffers": [b.to_dict() for b in self.buffers()],
        }


def positive_shape(what: str, shape, rank: int) -> tuple[int, ...]:
    """`shape` as a tuple of `rank` positive ints, or a KernelError naming it."""
    shape = tuple(shape)
    if len(shape) != rank or any(
        isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in shape
    ):
        raise KernelError(f"{what} shape must be {rank} positive ints, not {shape}")
    return tuple(int(d) for d in shape)


def dtype_of(what: str, dtype, valid: tuple[str, ...]) -> str:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in valid:
        raise KernelError(f"{what} has no kernel for dtype {name}; valid: {', '.join(valid)}")
    return name
