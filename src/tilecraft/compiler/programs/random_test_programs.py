"""Seeded random programs for differential tests (simulator vs RTL): every opcode, LOAD
padding, 2-D strides, micro-op loops, GEMM resets, immediate and tensor ALU ops, several
STOREs (on a config with the requantization unit, half of them requantizing, with parameter
sets in each bank, one for the transfer or one per row; with `store_to_inp`, half of those
into INP rows the GEMMs read), and on a config with the depthwise mode DEPTHWISEs over small
planes of either stride. Dependence flags come from the token
pass, and every program passes the static verifier, so any difference between two devices is a
bug in one of them."""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.analysis.tokens import insert_tokens
from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.operator.builder import ProgramBuilder
from tilecraft.errors import TilecraftError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Alu, AluOp, Depthwise, Finish, Gemm, Load, MemId, Store, Uop
from tilecraft.hw.isa.requant import PARAM_ROWS, pack_clip, pack_scale
from tilecraft.ops.requant import scale_fields
from tilecraft.runtime.buffers import Role
from tilecraft.runtime.program import Program

ROWS = 24  # scratchpad rows each random program uses, per buffer
POOL = 4  # micro-ops per (unit, accumulator half)
PARAM_AT, PARAM_SETS = 40, 3  # requantization parameter sets: rows from PARAM_AT of each bank


def random_program(cfg: HwConfig, seed: int, length: int = 24) -> tuple[Program, dict]:
    """A verified random program and random inputs for it (tries a few draws per seed)."""
    for attempt in range(50):
        try:
            program = _draw(cfg, np.random.default_rng([seed, attempt]), length, f"random{seed}")
            verify(program)
        except TilecraftError:
            continue
        rng = np.random.default_rng(seed)
        inputs = {}
        for b in program.inputs:
            info = np.iinfo(np.dtype(b.dtype))
            lo, hi = (-(1 << 20), 1 << 20) if info.bits > 8 else (info.min, info.max)
            inputs[b.name] = rng.integers(lo, hi + 1, b.shape, dtype=np.dtype(b.dtype))
        return program, inputs
    raise AssertionError(f"no verified random program for seed {seed}")


def _draw(cfg: HwConfig, rng: np.random.Generator, length: int, name: str) -> Program:
    pb = ProgramBuilder(cfg, name)
    half = cfg.acc_bank_rows
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    src = {
        "inp": pb.buffer("inp", Role.INPUT, (64, b, bi), np.int8),
        "wgt": pb.buffer("wgt", Role.INPUT, (32, bo, bi), np.int8),
        "acc": pb.buffer("acc", Role.INPUT, (32, b, bo), np.int32),
    }
    out = pb.buffer("out", Role.OUTPUT, (64, b, bo), np.int8)
    # micro-ops: small indices so loops stay in range; four pools of POOL, for GEMM or ALU
    # (whose src is an ACC row too) in the lower or upper accumulator half, so an instruction
    # keeps to one half (what the units need to run side by side, see sim/simulator.py)
    uops, pools = [], {}
    for unit in ("gemm", "alu"):
        for base in (0, half):
            pools[unit, base] = len(uops)
            for _ in range(POOL):
                dst, row = base + int(rng.integers(0, 6)), int(rng.integers(0, 8))
                uops.append(Uop(dst, row + (base if unit == "alu" else 0), int(rng.integers(0, 8))))
    region = pb.place_uops(uops)
    insns = [pb.load_uops()]
    # initialise what the random part may read
    for kind, mem, bases in (
        ("inp", MemId.INP, (0,)),
        ("wgt", MemId.WGT, (0,)),
        ("acc", MemId.ACC, (0, half)),
    ):
        dram = pb.elem(src[kind], kind)
        for base in bases:
            insns.append(
                Load(mem=mem, sram_base=base, dram_base=dram, y_size=1, x_size=ROWS, x_stride=ROWS)
            )
    out_next = 0
    # INP padding values from a stream of their own (the rest draws as it always did)
    pad_values = rng.spawn(1)[0].integers(-128, 128, length).tolist()
    requant = _requant_parameters(cfg, pb, insns, rng.spawn(1)[0]) if cfg.requant_lanes else None
    windows = rng.spawn(1)[0] if cfg.depthwise_window else None  # a stream of their own too
    into_inp = rng.spawn(1)[0] if cfg.store_to_inp else None  # and STOREs into INP
    residuals = rng.spawn(1)[0] if cfg.requant_residual else None  # and the unit's residuals
    for _ in range(length):
        if windows is not None and windows.random() < 0.3:
            insns.append(_depthwise(cfg, windows, half))
        kind = rng.choice(["inp", "wgt", "acc", "gemm", "reset", "alu", "alu", "store"])
        if kind in ("inp", "wgt", "acc"):
            mem = {"inp": MemId.INP, "wgt": MemId.WGT, "acc": MemId.ACC}[kind]
            x, y = int(rng.integers(1, 4)), int(rng.integers(1, 3))
            pads = [int(rng.integers(0, 2)) for _ in range(4)]
            width, height = pads[2] + x + pads[3], pads[0] + y + pads[1]
            base = int(rng.integers(0, ROWS - width * height + 1))
            if kind == "acc":
                base += int(rng.choice([0, half]))
            stride = x + int(rng.integers(0, 3))
            first = int(rng.integers(0, 8))
            insns.append(
                Load(
                    mem=mem,
                    sram_base=base,
                    dram_base=pb.elem(src[kind], kind) + first,
                    y_size=y,
                    x_size=x,
                    x_stride=stride,
                    y_pad0=pads[0],
                    y_pad1=pads[1],
                    x_pad0=pads[2],
                    x_pad1=pads[3],
                    pad_value=pad_values.pop() if kind == "inp" else 0,
                )
            )
        elif kind in ("gemm", "reset", "alu"):
            first = pools["alu" if kind == "alu" else "gemm", int(rng.choice([0, half]))]
            bgn = first + int(rng.integers(0, POOL))
            end = int(rng.integers(bgn + 1, min(bgn + 3, first + POOL) + 1))
            loop = dict(
                uop_bgn=bgn,
                uop_end=end,
                iter_out=int(rng.integers(1, 3)),
                iter_in=int(rng.integers(1, 3)),
                dst_out=int(rng.integers(0, 3)),
                dst_in=int(rng.integers(0, 2)),
                src_out=int(rng.integers(0, 3)),
                src_in=int(rng.integers(0, 2)),
            )
            if kind == "alu":
                op = AluOp(int(rng.integers(0, len(AluOp))))
                use_imm = bool(rng.random() < 0.6)
                imm = (
                    int(rng.integers(-40, 40)) if op == AluOp.SHR else int(rng.integers(-999, 999))
                )
                insns.append(Alu(op=op, use_imm=use_imm, imm=imm, **loop))
            else:
                insns.append(
                    Gemm(
                        reset=kind == "reset",
                        wgt_out=int(rng.integers(0, 2)),
                        wgt_in=int(rng.integers(0, 2)),
                        **loop,
                    )
                )
        else:
            x, y = int(rng.integers(1, 4)), int(rng.integers(1, 3))
            base = int(rng.integers(0, 6)) + int(rng.choice([0, half]))
            stride = x + int(rng.integers(0, 2))
            if out_next + (y - 1) * stride + x > 64:
                continue
            fields = {}
            if requant is not None and requant.random() < 0.5:  # the parameters in its bank
                per_row = bool(requant.random() < 0.5)
                sets = y if per_row else 1
                first = int(requant.integers(0, PARAM_SETS - sets + 1))
                bank = base - base % half
                fields = _requant_fields(bank + PARAM_AT, first, per_row)
                if residuals is not None and residuals.random() < 0.5:  # from loaded INP rows
                    at = int(residuals.integers(0, ROWS - x * y + 1))
                    fields |= dict(residual=True, residual_base=at)
            span = (y - 1) * stride + x
            if fields and into_inp is not None and into_inp.random() < 0.5:  # rows GEMMs read
                at = int(into_inp.integers(0, ROWS - span + 1))
                insns.append(
                    Store(
                        sram_base=base,
                        dram_base=at,
                        y_size=y,
                        x_size=x,
                        x_stride=stride,
                        to_inp=True,
                        **fields,
                    )
                )
                continue
            insns.append(_store(pb, out, out_next, base, y, x, stride, fields))
            out_next += span
    insns.append(Finish())
    return pb.build(insert_tokens(cfg, insns, uops, region))


def _depthwise(cfg: HwConfig, rng, half: int) -> Depthwise:
    """A DEPTHWISE over a plane within the loaded INP rows, its outputs in one bank."""
    k = cfg.depthwise_window
    rows = k + int(rng.integers(0, 3))
    cols = k + int(rng.integers(0, max(ROWS // rows - k, 0) + 1))
    sy, sx = (int(s) for s in rng.integers(1, 3, 2))
    outputs = ((rows - k) // sy + 1) * ((cols - k) // sx + 1)
    return Depthwise(
        acc_base=int(rng.integers(0, ROWS - outputs + 1)) + int(rng.choice([0, half])),
        inp_base=int(rng.integers(0, ROWS - rows * cols + 1)),
        wgt_base=int(rng.integers(0, ROWS - cfg.depthwise_passes + 1)),
        in_rows=rows,
        in_cols=cols,
        stride_y=sy,
        stride_x=sx,
    )


def _requant_fields(sets_at: int, first: int, per_row: bool) -> dict:
    """A requantizing STORE's fields: its parameters from set `first` of those at `sets_at`."""
    return dict(requant=True, param_base=sets_at + len(PARAM_ROWS) * first, param_per_row=per_row)


def _store(pb: ProgramBuilder, out, at: int, base: int, y: int, x: int, stride: int, fields):
    """A STORE of y rows of x accumulator rows from `base` into `out`, from its element `at`."""
    dram = pb.elem(out, "out") + at
    return Store(sram_base=base, dram_base=dram, y_size=y, x_size=x, x_stride=stride, **fields)


def _requant_parameters(
    cfg: HwConfig, pb: ProgramBuilder, insns: list, rng, sets: int = PARAM_SETS, at: int = PARAM_AT
):
    """`sets` random sets of parameter rows (biases past the accumulators' range, scales
    from 2**-12 to 2**-2 that leave some outputs inside the clip, zero points, clips) loaded
    into each bank from row `at`; they and the STOREs' draws come from `rng`, a stream of the
    program's own (returned), so a config without the unit draws as it always did."""
    b, bo = cfg.batch, cfg.block_out
    rows = []
    for _ in range(sets):
        scale = (rng.uniform(1, 2, bo) * 2.0 ** rng.integers(-12, -2, bo)).astype(np.float32)
        fields = scale_fields(scale)
        lo = rng.integers(-128, 0, bo)
        hi = rng.integers(0, 128, bo)
        rows += [
            rng.integers(-(1 << 22), 1 << 22, bo),
            pack_scale(fields.significand.astype(np.int64), fields.exponent.astype(np.int64)),
            pack_clip(rng.integers(-60, 60, bo), lo, hi),
        ]
    data = np.zeros((len(rows), b, bo), np.int32)
    data[:, 0, :] = np.array(rows, np.int64).astype(np.int32)  # channel c in lane c of batch 0
    params = pb.buffer("requant", Role.CONSTANT, data.shape, np.int32, data=data)
    count = len(rows)
    for bank in (0, cfg.acc_bank_rows):
        insns.append(
            Load(
                mem=MemId.ACC,
                sram_base=bank + at,
                dram_base=pb.elem(params, "acc"),
                y_size=1,
                x_size=count,
                x_stride=count,
            )  # fmt: skip
        )
    return rng


def requant_pace_program(cfg: HwConfig, seed: int, stores: int = 8) -> tuple[Program, dict]:
    """Requantizing STOREs long enough that the unit, not the DRAM, sets their pace: a
    parameter set per row of 3-12 rows of 1-5 elements (each set's gap), or one set for 16-63
    elements, from either bank, some behind an ALU pass in their bank (the grant waits for
    it). On a config with the unit; verified, with random inputs."""
    if not cfg.requant_lanes:
        raise TilecraftError(f"config {cfg.tag} has no requantization unit to pace")
    rng = np.random.default_rng(seed)
    pb = ProgramBuilder(cfg, f"requant-pace{seed}")
    half, data_rows, sets = cfg.acc_bank_rows, 64, 12
    b, bo = cfg.batch, cfg.block_out
    acc = pb.buffer("acc", Role.INPUT, (data_rows, b, bo), np.int32)
    out = pb.buffer("out", Role.OUTPUT, (stores * data_rows, b, bo), np.int8)
    uops = [Uop(bank + r, bank + r, 0) for bank in (0, half) for r in range(8)]
    region = pb.place_uops(uops)
    insns = [pb.load_uops()]
    for bank in (0, half):
        insns.append(
            Load(
                mem=MemId.ACC,
                sram_base=bank,
                dram_base=pb.elem(acc, "acc"),
                y_size=1,
                x_size=data_rows,
                x_stride=data_rows,
            )  # fmt: skip
        )
    _requant_parameters(cfg, pb, insns, rng, sets, at=data_rows)
    out_next = 0
    for _ in range(stores):
        bank = int(rng.choice([0, half]))
        if rng.random() < 0.5:  # an ALU pass over the bank's first rows, 8 at a time
            first = 0 if bank == 0 else 8
            iters = int(rng.integers(1, 8))
            insns.append(
                Alu(op=AluOp.ADD, use_imm=True, imm=int(rng.integers(-99, 99)),
                    uop_bgn=first, uop_end=first + 8, iter_out=iters, dst_out=8, src_out=8)
            )  # fmt: skip
        per_row = bool(rng.random() < 0.6)
        if per_row:
            y, x = int(rng.integers(3, 13)), int(rng.integers(1, 6))
            first_set = int(rng.integers(0, sets - y + 1))
        else:
            y, x, first_set = 1, int(rng.integers(16, data_rows)), int(rng.integers(0, sets))
        base = bank + int(rng.integers(0, data_rows - x * y + 1))
        fields = _requant_fields(bank + data_rows, first_set, per_row)
        insns.append(_store(pb, out, out_next, base, y, x, x, fields))
        out_next += x * y
    insns.append(Finish())
    program = pb.build(insert_tokens(cfg, insns, uops, region))
    verify(program)
    return program, {"acc": rng.integers(-(1 << 20), 1 << 20, acc.shape, dtype=np.int32)}


def inp_turns_program(cfg: HwConfig, seed: int, rounds: int = 8) -> tuple[Program, dict]:
    """STOREs into INP (configs with `store_to_inp`) in turns with INP LOADs on INP's one write
    port, and a GEMM over what they wrote after each: per round, an INP LOAD of 1-8 rows (a
    row or two, padded at times), a requantizing STORE into INP of 1-4 rows of 1-8 elements
    (one parameter set, or one a row) from either bank, some behind an ALU pass in their bank,
    into rows that may overlap the LOAD's, and a GEMM adding INP's first 48 rows into rows of
    the upper bank; those rows STOREd to DRAM at the end. Verified, with random inputs."""
    if not cfg.store_to_inp:
        raise TilecraftError(f"config {cfg.tag} has no path from STORE into INP")
    rng = np.random.default_rng(seed)
    pb = ProgramBuilder(cfg, f"inp-turns{seed}")
    half, data_rows, sets, rows = cfg.acc_bank_rows, 64, 12, 48
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    acc = pb.buffer("acc", Role.INPUT, (data_rows, b, bo), np.int32)
    inp = pb.buffer("inp", Role.INPUT, (64, b, bi), np.int8)
    wgt = pb.buffer("wgt", Role.INPUT, (1, bo, bi), np.int8)
    out = pb.buffer("out", Role.OUTPUT, (rows, b, bo), np.int8)
    total = half + 2 * data_rows  # the GEMM's rows, past the upper bank's data and parameters
    uops = [Uop(total, 0, 0)] + [Uop(bank + r, bank + r, 0) for bank in (0, half) for r in range(8)]
    region = pb.place_uops(uops)
    insns = [pb.load_uops()]
    for mem, base, buf, n in ((MemId.ACC, 0, acc, data_rows), (MemId.ACC, half, acc, data_rows),
                              (MemId.WGT, 0, wgt, 1), (MemId.INP, 0, inp, rows)):  # fmt: skip
        dram = pb.elem(buf, "acc" if mem == MemId.ACC else "wgt" if mem == MemId.WGT else "inp")
        insns.append(Load(mem=mem, sram_base=base, dram_base=dram, y_size=1, x_size=n, x_stride=n))
    _requant_parameters(cfg, pb, insns, rng, sets, at=data_rows)
    insns.append(Gemm(reset=True, uop_bgn=0, uop_end=1, iter_out=rows, dst_out=1))
    for _ in range(rounds):
        x, y = int(rng.integers(1, 9)), int(rng.integers(1, 3))
        pads = [int(rng.integers(0, 2)) if rng.random() < 0.3 else 0 for _ in range(4)]
        box = (pads[0] + y + pads[1]) * (pads[2] + x + pads[3])
        insns.append(
            Load(mem=MemId.INP, sram_base=int(rng.integers(0, rows - box + 1)),
                 dram_base=pb.elem(inp, "inp") + int(rng.integers(0, 64 - 2 * x)), y_size=y,
                 x_size=x, x_stride=x, y_pad0=pads[0], y_pad1=pads[1], x_pad0=pads[2],
                 x_pad1=pads[3], pad_value=int(rng.integers(-128, 128)))
        )  # fmt: skip
        bank = int(rng.choice([0, half]))
        if rng.random() < 0.4:  # an ALU pass over the bank's first rows: the grant waits
            first = 1 if bank == 0 else 9
            insns.append(
                Alu(op=AluOp.ADD, use_imm=True, imm=int(rng.integers(-99, 99)),
                    uop_bgn=first, uop_end=first + 8, iter_out=int(rng.integers(1, 4)),
                    dst_out=8, src_out=8)
            )  # fmt: skip
        y, x = int(rng.integers(1, 5)), int(rng.integers(1, 9))
        stride = x + int(rng.integers(0, 3))
        per_row = bool(rng.random() < 0.5)
        first_set = int(rng.integers(0, sets - (y if per_row else 1) + 1))
        insns.append(
            Store(sram_base=bank + int(rng.integers(0, data_rows - x * y + 1)),
                  dram_base=int(rng.integers(0, rows - (y - 1) * stride - x + 1)), y_size=y,
                  x_size=x, x_stride=stride, to_inp=True,
                  **_requant_fields(bank + data_rows, first_set, per_row))
        )  # fmt: skip
        insns.append(Gemm(uop_bgn=0, uop_end=1, iter_out=rows, dst_out=1, src_out=1))
    insns += [_store(pb, out, 0, total, 1, rows, rows, {}), Finish()]
    program = pb.build(insert_tokens(cfg, insns, uops, region))
    verify(program)
    inputs = {
        "acc": rng.integers(-(1 << 20), 1 << 20, acc.shape, dtype=np.int32),
        "inp": rng.integers(-128, 128, inp.shape, dtype=np.int8),
        "wgt": rng.integers(-128, 128, wgt.shape, dtype=np.int8),
    }
    return program, inputs


def out_of_order_program(cfg: HwConfig, seed: int = 0) -> tuple[Program, dict]:
    """A long GEMM over the last 64 rows of the lower accumulator half, then a short ALU pass
    on the upper half's first row (it runs alongside the GEMM and finishes first), then a
    STORE of all 65 rows. The token pass gives the STORE one token, from the ALU: it must
    vouch for the older GEMM as well."""
    pb = ProgramBuilder(cfg, "out-of-order units")
    half = cfg.acc_bank_rows
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    shapes = {"inp": (8, b, bi), "wgt": (1, bo, bi), "acc": (65, b, bo)}
    src = {
        name: pb.buffer(name, Role.INPUT, shape, np.int32 if name == "acc" else np.int8)
        for name, shape in shapes.items()
    }
    out = pb.buffer("out", Role.OUTPUT, (65, b, bo), np.int8)
    uops = [Uop(half - 64, 0, 0), Uop(half, 0, 0)]
    region = pb.place_uops(uops)
    insns = [pb.load_uops()]
    for name, mem in (("inp", MemId.INP), ("wgt", MemId.WGT), ("acc", MemId.ACC)):
        n, sram = shapes[name][0], half - 64 if name == "acc" else 0
        dram = pb.elem(src[name], name)
        insns.append(Load(mem=mem, sram_base=sram, dram_base=dram, y_size=1, x_size=n, x_stride=n))
    insns += [
        Gemm(uop_bgn=0, uop_end=1, iter_out=64, iter_in=8, dst_out=1, src_in=1),
        Alu(op=AluOp.ADD, use_imm=True, imm=7, uop_bgn=1, uop_end=2),
        Store(sram_base=half - 64, dram_base=pb.elem(out, "out"), y_size=1, x_size=65, x_stride=65),
        Finish(),
    ]
    program = pb.build(insert_tokens(cfg, insns, uops, region))
    verify(program)
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, shape in shapes.items():
        lo, hi, dtype = (-(1 << 20), 1 << 20, np.int32) if name == "acc" else (-128, 128, np.int8)
        inputs[name] = rng.integers(lo, hi, shape, dtype=dtype)
    return program, inputs
