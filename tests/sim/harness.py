"""Run hand-written instruction lists on the simulator with data placed in DRAM at chosen
offsets, and naive (loop-per-element) numpy references to check the vectorized semantics."""

from __future__ import annotations

import numpy as np

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Finish, Load, MemId, Store, encode, encode_uops, isa_for
from tilecraft.hw.isa.requant import pack_clip, pack_scale
from tilecraft.ops.requant import scale_fields
from tilecraft.sim.simulator import run_image

DATA_BYTES = 1 << 16  # data region; instructions go after it


def run(
    cfg: HwConfig,
    insns: list,
    data: dict[int, np.ndarray] | None = None,
    *,
    uops=None,
    uop_offset: int = 0,
    finish: bool = True,
    dram_bytes: int = DATA_BYTES,
    **options,
):
    """Place `data` {byte offset: array} and micro-ops, append FINISH, run; (report, machine,
    dram)."""
    spec = isa_for(cfg)
    dram = np.zeros(dram_bytes + 16 * (len(insns) + 1), np.uint8)
    for offset, arr in (data or {}).items():
        raw = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
        dram[offset : offset + raw.size] = raw
    if uops is not None:
        raw = encode_uops(spec, uops).view(np.uint8)
        dram[uop_offset : uop_offset + raw.size] = raw
    program = list(insns) + ([Finish()] if finish else [])
    words = encode(spec, program).astype("<u8").view(np.uint8).reshape(-1)
    dram[dram_bytes : dram_bytes + words.size] = words
    report, machine = run_image(cfg, dram, dram_bytes, len(program), **options)
    return report, machine, dram


def wrap(values: np.ndarray, bits: int) -> np.ndarray:
    """Two's-complement wrap of int64 values to `bits`."""
    v = np.asarray(values, np.int64) & ((1 << bits) - 1)
    return np.where(v >= 1 << (bits - 1), v - (1 << bits), v)


def naive_loop(row: dict, uops: list):
    """Yield (dst, src, wgt) of every step of a GEMM/ALU loop in execution order."""
    for i in range(row["iter_out"]):
        for j in range(row["iter_in"]):
            for u in uops[row["uop_bgn"] : row["uop_end"]]:
                yield (
                    u.dst + i * row["dst_out"] + j * row["dst_in"],
                    u.src + i * row["src_out"] + j * row["src_in"],
                    u.wgt + i * row.get("wgt_out", 0) + j * row.get("wgt_in", 0),
                )


def naive_alu(op: str, a: int, b: int, bits: int) -> int:
    """One lane of the ALU, written out from the spec with Python integers."""
    if op == "MIN":
        r = min(a, b)
    elif op == "MAX":
        r = max(a, b)
    elif op == "ADD":
        r = a + b
    elif op == "MUL":
        r = a * b
    elif op == "CLIP":  # bounds: the operand's low two bytes, signed; hi first
        hi, lo = (b & 0xFF), (b >> 8) & 0xFF
        hi, lo = hi - 256 if hi > 127 else hi, lo - 256 if lo > 127 else lo
        r = min(max(a, lo), hi)
    else:  # SHR: signed amount from the low log2(bits)+1 bits
        amount = b & (2 * bits - 1)
        if amount >= bits:
            amount -= 2 * bits
        r = a >> amount if amount >= 0 else (a << -amount)
    return (
        int(wrap(np.array([r]), bits)[0])
        if abs(r) < (1 << 62)
        else int(wrap(np.array([r % (1 << bits)]), bits)[0])
    )


def requant_rows(cfg, rng, rows: int):
    """Accumulator rows, then a requantizing STORE's three parameter rows for random per-channel
    biases, scales, zero points and clips; (acc rows with params, the per-channel values)."""
    b, bo = cfg.batch, cfg.block_out
    acc = rng.integers(-(2**31), 2**31, (rows + 3, b, bo)).astype(np.int64)
    acc[: rows // 2] = rng.integers(-(2**20), 2**20, (rows // 2, b, bo))  # inside the clip
    scale = (rng.uniform(1, 2, bo) * 2.0 ** rng.integers(-21, -15, bo)).astype(np.float32)
    bias = rng.integers(-(2**19), 2**19, bo)
    zero = rng.integers(-40, 40, bo)
    lo = rng.integers(-128, -60, bo)
    hi = rng.integers(60, 128, bo)
    fields = scale_fields(scale)
    acc[rows] = bias
    acc[rows + 1] = pack_scale(fields.significand, fields.exponent)
    acc[rows + 2] = pack_clip(zero, lo, hi)
    return acc.astype(np.int32), (bias, scale, zero, lo, hi)


def requant_store(cfg, rows: int, dram_base: int, param_base: int, y_size=1, loaded=None, **store):
    """Load `loaded` accumulator rows from DRAM byte 0 (the data's and three parameter rows past
    them), then a requantizing STORE of `y_size` rows of `rows` elements each to `dram_base`
    (DRAM elements, or INP rows with `to_inp`), then a compute no-op that waits for it."""
    loaded = rows * y_size + 3 if loaded is None else loaded
    idle = dict(sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0)
    store = {"x_stride": rows, **store}
    return [
        Load(
            mem=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=loaded, x_stride=loaded,
            push_next=True,
        ),
        Store(
            sram_base=0, dram_base=dram_base, y_size=y_size, x_size=rows, pop_prev=True,
            push_prev=True, requant=True, param_base=param_base, **store,
        ),
        Load(mem=MemId.UOP, **idle, pop_next=True),
    ]  # fmt: skip


def requant_store_program(cfg, acc: np.ndarray, store: dict, out_rows: int = 8, then=()):
    """A program of its own (for the RTL device): accumulator rows `acc` (with their parameter
    rows) LOADed, one requantizing STORE of `store`'s fields (its `dram_base` an element of
    the output buffer of `out_rows` rows unless given), a compute no-op that waits for it,
    `then`, FINISH."""
    from tilecraft.compiler.operator.builder import ProgramBuilder
    from tilecraft.runtime.buffers import Role

    pb = ProgramBuilder(cfg, "store")
    rows = pb.buffer("acc", Role.CONSTANT, acc.shape, np.int32, data=acc)
    out = pb.buffer("o", Role.OUTPUT, (out_rows, cfg.batch, cfg.block_out), np.int8)
    idle = dict(sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0)
    n = len(acc)
    fields = {"sram_base": 0, "dram_base": pb.elem(out, "out"), "y_size": 1, "requant": True}
    return pb.build(
        [
            Load(
                mem=MemId.ACC,
                sram_base=0,
                dram_base=pb.elem(rows, "acc"),
                y_size=1,
                x_size=n,
                x_stride=n,
                push_next=True,
            ),
            Store(pop_prev=True, push_prev=True, **(fields | store)),
            Load(mem=MemId.UOP, **idle, pop_next=True),
            *then,
            Finish(),
        ]  # fmt: skip
    )
