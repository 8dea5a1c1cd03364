"""Max pooling on the accelerator: the window maximum on the vector ALU.

Per tile of output rows (one batch block, one channel block, `toh` rows, every column): LOAD
the input rows the windows cover (padded with the op's `pad_value`: -128 stands for ONNX's
-inf), widen them into the accumulator with the GEMM core (an identity weight matrix), take
the maxima on the ALU, and STORE. Where windows overlap by one row and one column (kernel =
stride + 1: ResNet's 3x3 stride 2) the ALU takes rows then columns, each tap two windows share
read once (`_separable_max`); otherwise the GEMM copies the first tap into the output rows and
one ALU MAX per remaining tap runs over the whole tile (a two-level loop: rows x columns with
the stride in the source). Tiles alternate between the two accumulator banks and two input
slots, and the next tile's GEMMs go among this tile's ALU instructions, so the next tile's
load and widening overlap this tile's maxima; `insert_tokens` orders the rest.
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
from tilecraft.hw.timing import Timing, busy_cycles
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
    kh, (sh, sw) = op.kernel[0], op.stride
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
    x0, y0 = pb.elem(x, "inp"), pb.elem(y, "out")
    separable = _separable(op) and _separable_pays(cfg, op, toh, width)
    parts = []  # per tile: its LOAD, its GEMMs, its ALU MAXes, its STORE
    for t, (nb, cb, oh0, rows) in enumerate(tiles):
        slot = t % SLOTS
        inp = slot * (cfg.depth("inp") // SLOTS)
        acc_in = (slot % ACC_BANKS) * bank
        height = (rows - 1) * sh + kh
        out = acc_in + height * width
        ih0 = oh0 * sh - t_pad  # first input row of the tile, maybe in the padding
        top, bottom = max(0, -ih0), max(0, ih0 + height - op.h)
        plane = x0 + (nb * cbs + cb) * op.h * op.w
        load = Load(
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
        )
        everything = kernels.loop(
            ("rows", acc_in, inp),
            [Uop(acc_in, inp, 0)],
            outer=(height, width, width, 0),
            inner=(width, 1, 1, 0),
        )
        gemms = [Gemm(reset=True, **everything), Gemm(**everything)]
        if separable:
            alus = _separable_max(cfg, kernels, op, acc_in, out, rows, width)
        else:
            first = kernels.loop(
                ("first", out, inp),
                [Uop(out, inp, 0)],
                outer=(rows, op.ow, sh * width, 0),
                inner=(op.ow, 1, sw, 0),
            )
            gemms += [Gemm(reset=True, **first), Gemm(**first)]  # the first tap, copied
            alus = _tap_max(kernels, op, acc_in, out, rows, width)
        dst = y0 + ((nb * cbs + cb) * op.oh + oh0) * op.ow
        size = rows * op.ow
        store = Store(sram_base=out, dram_base=dst, y_size=1, x_size=size, x_stride=size)
        parts.append((load, gemms, alus, store))
    if separable:
        body = _pipelined(cfg, parts)
    else:  # one MAX a tile: the next tile's GEMMs issue as it does
        body = [insn for load, gemms, alus, store in parts for insn in (load, *gemms, *alus, store)]
    return finish_program(cfg, op, pb, ident, kernels, body)


def _pipelined(cfg: HwConfig, parts: list) -> list:
    """The tiles' instructions in program order, the next tile's GEMMs among this tile's ALU
    instructions (the two units run side by side on the two accumulator banks, but the compute
    stage issues in program order: GEMMs after several ALU instructions wait for the last)."""
    timing = Timing.from_config(cfg)
    load, gemms, _, _ = parts[0]
    body = [load, *gemms]
    for t, (_, _, alus, store) in enumerate(parts):
        if t + 1 < len(parts):
            load, gemms, _, _ = parts[t + 1]
            body += [load, *_in_issue_order(timing, gemms, alus)]
        else:
            body += alus
        body.append(store)
    return body


def _in_issue_order(timing: Timing, gemms: list, alus: list) -> list:
    """GEMMs and ALU instructions merged, each list in its order, so that an in-order issue
    keeps both units busy: the next is the one whose unit frees first (a GEMM on a tie)."""
    out, free, issued, g, a = [], {"gemm": 0, "alu": 0}, 0, 0, 0
    while g < len(gemms) or a < len(alus):
        take_gemm = a == len(alus) or (g < len(gemms) and free["gemm"] <= free["alu"])
        insn = gemms[g] if take_gemm else alus[a]
        unit = "gemm" if take_gemm else "alu"
        issued = max(free[unit], issued)  # in order: not before the one before it
        free[unit] = issued + busy_cycles(timing, insn.row())
        g, a = g + take_gemm, a + (not take_gemm)
        out.append(insn)
    return out


def _tap_max(kernels: UopKernels, op: MaxPool2d, acc_in: int, out: int, rows: int, width: int):
    """One ALU MAX over the tile per tap but the first (which the output rows hold)."""
    (kh, kw), (sh, sw) = op.kernel, op.stride
    taps = [Uop(out, acc_in + i * width + j) for i in range(kh) for j in range(kw)][1:]
    if not taps:
        return []
    each = (rows, op.ow, sh * width, 0), (op.ow, 1, sw, 0)
    return [Alu(op=AluOp.MAX, **kernels.loop(("taps", out, acc_in), taps, *each))]


def _separable_pays(cfg: HwConfig, op: MaxPool2d, rows: int, width: int) -> bool:
    """Whether a full tile's ALU time (each instruction's cycles and its issue) is shorter
    taken separably than tap by tap: not on small images, where the separable passes' several
    instructions a tile cost more than the taps they save."""
    timing = Timing.from_config(cfg)
    out = ((rows - 1) * op.stride[0] + op.kernel[0]) * width  # after the tile's input rows

    def cycles(alus: list) -> int:
        return sum(busy_cycles(timing, a.row()) + timing.issue_ii for a in alus)

    separable = _separable_max(cfg, UopKernels(), op, 0, out, rows, width)
    return cycles(separable) < cycles(_tap_max(UopKernels(), op, 0, out, rows, width))


def _separable(op: MaxPool2d) -> bool:
    """Whether `op`'s windows overlap by one row and one column, each with a row and a column
    of its own (kernel = stride + 1, stride >= 2: ResNet's 3x3 stride 2): the windows
    `_separable_max` can take (whether it pays: `_separable_pays`)."""
    return all(k == s + 1 and s >= 2 for k, s in zip(op.kernel, op.stride))


def _separable_max(
    cfg: HwConfig, kernels: UopKernels, op: MaxPool2d, acc_in: int, out: int, rows: int, width: int
) -> list:
    """The ALU instructions taking a tile's window maxima (its input rows widened at `acc_in`,
    `width` apart) into its output rows at `out`, for kernel = stride + 1.

    A window's taps are s+1 rows by s+1 columns, its first row and column the previous window's
    last. Rows first, in place: each window's max over its rows goes into its anchor row (its
    second, which no other window reads), every column at once. Then columns, into the output
    rows (cleared, then the anchor column added): each output takes the max of its anchor row
    at the window's columns. A row or column that two windows share is one micro-op with two
    destinations whose source is read once (a repeated source costs the ALU one cycle, not two:
    `Timing.alu_ii_tensor`), so a shared tap costs three cycles for two windows, not four.
    Nothing here runs on the GEMM core, which widens the next tile meanwhile. The ALU clears
    the output rows just before it writes them: a GEMM clearing them ahead would wait for the
    STORE of this bank's tile before, which DRAM reads slow down.
    """
    sh, sw = op.stride
    top = sh * rows  # the tile's last input row (the last window's last)
    cols = sw * op.ow + 1  # the input columns some window reads
    anchor = acc_in + width  # window r's anchor row: input row sh * r + 1
    alus = []

    def alu(key, uops, outer, inner=(1, 0, 0, 0), alu_op=AluOp.MAX, **imm):
        fields = kernels.loop((key, acc_in, out, rows), uops, outer, inner)
        alus.append(Alu(op=alu_op, **imm, **fields))

    down = sh * width  # accumulator rows from one window's rows to the next's
    for r in range(1, rows):  # rows two windows share: into both anchors, read once
        shared = acc_in + r * down
        alu(("v2", r), [Uop(shared - (sh - 1) * width, shared)], (cols, 1, 1, 0), (2, down, 0, 0))
    ends = [Uop(anchor, acc_in), Uop(acc_in + (top - sh + 1) * width, acc_in + top * width)]
    alu("v1", ends, (cols, 1, 1, 0))  # the first window's first row, the last's last
    for t in range(2, sh):  # rows of one window besides its anchor (stride 3 and more)
        alu(("vt", t), [Uop(anchor, acc_in + t * width)], (rows, down, down, 0), (cols, 1, 1, 0))
    outputs = (rows, op.ow, 0, 0), (op.ow, 1, 0, 0)
    alu("clear", [Uop(out, out)], *outputs, alu_op=AluOp.SHR, use_imm=True, imm=-cfg.acc_bits)
    each = (rows, op.ow, down, 0), (op.ow, 1, sw, 0)
    alu(("ht", 1), [Uop(out, anchor + 1)], *each, alu_op=AluOp.ADD)  # the anchor column
    for t in range(2, sw):  # columns of one window besides its anchor (stride 3 and more)
        alu(("ht", t), [Uop(out, anchor + t)], *each)
    if op.ow > 1:  # columns two windows share
        for r in range(rows):
            src = anchor + r * down + sw
            alu(("h2", r), [Uop(out + r * op.ow, src)], (op.ow - 1, 1, sw, 0), (2, 1, 0, 0))
    last = out + op.ow - 1
    ends = [Uop(out, anchor), Uop(last, anchor + sw * op.ow)]
    alu("h1", ends, (rows, op.ow, down, 0))  # the first window's first column, the last's last
    return alus


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
