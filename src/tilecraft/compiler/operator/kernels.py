"""Micro-op kernels: the program's micro-op list, built up as the lowering asks for kernels by
key, each kernel stored once however many instructions use it."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from tilecraft.hw.isa import Uop

# (extent, dst stride, src stride, wgt stride) of one of a GEMM/ALU instruction's two loops
LoopDim = tuple[int, int, int, int]
ONCE: LoopDim = (1, 0, 0, 0)


class UopKernels:
    def __init__(self) -> None:
        self.uops: list[Uop] = []
        self._ranges: dict[Hashable, tuple[int, int]] = {}

    def get(self, key: Hashable, make: Callable[[], Sequence[Uop]]) -> tuple[int, int]:
        """[begin, end) of the kernel `key`, made (by `make`) the first time it is asked for."""
        if key not in self._ranges:
            uops = make()
            first = len(self.uops)
            self.uops.extend(uops)
            self._ranges[key] = (first, first + len(uops))
        return self._ranges[key]

    def loop(
        self, key: Hashable, uops: Sequence[Uop], outer: LoopDim = ONCE, inner: LoopDim = ONCE
    ) -> dict[str, int]:
        """The loop fields of a GEMM or ALU instruction running kernel `key` (made of `uops`)
        `outer` x `inner` times; a GEMM adds its own weight strides."""
        bgn, end = self.get(key, lambda: uops)
        return dict(
            uop_bgn=bgn,
            uop_end=end,
            iter_out=outer[0],
            iter_in=inner[0],
            dst_out=outer[1],
            dst_in=inner[1],
            src_out=outer[2],
            src_in=inner[2],
        )
