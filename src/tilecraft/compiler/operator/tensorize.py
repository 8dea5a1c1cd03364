"""Tensorization: one reduction step of a convolution tile as a GEMM instruction.

The step is a loop nest over six regular dimensions (output rows and columns, input-channel
blocks, kernel rows and columns, output-channel blocks), each with a stride in the accumulator
(dst), input (src) and weight (wgt) scratchpads. Two of them become the GEMM instruction's
hardware loops; the rest are enumerated into its micro-op kernel, output-channel blocks fastest
(consecutive micro-ops write different accumulators).
"""

from __future__ import annotations

import functools
import itertools
import math

from tilecraft.compiler.mapping.blocks import MappedConv

PREFERRED_UOPS = 512  # above this a GEMM kernel loops over other dimensions instead

Dim = tuple[str, int, int, int, int]  # name, extent, dst stride, src stride, wgt stride


def window(low: MappedConv, rows: int, cols: int) -> tuple[int, int]:
    """Input rows and columns of the window an output block of rows x cols reads."""
    (kh, kw), (sh, sw) = low.kernel, low.stride
    wr = rows if low.row_skip else (rows - 1) * sh + kh
    return wr, (cols - 1) * sw + kw


def merged_blocks(low: MappedConv, rows: int, y_pads: int, row_stride: int) -> bool:
    """Whether a window of `rows` data rows `row_stride` apart (and `y_pads` padding rows)
    continues evenly from one input channel block into the next, so that one 2-D LOAD moves
    the window of every block: no padding rows, and the block stride (a plane) is `rows`
    row strides (whole planes; with row_skip, every used row of them)."""
    return rows > 0 and not y_pads and rows * row_stride == low.h * low.w


def step_dims(low: MappedConv, toc: int, tic: int, toh: int, tow: int) -> list[Dim]:
    """The step's dimensions; scratchpad layouts: acc (oc, oh, ow), inp window (ic, row, col),
    weights (oc, ic, kh, kw)."""
    (kh, kw), (sh, sw) = low.kernel, low.stride
    wr, wc = window(low, toh, tow)
    kk = kh * kw
    return [
        ("oh", toh, tow, (1 if low.row_skip else sh) * wc, 0),
        ("ow", tow, 1, sw, 0),
        ("ic", tic, 0, wr * wc, kk),
        ("kh", kh, 0, wc, kw),
        ("kw", kw, 0, 1, 1),
        ("oc", toc, toh * tow, 0, tic * kk),
    ]


def gemm_loops(dims: list[Dim]) -> tuple[list[Dim], list[Dim]]:
    """Split the dimensions into the GEMM's two hardware loops and the micro-op list: output
    rows x columns when the rest stays small, else the pair that leaves the fewest micro-ops."""
    by_name = {d[0]: d for d in dims}
    preferred = (by_name["oh"], by_name["ow"])

    def rest_of(pair):
        return [d for d in dims if d[0] not in (pair[0][0], pair[1][0])]

    def count(pair):
        return math.prod(d[1] for d in rest_of(pair))

    pair = preferred
    if count(preferred) > PREFERRED_UOPS:
        best = min(itertools.combinations(dims, 2), key=count)
        if count(best) < count(preferred):
            pair = best
    return list(pair), rest_of(pair)


@functools.lru_cache(maxsize=8192)  # the schedule search asks for each tile shape many times
def kernel_size(low: MappedConv, toc: int, tic: int, toh: int, tow: int) -> int:
    """Micro-ops in the GEMM kernel of a full step (none on the depthwise mode)."""
    if low.windowed:
        return 0
    _, rest = gemm_loops(step_dims(low, toc, tic, toh, tow))
    return math.prod(d[1] for d in rest)


def kernel_uops(rest: list[Dim], base: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """(dst, src, wgt) of every micro-op, the last dimension fastest."""
    out = []
    for idx in itertools.product(*(range(d[1]) for d in rest)):
        d = s = w = 0
        for i, dim in zip(idx, rest):
            d, s, w = d + i * dim[2], s + i * dim[3], w + i * dim[4]
        out.append((base[0] + d, base[1] + s, base[2] + w))
    return out
