"""The DRAM arena of a network: every activation tensor gets an offset in one region, planned at
compile time from liveness (a tensor lives from the step that makes it to the last step that
reads it), tensors whose lives do not overlap share bytes. Placement is greedy best-fit in
order of size (largest first), which is within a few percent of the lower bound (the largest
set of tensors alive at once) on CNNs. Over the budget is an error naming the bytes needed.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.errors import ModelError

ALIGN = 64  # bytes: a cache line, and a whole number of AXI beats for every preset
DEFAULT_BUDGET = 128 << 20  # PYNQ's default CMA pool


@dataclass(frozen=True)
class Interval:
    name: str
    size: int  # bytes
    first: int  # step that makes it
    last: int  # last step that reads it


@dataclass(frozen=True)
class Arena:
    offsets: dict[str, int]
    peak_bytes: int
    lower_bound_bytes: int  # the largest simultaneously live set
    budget_bytes: int

    @property
    def overhead(self) -> float:
        return self.peak_bytes / self.lower_bound_bytes - 1 if self.lower_bound_bytes else 0.0


def _aligned(n: int, align: int = ALIGN) -> int:
    return -(-n // align) * align


def lower_bound(intervals: list[Interval], align: int = ALIGN) -> int:
    steps = {i.first for i in intervals} | {i.last for i in intervals}
    return max(
        (sum(_aligned(i.size, align) for i in intervals if i.first <= s <= i.last) for s in steps),
        default=0,
    )


def plan_arena(
    intervals: list[Interval], budget: int = DEFAULT_BUDGET, align: int = ALIGN
) -> Arena:
    """Offsets (multiples of `align` bytes) for every interval; `ModelError` when the peak
    exceeds `budget` bytes."""
    placed: list[tuple[int, int, Interval]] = []  # (offset, end, interval)
    offsets = {}
    for it in sorted(intervals, key=lambda i: (-i.size, i.first, i.name)):
        size = _aligned(it.size, align)
        busy = sorted(
            (o, e) for o, e, other in placed if not (other.last < it.first or it.last < other.first)
        )
        best, best_gap, cursor = None, None, 0
        for o, e in busy:
            gap = o - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, e)
        offset = best if best is not None else cursor
        placed.append((offset, offset + size, it))
        offsets[it.name] = offset
    peak = max((e for _, e, _ in placed), default=0)
    arena = Arena(offsets, peak, lower_bound(intervals, align), budget)
    if peak > budget:
        raise ModelError(
            f"the network needs {peak:,} bytes of DRAM for its activations (lower bound "
            f"{arena.lower_bound_bytes:,}); the budget is {budget:,} bytes (--dram-budget)"
        )
    return arena


def intervals_of(
    steps: list[tuple[list[str], list[str]]], sizes: dict[str, int], keep: set[str] = frozenset()
) -> list[Interval]:
    """Liveness of every tensor in `sizes` over `steps` (each (reads, writes)); tensors in
    `keep` (the model's outputs) live to the end."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for k, (reads, writes) in enumerate(steps):
        for t in writes:
            first.setdefault(t, k)
            last[t] = max(last.get(t, k), k)
        for t in reads:
            first.setdefault(t, k)
            last[t] = k
    end = len(steps) - 1
    return [
        Interval(t, sizes[t], first[t], end if t in keep else last[t]) for t in sizes if t in first
    ]


def model_arena(model, budget: int = DEFAULT_BUDGET) -> Arena:
    """The arena of a compiled model's activations: each tensor at its stored size (the
    blocked layout of the program buffer it is bound to, else its logical int8/float size)."""
    import numpy as np

    from tilecraft.runtime.model import AcceleratorStep

    sizes = {t.name: int(np.prod(t.shape)) * np.dtype(t.dtype).itemsize for t in model.tensors}
    steps = []
    for step in model.steps:
        if isinstance(step, AcceleratorStep):
            program = model.programs[step.program]
            for b in (*step.inputs, *step.outputs):
                buf = program.buffer(b.buffer)
                stored = int(np.prod(buf.shape)) * np.dtype(buf.dtype).itemsize
                sizes[b.tensor] = max(sizes[b.tensor], stored)
            steps.append(([b.tensor for b in step.inputs], [b.tensor for b in step.outputs]))
        else:
            steps.append((list(step.inputs), [step.output]))
    return plan_arena(intervals_of(steps, sizes, set(model.outputs)), budget)
