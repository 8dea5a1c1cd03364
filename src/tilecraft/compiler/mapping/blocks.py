"""The first pass: how an operator maps onto the accelerator's blocks, before it is scheduled.

Channels are padded to block multiples. When the input has fewer channels than one block
(ResNet's first layer: 3 of 16 lanes), padding would waste most of the array, so the kernel taps
are folded into the reduction instead: the input is stored im2col-style (runtime.layout
`Im2col`) and the layer becomes a 1x1 convolution over C*KH*KW channels, filling 147 of 160
lanes for a 7x7 kernel on RGB instead of 3 of 16. A dense layer runs as a 1x1 convolution over
BATCH images of ceil(M/BATCH) rows each (runtime.layout `Rows`), so every batch lane is used
whatever M is. A depthwise layer runs as the convolution whose weights are diagonal blocks:
each output channel block reduces over the input block of the same channels only (`grouped`),
one diagonal (BLOCK_OUT x BLOCK_IN) weight block per tap; on a config with the GEMM core's
depthwise mode for its kernel (`depthwise_window`), it runs on that mode instead (`windowed`):
one DEPTHWISE instruction a tile, its taps packed BLOCK_IN an element (runtime.layout
`DepthwiseTaps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tilecraft.compiler.mapping.clip import clip_passes
from tilecraft.compiler.mapping.pool_windows import problems
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import isa_for
from tilecraft.hw.isa.formats import DW_STRIDES
from tilecraft.hw.isa.requant import PARAM_ROWS
from tilecraft.ops import Conv2d, Dense, DepthwiseConv2d, Epilogue, MaxPool2d, Multiplier
from tilecraft.runtime.layout import (
    Activation,
    Channels,
    DenseWeight,
    DepthwiseTaps,
    DepthwiseWeight,
    Im2col,
    Lanes,
    Layout,
    Rows,
    Weight,
)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class MappedConv:
    """An operator as the accelerator runs it: a convolution (after any tap folding) over
    channel blocks, and the layouts its tensors are stored in."""

    source: Conv2d | DepthwiseConv2d | Dense  # the operator as the user wrote it
    op: Conv2d  # the convolution it runs as (a dense layer's 1x1 convolution)
    epilogue: Epilogue
    folded: bool
    nbb: int  # batch blocks
    icb: int  # input channel blocks (of the possibly folded channels)
    ic: int  # channels the accelerator reduces over (IC, or IC*KH*KW when folded)
    h: int
    w: int
    ocb: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    oh: int
    ow: int
    round_row: bool  # the rounding constant 2**(shift-1) does not fit an ALU immediate
    windowed: bool = False  # a depthwise layer on the GEMM core's depthwise mode
    pool: MaxPool2d | None = None  # a max pool taken on the accumulators before the epilogue

    @property
    def wgt_taps(self) -> int:
        """Weight elements of one (output block, input block) pair: a diagonal block per tap,
        or on the depthwise mode the taps packed BLOCK_IN an element."""
        kk = self.kernel[0] * self.kernel[1]
        return self.window_passes if self.windowed else kk

    @property
    def window_passes(self) -> int:
        """Weight elements (array passes) of a channel block's taps on the depthwise mode."""
        return -(-self.kernel[0] * self.kernel[1] // self.ic)

    @property
    def grouped(self) -> bool:
        """Each output channel block reduces over the input block of its own channels only
        (a depthwise layer: `icb` is 1, and the block read is the output block's)."""
        return isinstance(self.source, DepthwiseConv2d)

    @property
    def input_blocks(self) -> int:
        """Channel blocks of the input tensor in DRAM."""
        return self.ocb if self.grouped else self.icb

    @property
    def pad_value(self) -> int:
        """What the input's padding holds (its zero point): the input LOADs write it."""
        return getattr(self.source, "pad_value", 0)

    @property
    def row_skip(self) -> bool:
        """1-row kernels with a row stride and no row padding load only the rows they use."""
        return self.kernel[0] == 1 and self.stride[0] > 1 and self.pad[0] == 0

    def lane_efficiency(self, cfg: HwConfig) -> float:
        """Fraction of the GEMM's reduction lanes that carry real input channels."""
        if self.windowed:  # a channel's taps over its row's lanes, pass by pass
            return self.kernel[0] * self.kernel[1] / (self.window_passes * cfg.block_in)
        if self.grouped:  # one lane of each diagonal weight block's row
            return 1 / cfg.block_in
        return self.ic / (self.icb * cfg.block_in)

    # ---- the tensors' layouts ----------------------------------------------------------------
    @property
    def input_layout(self) -> Layout:
        src = self.source
        if isinstance(src, Dense):
            return Rows(src.input_shape)
        if self.folded:
            return Im2col(src.input_shape, src.kernel, src.stride, src.pad, src.pad_value)
        return Activation(src.input_shape)

    @property
    def weight_layout(self) -> Layout:
        src = self.source
        if isinstance(src, Dense):
            return DenseWeight(src.weight_shape)
        if self.windowed:
            return DepthwiseTaps(src.weight_shape)
        if self.grouped:
            return DepthwiseWeight(src.weight_shape)
        return Weight(src.weight_shape, folded=self.folded)

    @property
    def output_layout(self) -> Layout:
        src = self.source
        if isinstance(src, Dense):
            return Rows(src.output_shape, Lanes.OUT)
        return Activation((self.pool or src).output_shape, Lanes.OUT)

    @property
    def residual_layout(self) -> Layout:
        """The residual is added as a GEMM input: int8 in BLOCK_IN lanes."""
        src = self.source
        return Rows(src.output_shape) if isinstance(src, Dense) else Activation(src.output_shape)

    @property
    def channel_layout(self) -> Layout:
        return Channels((self.source.channels,))

    # ---- what the epilogue keeps in the accumulator ------------------------------------------
    def param_vectors(self) -> tuple[str, ...]:
        """Per-channel accumulator rows the epilogue keeps resident: the accumulator bounds,
        the multiplier, and the bias folded with the rounding constant."""
        ep = self.epilogue
        if ep.on_unit:  # the requantization unit's rows: bias, scale, clip per channel block
            return ("requant",) * len(PARAM_ROWS)
        names = ("lo", "hi") if ep.acc_bounds else ()
        names += ("mul",) if ep.multiplier == Multiplier.CHANNEL else ()
        names += ("mul2",) if ep.pre_shift else ()
        return names + (("add",) if ep.bias else ())

    def param_rows(self) -> int:
        """Accumulator rows the epilogue's parameters take (each copy)."""
        return self.ocb * len(self.param_vectors()) + int(self.round_row)

    def select_rows(self, cfg: HwConfig) -> int:
        ep = self.epilogue  # the unit adds its residual itself: no selector GEMM
        return len(residual_offsets(cfg, self.op.oc)) if ep.residual and not ep.on_unit else 0

    def residual_blocks(self, tile_oc: int, cfg: HwConfig) -> int:
        """Most residual (BLOCK_IN-wide) blocks one tile of `tile_oc` output blocks touches."""
        bo, bi = cfg.block_out, cfg.block_in
        worst = 0
        for oc0 in _periodic_starts(self.ocb, tile_oc, tile_oc * bo, bi):
            lo = oc0 * bo
            hi = min((oc0 + tile_oc) * bo, self.op.oc)
            worst = max(worst, (hi - 1) // bi - lo // bi + 1)
        return worst

    def tensor_bytes(self) -> int:
        """Bytes of the operator's tensors as the user holds them (int8 activations and
        weights, int32 per-channel parameters): what its program's DRAM must hold at least."""
        src = self.source
        activations = [src.input_shape, src.weight_shape, (self.pool or src).output_shape]
        activations += [src.output_shape] if self.epilogue.residual else []
        params = 4 * src.channels * len(self.param_vectors())
        return sum(math.prod(shape) for shape in activations) + params

    def describe(self) -> str:
        text = self.source.describe()
        text += " (taps folded into channels)" if self.folded else ""
        return text + (f", then {self.pool.describe()}" if self.pool else "")


def alu_passes(low: MappedConv) -> tuple[int, int]:
    """(immediate, tensor) ALU passes over every accumulator of a tile, zeroing included."""
    ep = low.epilogue
    zeroing = 0 if low.windowed else 1  # the depthwise mode writes its outputs afresh
    if ep.on_unit:
        return zeroing, 0  # the requantization unit does the rest on the store
    imm = zeroing + int(bool(ep.shift)) + int(ep.multiplier == Multiplier.TENSOR)
    imm += clip_passes(ep.low, ep.high) if ep.final_clip else 0  # CLIP, or MAX and MIN
    imm += int(bool(ep.offset))  # the zero points' ADD
    tensor = int(ep.multiplier == Multiplier.CHANNEL) + int(ep.bias) + 2 * int(ep.acc_bounds)
    imm, tensor = imm + int(bool(ep.pre_shift)), tensor + int(bool(ep.pre_shift))  # >>p, x m2
    if (ep.pre_shift or not ep.bias) and ep.shift:  # the rounding is a pass of its own
        imm, tensor = (imm, tensor + 1) if low.round_row else (imm + 1, tensor)
    return imm, tensor


def residual_offsets(cfg: HwConfig, oc: int) -> list[int]:
    """Lane offsets d = ob*BLOCK_OUT - rb*BLOCK_IN of every (output block, residual block) pair
    that share channels; selector matrix E_d[o, i] = (i - o == d) moves residual lanes into
    output lanes through the GEMM (which also widens int8 to int32)."""
    bo, bi = cfg.block_out, cfg.block_in
    offsets = set()
    for ob in _periodic_starts(_ceil(oc, bo), 1, bo, bi):
        for rb in range(ob * bo // bi, (min((ob + 1) * bo, oc) - 1) // bi + 1):
            offsets.add(ob * bo - rb * bi)
    return sorted(offsets)


def _periodic_starts(count: int, step: int, width: int, bi: int) -> list[int]:
    """The starts 0, step, 2*step, ... below `count` of blocks `width` channels wide, one per
    distinct alignment to the residual's `bi`-channel blocks (they repeat every
    bi/gcd(width, bi) blocks), and the last, which may be cut short: every case the residual
    sees, however many channels there are."""
    period = bi // math.gcd(width, bi)
    starts = list(range(0, count, step))
    return starts[:period] + starts[-1:] if len(starts) > period else starts


def rounding_needs_a_row(cfg: HwConfig, shift: int) -> bool:
    """Whether the rounding constant 2**(shift-1) of a right shift is too large for an ALU
    immediate, so that one accumulator row holds it instead."""
    return shift > 0 and not isa_for(cfg).fits("imm", 1 << (shift - 1))


def map_conv2d(
    cfg: HwConfig,
    op: Conv2d,
    epilogue: Epilogue,
    fold: bool | None = None,
    pool: MaxPool2d | None = None,
) -> MappedConv:
    """Map `op` onto `cfg`'s blocks; `fold=None` folds taps when that fills more lanes. With
    `pool`, the max pool of its output is taken on its accumulators (operator.pool_epilogue)."""
    if pool is not None:
        why = problems(op, epilogue, pool)
        if why:
            raise ScheduleError(f"{pool.describe()} after {op.describe()}: " + "; ".join(why))
        return replace(map_conv2d(cfg, op, epilogue, fold), pool=pool)
    bi = cfg.block_in
    kk = op.kernel[0] * op.kernel[1]
    direct = op.ic / (_ceil(op.ic, bi) * bi)
    folded_eff = op.ic * kk / (_ceil(op.ic * kk, bi) * bi)
    if fold is None:
        fold = kk > 1 and folded_eff > direct + 0.25
    return _mapped(cfg, op, op, epilogue, fold)


def map_depthwise(cfg: HwConfig, op: DepthwiseConv2d, epilogue: Epilogue) -> MappedConv:
    """A depthwise layer as its block-diagonal convolution, one channel block at a time."""
    if cfg.block_in != cfg.block_out:
        raise ScheduleError(
            f"a depthwise conv needs BLOCK_IN == BLOCK_OUT (diagonal weight blocks); "
            f"{cfg.tag} has {cfg.block_in} and {cfg.block_out}"
        )
    mapped = _mapped(cfg, op, op.dense, epilogue, False)
    return replace(mapped, icb=1, ic=cfg.block_in, windowed=windowed(cfg, op))


def windowed(cfg: HwConfig, op: DepthwiseConv2d) -> bool:
    """Whether `op` runs on `cfg`'s depthwise mode: its square kernel is the mode's window,
    and its strides fit the instruction's fields."""
    kh, kw = op.kernel
    return kh == kw == cfg.depthwise_window and set(op.stride) <= set(DW_STRIDES)


def map_dense(cfg: HwConfig, op: Dense, epilogue: Epilogue) -> MappedConv:
    """A dense layer as a 1x1 convolution over BATCH images of ceil(M/BATCH) rows."""
    conv = Conv2d(cfg.batch, op.k, _ceil(op.m, cfg.batch), 1, op.n, kernel=1)
    return _mapped(cfg, op, conv, epilogue, False)


def _mapped(cfg, source, op: Conv2d, epilogue: Epilogue, fold: bool) -> MappedConv:
    if epilogue.on_unit and not cfg.requant_lanes:
        raise ScheduleError(
            f"the epilogue [{epilogue.describe()}] runs on the requantization unit, which config "
            f"{cfg.tag} does not have: compile it for a config with requant_lanes > 0 (e.g. "
            f"{cfg.with_requant_unit().tag})"
        )
    if epilogue.on_unit and epilogue.residual and not cfg.requant_residual:
        hint = (
            f"requant_residual = 1 (e.g. {cfg.with_requant_residual().tag})"
            if cfg.block_in == cfg.block_out
            else "requant_residual = 1, which needs BLOCK_IN == BLOCK_OUT"
        )
        raise ScheduleError(
            f"the epilogue [{epilogue.describe()}] adds its residual on the requantization unit, "
            f"whose residual add config {cfg.tag} does not have: compile it for a config with "
            f"{hint}"
        )
    bi = cfg.block_in
    ocb = _ceil(op.oc, cfg.block_out)
    common = dict(
        source=source,
        op=op,
        epilogue=epilogue,
        folded=fold,
        nbb=_ceil(op.n, cfg.batch),
        ocb=ocb,
        oh=op.oh,
        ow=op.ow,
        round_row=rounding_needs_a_row(cfg, epilogue.shift),
    )
    if fold:
        ic = op.ic * op.kernel[0] * op.kernel[1]
        return MappedConv(
            **common,
            icb=_ceil(ic, bi),
            ic=ic,
            h=op.oh,
            w=op.ow,
            kernel=(1, 1),
            stride=(1, 1),
            pad=(0, 0),
        )
    return MappedConv(
        **common,
        icb=_ceil(op.ic, bi),
        ic=op.ic,
        h=op.h,
        w=op.w,
        kernel=op.kernel,
        stride=op.stride,
        pad=op.pad,
    )
