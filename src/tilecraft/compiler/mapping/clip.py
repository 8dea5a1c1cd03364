"""Clamping accumulators to an output range: one CLIP pass where both bounds are signed bytes
(hw/isa `clip_fits`: every int8 output, ReLU or not), else MAX then MIN (two passes)."""

from __future__ import annotations

from dataclasses import replace

from tilecraft.hw.isa import Alu, AluOp, clip_fits, clip_operand


def clip_passes(lo: int, hi: int) -> int:
    """ALU passes over each accumulator that clamping to [lo, hi] takes."""
    return 1 if clip_fits(lo, hi) else 2


def clip(lo: int, hi: int, *, last: dict | None = None, **fields) -> list[Alu]:
    """ALU instructions clamping the rows `fields` name (an immediate-operand loop) to
    [lo, hi]; `last`: flags (pushes) for the last of them."""
    if clip_fits(lo, hi):
        out = [Alu(op=AluOp.CLIP, use_imm=True, imm=clip_operand(lo, hi), **fields)]
    else:
        out = [
            Alu(op=AluOp.MAX, use_imm=True, imm=lo, **fields),
            Alu(op=AluOp.MIN, use_imm=True, imm=hi, **fields),
        ]
    if last:
        out[-1] = replace(out[-1], **last)
    return out
