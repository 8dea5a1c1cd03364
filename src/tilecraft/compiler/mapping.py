"""How a convolution maps onto the accelerator's blocks before it is scheduled.

Channels are padded to block multiples. When the input has fewer channels than one block
(ResNet's first layer: 3 of 16 lanes), padding would waste most of the array, so the kernel
taps are folded into the reduction instead: the input is stored im2col-style (runtime.layout
``im2col``) and the layer becomes a 1x1 convolution over C*KH*KW channels, filling 147 of 160
lanes for a 7x7 kernel on RGB instead of 3 of 16.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.compiler.ops import Conv2d, Epilogue
from tilecraft.hw.config import HwConfig


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Lowered:
    """The convolution as the accelerator runs it (after any tap folding)."""

    op: Conv2d  # the operator as the user wrote it
    epilogue: Epilogue
    folded: bool
    n: int
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

    @property
    def row_skip(self) -> bool:
        """1-row kernels with a row stride and no row padding load only the rows they use."""
        return self.kernel[0] == 1 and self.stride[0] > 1 and self.pad[0] == 0

    def lane_efficiency(self, cfg: HwConfig) -> float:
        """Fraction of the GEMM's reduction lanes that carry real input channels."""
        return self.ic / (self.icb * cfg.block_in)

    def input_layout(self) -> dict:
        op = self.op
        if self.folded:
            return {
                "pack": "im2col",
                "logical": list(op.input_shape),
                "kernel": list(op.kernel),
                "stride": list(op.stride),
                "pad": list(op.pad),
            }
        return {"pack": "activation", "logical": list(op.input_shape), "block": "inp"}

    def weight_layout(self) -> dict:
        return {"pack": "weight", "logical": list(self.op.weight_shape), "folded": self.folded}

    def param_vectors(self) -> tuple[str, ...]:
        """Per-channel accumulator rows the epilogue keeps resident: the multiplier, and the
        bias folded with the rounding constant."""
        ep = self.epilogue
        names = ("mul",) if ep.multiplier == "channel" else ()
        return names + (("add",) if ep.bias else ())

    def needs_round_row(self) -> bool:
        """Rounding constants >= 2**15 do not fit an immediate: one row holds it."""
        return self.epilogue.shift > 15

    def param_rows(self) -> int:
        return self.ocb * len(self.param_vectors()) + int(self.needs_round_row())

    def select_rows(self, cfg: HwConfig) -> int:
        return len(residual_offsets(cfg, self.op.oc)) if self.epilogue.residual else 0

    def residual_blocks(self, tile_oc: int, cfg: HwConfig) -> int:
        """Most residual (BLOCK_IN-wide) blocks one tile of `tile_oc` output blocks touches."""
        bo, bi = cfg.block_out, cfg.block_in
        worst = 0
        for oc0 in range(0, self.ocb, tile_oc):
            lo = oc0 * bo
            hi = min((oc0 + tile_oc) * bo, self.op.oc)
            worst = max(worst, (hi - 1) // bi - lo // bi + 1)
        return worst

    def describe(self) -> str:
        text = self.op.describe()
        return text + (" (taps folded into channels)" if self.folded else "")


def residual_offsets(cfg: HwConfig, oc: int) -> list[int]:
    """Lane offsets d = ob*BLOCK_OUT - rb*BLOCK_IN of every (output block, residual block) pair
    that share channels; selector matrix E_d[o, i] = (i - o == d) moves residual lanes into
    output lanes through the GEMM (which also widens int8 to int32)."""
    bo, bi = cfg.block_out, cfg.block_in
    offsets = set()
    for ob in range(_ceil(oc, bo)):
        for rb in range(ob * bo // bi, (min((ob + 1) * bo, oc) - 1) // bi + 1):
            offsets.add(ob * bo - rb * bi)
    return sorted(offsets)


def lower(cfg: HwConfig, op: Conv2d, epilogue: Epilogue, fold: bool | None = None) -> Lowered:
    """Map `op` onto `cfg`'s blocks; `fold=None` folds taps when that fills more lanes."""
    bi = cfg.block_in
    kk = op.kernel[0] * op.kernel[1]
    direct = op.ic / (_ceil(op.ic, bi) * bi)
    folded_eff = op.ic * kk / (_ceil(op.ic * kk, bi) * bi)
    if fold is None:
        fold = kk > 1 and folded_eff > direct + 0.25
    common = dict(
        op=op,
        epilogue=epilogue,
        folded=fold,
        n=op.n,
        nbb=_ceil(op.n, cfg.batch),
        ocb=_ceil(op.oc, cfg.block_out),
        oh=op.oh,
        ow=op.ow,
    )
    if fold:
        ic = op.ic * kk
        return Lowered(
            **common,
            icb=_ceil(ic, bi),
            ic=ic,
            h=op.oh,
            w=op.ow,
            kernel=(1, 1),
            stride=(1, 1),
            pad=(0, 0),
        )
    return Lowered(
        **common,
        icb=_ceil(op.ic, bi),
        ic=op.ic,
        h=op.h,
        w=op.w,
        kernel=op.kernel,
        stride=op.stride,
        pad=op.pad,
    )
