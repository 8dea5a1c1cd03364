"""The Add of two int8 tensors at their own scales (`ops.ScaledAdd`) on the accelerator: a
model quantized by others rounds a conv's output before adding it to the residual branch, so
the sum is a layer of its own, not a conv epilogue.

Per group of activation rows (elements of BATCH x BLOCK_IN values; both inputs and the output
share the blocked layout, so a group is one contiguous run of each): LOAD the rows of `a` and of
`b` into one input slot, widen each into its own accumulator rows through the GEMM core with a
diagonal weight tile (weight_a or weight_b times the identity: the first factor of each side's
ratio, free), then on the ALU: less each side's zero point (times its weight), times its
multiplier, the two added, the floor and rounding shifts, plus the output's zero point, clipped;
STORE. Groups alternate between the two input slots and accumulator banks, so the next group's
loads overlap this one's work.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.mapping.clip import clip
from tilecraft.compiler.operator.builder import ProgramBuilder
from tilecraft.compiler.operator.kernels import UopKernels
from tilecraft.compiler.programs.pool import finish_program
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import ACC_BANKS, HwConfig
from tilecraft.hw.isa import Alu, AluOp, Gemm, Load, MemId, Store, Uop
from tilecraft.ops import ScaledAdd
from tilecraft.runtime.buffers import Role
from tilecraft.runtime.layout import Activation, Lanes
from tilecraft.runtime.program import Program

SLOTS = 2


def compile_scaled_add(cfg: HwConfig, op: ScaledAdd, name: str = "add") -> Program:
    """A verified program computing `op` (see the module)."""
    if cfg.block_in != cfg.block_out:
        raise ScheduleError(
            "a scaled add widens rows through a diagonal GEMM: it needs "
            f"block_in == block_out, not {cfg.block_in} and {cfg.block_out}"
        )
    pb = ProgramBuilder(cfg, name)
    lay_in, lay_out = Activation(op.input_shape, Lanes.INP), Activation(op.input_shape, Lanes.OUT)
    shape = lay_in.stored_shape(cfg)
    a = pb.buffer("input", Role.INPUT, shape, np.int8, layout=lay_in)
    b = pb.buffer("residual", Role.INPUT, shape, np.int8, layout=lay_in)
    y = pb.buffer("output", Role.OUTPUT, lay_out.stored_shape(cfg), np.int8, layout=lay_out)
    eye = np.eye(cfg.block_out, cfg.block_in, dtype=np.int8)
    diagonals = np.stack([eye * np.int8(op.weight_a), eye * np.int8(op.weight_b)])
    weights = pb.buffer("diagonals", Role.CONSTANT, diagonals.shape, np.int8, data=diagonals)
    rows = int(np.prod(shape[:-2]))  # activation elements, in DRAM order, the same in all three
    group = min(cfg.depth("inp") // SLOTS // 2, cfg.acc_bank_rows // 2)
    kernels = UopKernels()
    a0, b0, y0 = pb.elem(a, "inp"), pb.elem(b, "inp"), pb.elem(y, "out")
    body: list = []
    for t, first in enumerate(range(0, rows, group)):
        count = min(group, rows - first)
        inp = (t % SLOTS) * (cfg.depth("inp") // SLOTS)
        acc = (t % ACC_BANKS) * cfg.acc_bank_rows
        body += [
            Load(
                mem=MemId.INP,
                sram_base=inp,
                dram_base=a0 + first,
                y_size=1,
                x_size=count,
                x_stride=count,
            ),
            Load(
                mem=MemId.INP,
                sram_base=inp + count,
                dram_base=b0 + first,
                y_size=1,
                x_size=count,
                x_stride=count,
            ),
        ]
        both = kernels.loop(("rows", acc), [Uop(acc, acc)], outer=(2 * count, 1, 1, 0))
        body.append(Gemm(reset=True, **both))
        for side in (0, 1):  # each side into its own rows, through its diagonal
            dst, src = acc + side * count, inp + side * count
            body.append(
                Gemm(
                    **kernels.loop(
                        ("widen", dst, src, side), [Uop(dst, src, side)], outer=(count, 1, 1, 0)
                    )
                )
            )
        body += _requantize(op, kernels, acc, count)
        body.append(
            Store(sram_base=acc, dram_base=y0 + first, y_size=1, x_size=count, x_stride=count)
        )
    return finish_program(cfg, op, pb, weights, kernels, body, tiles=2)


def _requantize(op: ScaledAdd, kernels: UopKernels, acc: int, count: int) -> list:
    """The ALU passes over a group: each side's zero point and multiplier, their sum, the
    shifts, the output's zero point and the clip."""
    out = []

    def rows(side: int) -> dict:
        base = acc + side * count
        return kernels.loop(("rows", base), [Uop(base, base)], outer=(count, 1, 1, 0))

    for side, zero, weight, m in (
        (0, op.zero_a, op.weight_a, op.multiplier_a),
        (1, op.zero_b, op.weight_b, op.multiplier_b),
    ):
        if zero:
            out.append(Alu(op=AluOp.ADD, use_imm=True, imm=-zero * weight, **rows(side)))
        out.append(Alu(op=AluOp.MUL, use_imm=True, imm=m, **rows(side)))
    total = kernels.loop(("sum", acc, count), [Uop(acc, acc + count)], outer=(count, 1, 1, 0))
    out.append(Alu(op=AluOp.ADD, **total))
    if op.pre_shift:
        out.append(Alu(op=AluOp.SHR, use_imm=True, imm=op.pre_shift, **rows(0)))
    if op.shift:
        out.append(Alu(op=AluOp.ADD, use_imm=True, imm=1 << (op.shift - 1), **rows(0)))
        out.append(Alu(op=AluOp.SHR, use_imm=True, imm=op.shift, **rows(0)))
    if op.zero_y:
        out.append(Alu(op=AluOp.ADD, use_imm=True, imm=op.zero_y, **rows(0)))
    out += clip(op.clip[0], op.clip[1], **rows(0))
    return out
