"""Clamping to an output range (compiler/clip.py): one CLIP pass for byte bounds, MAX then MIN
otherwise, and what the conv epilogue emits for int8 outputs."""

import numpy as np

from tilecraft.compiler.mapping.clip import clip, clip_passes
from tilecraft.compiler.operator.conv2d import compile_conv2d
from tilecraft.hw.config import preset
from tilecraft.hw.isa import AluOp, Opcode, clip_bounds, decode, isa_for
from tilecraft.ops import Conv2d, Epilogue

ROWS = dict(uop_bgn=0, uop_end=1, iter_out=4, dst_out=1)


def test_byte_bounds_take_one_pass_and_wider_ones_two():
    (one,) = clip(0, 127, **ROWS)
    assert one.op == AluOp.CLIP and one.use_imm and clip_bounds(one.imm) == (0, 127)
    assert (one.iter_out, one.dst_out) == (4, 1)
    wide = clip(-1000, 1000, last=dict(push_next=True), **ROWS)
    assert [(x.op, x.imm) for x in wide] == [(AluOp.MAX, -1000), (AluOp.MIN, 1000)]
    assert [x.push_next for x in wide] == [False, True]
    assert clip_passes(-128, 127) == 1 and clip_passes(-129, 127) == 2


def test_a_relu_conv_clips_in_one_pass_per_tile():
    cfg = preset("1x8x8")
    op = Conv2d(1, 16, 6, 6, 16, kernel=3, pad=1)
    w = np.random.default_rng(0).integers(-128, 128, op.weight_shape, dtype=np.int8)
    for relu, bounds in ((True, (0, 127)), (False, (-128, 127))):
        comp = compile_conv2d(cfg, op, Epilogue(shift=8, relu=relu), weight=w, name="c")
        table = decode(isa_for(cfg), comp.program.insns)
        alus = table[table["opcode"] == Opcode.ALU]
        clips = alus[alus["alu_op"] == AluOp.CLIP]
        assert len(clips) and {clip_bounds(int(x)) for x in clips["imm"]} == {bounds}
        assert not np.isin(alus["alu_op"], [AluOp.MIN, AluOp.MAX]).any()
