"""Per-tile work of a scheduled convolution on the compute stage's two units: what the
heuristic's estimate adds up, and what lowering asks to choose where the accumulators are
cleared and whether the epilogue is spread over the next tile's reduction steps."""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.compiler.mapping.blocks import MappedConv, alu_passes
from tilecraft.compiler.operator.schedule import pooled, tile_shape
from tilecraft.compiler.operator.tensorize import window
from tilecraft.hw.config import HwConfig
from tilecraft.hw.timing import Timing, depthwise_steps
from tilecraft.ops import ConvSchedule, Multiplier


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class TileWork:
    """Compute-unit cycles per output tile: one reduction step on the GEMM core, every step,
    the epilogue on the ALU (zeroing included) and the zeroing alone."""

    step: int
    gemm: int
    alu: int
    zero: int

    @property
    def alu_bound(self) -> bool:
        return self.alu > self.gemm

    @property
    def zero_on_gemm(self) -> bool:
        """Clear the accumulators with GEMM resets when the ALU is the busier unit (ResNet-18's
        first layer on pynq-z1: 662K -> 620K cycles)."""
        return self.alu > self.gemm + self.zero


def tile_work(cfg: HwConfig, low: MappedConv, s: ConvSchedule, t: Timing) -> TileWork:
    kh, kw = low.kernel
    steps = _ceil(low.icb, s.tile_ic)
    rows, cols = tile_shape(low, s)
    pix = rows * cols
    acc = s.tile_oc * pix
    imm, tensor = alu_passes(low)
    ep = low.epilogue
    multiplies = (
        0 if ep.on_unit else int(ep.multiplier != Multiplier.NONE) + int(bool(ep.pre_shift))
    )
    mul_extra = multiplies * (t.alu_mul_groups + t.alu_mul_tail)
    step = acc * s.tile_ic * kh * kw + t.insn_overhead + t.gemm_depth
    if low.windowed:  # the depthwise mode reads the window's rows of each column in turn
        wr, wc = window(low, s.tile_oh, s.tile_ow)  # (no pool after a depthwise layer)
        row = {"in_rows": wr, "in_cols": wc, "stride_y": low.stride[0], "stride_x": low.stride[1]}
        step = depthwise_steps(t.dw_window, t.dw_passes, row)
        step += t.insn_overhead + t.dw_passes + t.dw_depth
    gemm = steps * step
    zero_rows, maxima = acc, 0
    if low.pool:  # the window maxima (ALU tensor ops), then the epilogue on the pooled rows
        (tp, tq), (ph, pw) = pooled(low, s), low.pool.kernel
        out = s.tile_oc * tp * tq
        vertical = (ph - 1) * tp * cols * s.tile_oc  # into each window's anchor row
        handed = 2 * s.tile_oc * (cols + tp)  # the row and column handed on, onto zeros
        maxima = (vertical + pw * out + handed) * t.alu_ii_tensor + (ph + pw + 4) * 6
        zero_rows, acc = acc + out, out
    zero = 0 if low.windowed else zero_rows * t.alu_ii_imm + 6
    # a tensor pass reads its per-channel row once per channel block (alu_repeats)
    tensor_pass = acc * t.alu_ii_imm + s.tile_oc * (t.alu_ii_tensor - t.alu_ii_imm)
    alu = acc * (imm * t.alu_ii_imm + mul_extra) + tensor * tensor_pass + (imm + tensor) * 6
    alu += maxima + (zero_rows - acc) * t.alu_ii_imm  # (the zeroing pass: every row)
    if ep.residual and not ep.on_unit:  # its selector GEMM (the unit adds one on the way out)
        gemm += pix * low.residual_blocks(s.tile_oc, cfg) + 6
    return TileWork(step, gemm, alu, zero)
