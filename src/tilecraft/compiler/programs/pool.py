"""Max pooling on the accelerator: the window maximum on the vector ALU.

Per tile of output rows (one batch block, one channel block, `toh` rows, every column): LOAD
the input rows the windows cover (padded with the op's `pad_value`: -128 stands for ONNX's
-inf), widen them into the accumulator with the GEMM core (an identity weight matrix),
copy the first tap into the output rows the same way, then one ALU MAX per remaining tap over
the whole tile (a two-level loop: rows x columns with the stride in the source), and STORE.
Tiles alternate between the two accumulator banks and two input slots, so the next tile's load
overlaps this tile's work; `insert_tokens` orders the rest.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.analysis.tokens import insert_tokens
from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.mapping.clip import clip
from tilecraft.compiler.operator.builder import MAX_INSNS, ProgramBuilder
from tilecraft.compiler.operator.kernels import UopKernels
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import ACC_BANKS, HwConfig
from tilecraft.hw.isa import Alu, AluOp, Finish, Gemm, Load, MemId, Store, Uop, isa_for
from tilecraft.hw.isa.requant import PARAM_ROWS, pack_clip, pack_scale
from tilecraft.ops import Computation, GlobalAvgPool2d, MaxPool2d
from tilecraft.ops.requant import scale_fields
from tilecraft.runtime.buffers import Role
from tilecraft.runtime.layout import Activation, Lanes
from tilecraft.runtime.program import Program

SLOTS = 2


def _tile_rows(cfg: HwConfig, op: MaxPool2d) -> int:
    """The most output rows per tile whose input rows fit an input slot and whose input and
    output rows fit one accumulator bank."""
    (kh, _), (sh, _) = op.kernel, op.stride
    width = op.w + op.pads[1] + op.pads[3]
    inp_slot = cfg.depth("inp") // SLOTS
    bank = cfg.acc_bank_rows
    best = 0
    for toh in range(1, op.oh + 1):
        rows_in = ((toh - 1) * sh + kh) * width
        if rows_in > inp_slot or rows_in + toh * op.ow > bank:
            break
        best = toh
    if not best:
        rows_in = kh * width
        limit = (
            f"an input slot of {inp_slot} rows"
            if rows_in > inp_slot
            else f"an accumulator bank of {bank} rows (with its {op.ow} output rows)"
        )
        raise ScheduleError(
            f"{op.describe()}: one output row's windows ({rows_in} input rows) do not fit {limit}"
        )
    return best


def _buffers(cfg: HwConfig, op, name: str, diagonal: int = 1):
    """A pooling program's builder and buffers: input and output activations, and the
    diagonal weight tile (the identity, or `diagonal` times it) that widens int8 rows into the
    accumulator."""
    pb = ProgramBuilder(cfg, name)
    lay_in = Activation(op.input_shape, Lanes.INP)
    lay_out = Activation(op.output_shape, Lanes.OUT)
    x = pb.buffer("input", Role.INPUT, lay_in.stored_shape(cfg), np.int8, layout=lay_in)
    y = pb.buffer("output", Role.OUTPUT, lay_out.stored_shape(cfg), np.int8, layout=lay_out)
    eye = (np.eye(cfg.block_out, cfg.block_in, dtype=np.int8) * np.int8(diagonal))[None]
    ident = pb.buffer("identity", Role.CONSTANT, eye.shape, np.int8, data=eye)
    return pb, x, y, ident


def finish_program(
    cfg: HwConfig, op, pb: ProgramBuilder, weights, kernels: UopKernels, body: list, tiles: int = 1
) -> Program:
    """The verified program of a fixed operator (a pool, a scaled add): micro-ops and its
    `tiles` weight tiles (`weights`, into weight rows 0..) loaded first, then `body`, tokens
    inserted."""
    region = pb.place_uops(kernels.uops)
    prologue = [
        pb.load_uops(),
        Load(
            mem=MemId.WGT,
            sram_base=0,
            dram_base=pb.elem(weights, "wgt"),
            y_size=1,
            x_size=tiles,
            x_stride=tiles,
        ),
    ]
    insns = prologue + body + [Finish()]
    if len(insns) > MAX_INSNS:
        raise ScheduleError(
            f"{op.describe()} needs {len(insns):,} instructions, more than {MAX_INSNS:,}"
        )
    insns = insert_tokens(cfg, insns, list(kernels.uops), region)
    program = pb.build(insns, computation=Computation(op))
    verify(program)
    return program


def compile_maxpool(cfg: HwConfig, op: MaxPool2d, name: str = "maxpool") -> Program:
    """A verified program computing `op` (the LOADs pad with its `pad_value`)."""
    if cfg.block_in != cfg.block_out:
        raise ScheduleError(
            "max pooling widens rows through an identity GEMM: it needs "
            f"block_in == block_out, not {cfg.block_in} and {cfg.block_out}"
        )
    pad = isa_for(cfg).field("y_pad0")
    if max(op.pads) > pad.hi:
        raise ScheduleError(f"maxpool pads {list(op.pads)} exceed the LOAD's {pad.hi}")
    (kh, kw), (sh, sw) = op.kernel, op.stride
    t_pad, l_pad, b_pad, r_pad = op.pads
    width = op.w + l_pad + r_pad
    toh = _tile_rows(cfg, op)
    nbs = -(-op.n // cfg.batch)
    cbs = -(-op.c // cfg.block_in)
    pb, x, y, ident = _buffers(cfg, op, name)
    kernels = UopKernels()
    bank = cfg.acc_bank_rows
    tiles = [
        (nb, cb, oh0, min(toh, op.oh - oh0))
        for nb in range(nbs)
        for cb in range(cbs)
        for oh0 in range(0, op.oh, toh)
    ]
    body: list = []
    x0, y0 = pb.elem(x, "inp"), pb.elem(y, "out")
    for t, (nb, cb, oh0, rows) in enumerate(tiles):
        slot = t % SLOTS
        inp = slot * (cfg.depth("inp") // SLOTS)
        acc_in = (slot % ACC_BANKS) * bank
        height = (rows - 1) * sh + kh
        out = acc_in + height * width
        ih0 = oh0 * sh - t_pad  # first input row of the tile, maybe in the padding
        top, bottom = max(0, -ih0), max(0, ih0 + height - op.h)
        plane = x0 + (nb * cbs + cb) * op.h * op.w
        body.append(
            Load(
                mem=MemId.INP,
                sram_base=inp,
                dram_base=plane + max(ih0, 0) * op.w,
                y_size=height - top - bottom,
                x_size=op.w,
                x_stride=op.w,
                y_pad0=top,
                y_pad1=bottom,
                x_pad0=l_pad,
                x_pad1=r_pad,
                pad_value=op.pad_value if top + bottom + l_pad + r_pad else 0,
            ),
        )
        everything = kernels.loop(
            ("rows", acc_in, inp),
            [Uop(acc_in, inp, 0)],
            outer=(height, width, width, 0),
            inner=(width, 1, 1, 0),
        )
        body += [Gemm(reset=True, **everything), Gemm(**everything)]
        first = kernels.loop(
            ("first", out, inp),
            [Uop(out, inp, 0)],
            outer=(rows, op.ow, sh * width, 0),
            inner=(op.ow, 1, sw, 0),
        )
        body += [Gemm(reset=True, **first), Gemm(**first)]
        taps = [Uop(out, acc_in + i * width + j) for i in range(kh) for j in range(kw)][1:]
        if taps:
            fields = kernels.loop(
                ("taps", out, acc_in),
                taps,
                outer=(rows, op.ow, sh * width, 0),
                inner=(op.ow, 1, sw, 0),
            )
            body.append(Alu(op=AluOp.MAX, **fields))
        dst = y0 + ((nb * cbs + cb) * op.oh + oh0) * op.ow
        body.append(
            Store(
                sram_base=out, dram_base=dst, y_size=1, x_size=rows * op.ow, x_stride=rows * op.ow
            )
        )
    return finish_program(cfg, op, pb, ident, kernels, body)


def compile_global_avgpool(cfg: HwConfig, op: GlobalAvgPool2d, name: str = "gap") -> Program:
    """A verified program computing `op`: per group of channel planes, LOAD the planes, sum each
    into one accumulator row with the GEMM core (an identity weight, the plane's rows on the
    inner loop), then MUL, ADD the rounding constant, SHR, clip on the ALU, and STORE."""
    if cfg.block_in != cfg.block_out:
        raise ScheduleError(
            "global average pooling sums rows through an identity GEMM: it "
            f"needs block_in == block_out, not {cfg.block_in}, {cfg.block_out}"
        )
    if op.on_unit:
        return _global_avgpool_on_unit(cfg, op, name)
    imm = isa_for(cfg).field("imm")
    offset_in = -op.h * op.w * op.input_zero * op.weight
    if (
        op.multiplier > imm.hi
        or (op.shift and 1 << (op.shift - 1) > imm.hi)
        or not imm.lo <= offset_in <= imm.hi
    ):
        raise ScheduleError(
            f"{op.describe()}: the multiplier, 2**(shift-1) and H*W times the "
            f"input zero point must fit the ALU immediate (<= {imm.hi})",
        )
    pb, x, y, ident = _buffers(cfg, op, name, op.weight)
    kernels = UopKernels()
    y0 = pb.elem(y, "out")
    body: list = []
    for first, count, acc, sums in _plane_sums(cfg, op, pb, x, kernels, cfg.acc_bank_rows):
        body += sums
        rows = kernels.loop(("rows", acc), [Uop(acc, acc)], outer=(count, 1, 1, 0))
        if offset_in:
            body.append(Alu(op=AluOp.ADD, use_imm=True, imm=offset_in, **rows))
        body.append(Alu(op=AluOp.MUL, use_imm=True, imm=op.multiplier, **rows))
        if op.pre_shift:
            body.append(Alu(op=AluOp.SHR, use_imm=True, imm=op.pre_shift, **rows))
        if op.shift:
            body.append(Alu(op=AluOp.ADD, use_imm=True, imm=1 << (op.shift - 1), **rows))
            body.append(Alu(op=AluOp.SHR, use_imm=True, imm=op.shift, **rows))
        if op.output_zero:
            body.append(Alu(op=AluOp.ADD, use_imm=True, imm=op.output_zero, **rows))
        body += clip(-128, 127, **rows)
        body.append(
            Store(sram_base=acc, dram_base=y0 + first, y_size=1, x_size=count, x_stride=count)
        )
    return finish_program(cfg, op, pb, ident, kernels, body)


def _global_avgpool_on_unit(cfg: HwConfig, op: GlobalAvgPool2d, name: str) -> Program:
    """`op` with a float32 scale: the planes summed by the GEMM core as above, then each
    STORE requantizes (onnxruntime's arithmetic, on the requantization unit) with one set of
    parameter rows for every channel (bias -H*W*input_zero, the scale, the output zero point
    and int8's clip), kept in the accumulator's last rows."""
    if not cfg.requant_lanes:
        raise ScheduleError(
            f"{op.describe()} requantizes on the requantization unit, which config {cfg.tag} "
            f"does not have (requant_lanes = 0)"
        )
    rows = len(PARAM_ROWS)
    # a copy at the top of each bank, above its tiles (the unit reads a STORE's own bank)
    params_at = [(b + 1) * cfg.acc_bank_rows - rows for b in range(ACC_BANKS)]
    fields = scale_fields(np.float32(op.scale))
    lanes = (cfg.batch, cfg.block_out)
    data = np.stack(
        [
            np.full(lanes, -op.h * op.w * op.input_zero, np.int64),
            np.full(lanes, pack_scale(int(fields.significand), int(fields.exponent)), np.int64),
            np.full(lanes, pack_clip(op.output_zero, -128, 127), np.int64),
        ]
    ).astype(np.int32)
    pb, x, y, ident = _buffers(cfg, op, name)
    params = pb.buffer("requant", Role.CONSTANT, data.shape, np.int32, data=data)
    kernels = UopKernels()
    y0 = pb.elem(y, "out")
    body: list = [
        Load(mem=MemId.ACC, sram_base=at, dram_base=pb.elem(params, "acc"), y_size=1,
             x_size=rows, x_stride=rows) for at in params_at
    ]  # fmt: skip
    for first, count, acc, sums in _plane_sums(cfg, op, pb, x, kernels, cfg.acc_bank_rows - rows):
        store = Store(sram_base=acc, dram_base=y0 + first, y_size=1, x_size=count, x_stride=count,
                      requant=True, param_base=params_at[cfg.acc_bank(acc)])  # fmt: skip
        body += [*sums, store]
    return finish_program(cfg, op, pb, ident, kernels, body)


def _plane_sums(cfg: HwConfig, op: GlobalAvgPool2d, pb, x, kernels: UopKernels, room: int):
    """Per group of channel planes (at most `room` accumulator rows in a bank): its first
    plane, its planes, its accumulator rows' base, and the instructions that LOAD the planes
    and sum each into its row (a GEMM reset, then the identity GEMM over the plane's rows)."""
    plane = op.h * op.w
    slot_rows = cfg.depth("inp") // SLOTS
    if plane > slot_rows:
        raise ScheduleError(
            f"{op.describe()}: a {plane}-row plane exceeds an input slot ({slot_rows} rows)"
        )
    group = min(slot_rows // plane, room)
    planes = -(-op.n // cfg.batch) * -(-op.c // cfg.block_in)  # consecutive in DRAM, in and out
    x0 = pb.elem(x, "inp")
    out = []
    for t, first in enumerate(range(0, planes, group)):
        count = min(group, planes - first)
        slot = t % SLOTS
        inp = slot * slot_rows
        acc = (slot % ACC_BANKS) * cfg.acc_bank_rows
        load = Load(mem=MemId.INP, sram_base=inp, dram_base=x0 + first * plane, y_size=1,
                    x_size=count * plane, x_stride=count * plane)  # fmt: skip
        sums = kernels.loop(("sum", acc, inp), [Uop(acc, inp, 0)],
                            outer=(count, 1, plane, 0), inner=(plane, 0, 1, 0))  # fmt: skip
        resets = kernels.loop(("rows", acc), [Uop(acc, acc)], outer=(count, 1, 1, 0))
        out.append((first, count, acc, [load, Gemm(reset=True, **resets), Gemm(**sums)]))
    return out
