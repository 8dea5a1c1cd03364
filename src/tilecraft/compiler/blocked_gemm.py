"""A hand-scheduled blocked GEMM with double buffering: the spine's example program.

C = clip((A @ B) >> shift) as int8, with A (M, K) and B (K, N) int8. A is packed into INP
elements (M/BATCH, K/BLOCK_IN, BATCH, BLOCK_IN), B^T into WGT elements (N/BLOCK_OUT, K/BLOCK_IN,
BLOCK_OUT, BLOCK_IN), C comes out as (M/BATCH, N/BLOCK_OUT, BATCH, BLOCK_OUT).

With `overlap`, INP/WGT and ACC are split into two halves used alternately, and tokens let the
load of step s+1 run under the GEMM of step s and the store of a tile under the next tile's
GEMMs. Without it, one half is used and every step waits for the previous one (the baseline).
"""

from __future__ import annotations

import itertools

import numpy as np

from tilecraft.compiler.builder import ProgramBuilder
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Alu, AluOp, Finish, Gemm, Load, MemId, Store, Uop
from tilecraft.hw.isa.formats import ITER_BITS
from tilecraft.runtime.program import Program
from tilecraft.sim.timing import Timing


def pack_a(cfg: HwConfig, a: np.ndarray) -> np.ndarray:
    m, k = a.shape
    b, bi = cfg.batch, cfg.block_in
    return np.ascontiguousarray(a.reshape(m // b, b, k // bi, bi).transpose(0, 2, 1, 3))


def pack_b(cfg: HwConfig, w: np.ndarray) -> np.ndarray:
    k, n = w.shape
    bi, bo = cfg.block_in, cfg.block_out
    return np.ascontiguousarray(w.T.reshape(n // bo, bo, k // bi, bi).transpose(0, 2, 1, 3))


def unpack_c(cfg: HwConfig, c: np.ndarray) -> np.ndarray:
    mb, nb, b, bo = c.shape
    return c.transpose(0, 2, 1, 3).reshape(mb * b, nb * bo)


def reference(cfg: HwConfig, a: np.ndarray, w: np.ndarray, shift: int) -> np.ndarray:
    """The numpy oracle: int32-wrapping accumulate, arithmetic shift, clip, int8."""
    acc = (a.astype(np.int64) @ w.astype(np.int64)).astype(np.int32).astype(np.int64)
    lo, hi = -(1 << (cfg.out_bits - 1)), (1 << (cfg.out_bits - 1)) - 1
    return np.clip(acc >> shift, lo, hi).astype(np.int8)


def choose_tiles(cfg: HwConfig, mb: int, kb: int, nb: int, overlap: bool) -> tuple[int, int, int]:
    """Tile sizes (in blocks) that fit the scratchpad halves and minimise a simple estimate of
    the pipeline: with overlap, fill (one DMA) + steps x max(GEMM, DMA) + drain (one GEMM);
    without, steps x (GEMM + DMA)."""
    halves = 2 if overlap else 1
    timing = Timing.from_config(cfg)
    best = None
    for tm, tn, tk in itertools.product(_divisors(mb), _divisors(nb), _divisors(kb)):
        if not _fits(cfg, tm, tn, tk, halves):
            continue
        gemm = tm * tn * tk + 16  # micro-ops plus a few cycles of instruction overhead
        dma = timing.transfer(tm, tk * cfg.elem_bytes("inp"))
        dma += timing.transfer(tn, tk * cfg.elem_bytes("wgt"))
        dma += 2 * (cfg.dram_latency + timing.insn_overhead)
        steps = (mb // tm) * (nb // tn) * (kb // tk)
        cost = dma + steps * max(gemm, dma) + gemm if overlap else steps * (gemm + dma)
        key = (cost, -tm * tn * tk)
        if best is None or key < best[0]:
            best = (key, (tm, tn, tk))
    if best is None:
        raise ScheduleError(f"no tiling of a {mb}x{kb}x{nb}-block GEMM fits the scratchpads")
    return best[1]


def blocked_gemm(
    cfg: HwConfig,
    m: int,
    k: int,
    n: int,
    *,
    tiles: tuple[int, int, int] | None = None,
    overlap: bool = True,
    shift: int = 8,
) -> Program:
    b_, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    for name, dim, block in (("M", m, b_), ("K", k, bi), ("N", n, bo)):
        if dim <= 0 or dim % block:
            raise ScheduleError(f"{name} = {dim} must be a positive multiple of {block}")
    mb, kb, nb = m // b_, k // bi, n // bo
    tm, tn, tk = tiles or choose_tiles(cfg, mb, kb, nb, overlap)
    halves = 2 if overlap else 1
    for name, total, t in (("tm", mb, tm), ("tn", nb, tn), ("tk", kb, tk)):
        if t <= 0 or total % t:
            raise ScheduleError(f"tile {name} = {t} must divide {total} blocks")
    if not _fits(cfg, tm, tn, tk, halves):
        raise ScheduleError(f"tiles {tm}x{tn}x{tk} do not fit the scratchpads ({halves} halves)")

    pb = ProgramBuilder(cfg, f"gemm_{m}x{k}x{n}" + ("" if overlap else "_serial"))
    a_buf = pb.buffer("a", "input", (mb, kb, b_, bi), np.int8, layout={"pack": "gemm_a"})
    w_buf = pb.buffer("b", "input", (nb, kb, bo, bi), np.int8, layout={"pack": "gemm_b"})
    c_buf = pb.buffer("c", "output", (mb, nb, b_, bo), np.int8, layout={"pack": "gemm_c"})

    def base(kind: str, half: int) -> int:
        return half * (cfg.depth(kind) // halves)

    gemm_k, reset_k = {}, {}
    for h, a in itertools.product(range(halves), range(halves)):
        uops = [
            Uop(base("acc", a) + j, base("inp", h) + kk, base("wgt", h) + j * tk + kk)
            for j in range(tn)
            for kk in range(tk)
        ]
        first = pb.uops(uops)
        gemm_k[h, a] = (first, first + len(uops))
    for a in range(halves):
        first = pb.uops([Uop(base("acc", a) + j, base("acc", a) + j) for j in range(tn)])
        reset_k[a] = (first, first + tn)
    count = pb.uop_count
    pb.reserve_uops(count)
    pb.emit(
        Load(
            mem=MemId.UOP,
            sram_base=0,
            dram_base=pb.uop_dram(0),
            y_size=1,
            x_size=count,
            x_stride=count,
        )
    )

    lo, hi = -(1 << (cfg.out_bits - 1)), (1 << (cfg.out_bits - 1)) - 1
    steps_total = (mb // tm) * (nb // tn) * (kb // tk)
    tiles_total = (mb // tm) * (nb // tn)
    a_dram, w_dram, c_dram = pb.elem(a_buf, "inp"), pb.elem(w_buf, "wgt"), pb.elem(c_buf, "out")
    step = 0
    for t, (mi, ni) in enumerate(itertools.product(range(mb // tm), range(nb // tn))):
        acc_h = t % halves
        bgn, end = reset_k[acc_h]
        pb.emit(
            Gemm(
                reset=True, uop_bgn=bgn, uop_end=end, iter_out=tm, dst_out=tn, pop_next=t >= halves
            )
        )
        for ki in range(kb // tk):
            h = step % halves
            pb.emit(
                Load(
                    mem=MemId.INP,
                    sram_base=base("inp", h),
                    dram_base=a_dram + (mi * tm) * kb + ki * tk,
                    y_size=tm,
                    x_size=tk,
                    x_stride=kb,
                    pop_next=step >= halves,
                )
            )
            pb.emit(
                Load(
                    mem=MemId.WGT,
                    sram_base=base("wgt", h),
                    dram_base=w_dram + (ni * tn) * kb + ki * tk,
                    y_size=tn,
                    x_size=tk,
                    x_stride=kb,
                    push_next=True,
                )
            )
            bgn, end = gemm_k[h, acc_h]
            pb.emit(
                Gemm(
                    uop_bgn=bgn,
                    uop_end=end,
                    iter_out=tm,
                    dst_out=tn,
                    src_out=tk,
                    pop_prev=True,
                    push_prev=step + halves < steps_total,
                )
            )
            step += 1
        bgn, end = reset_k[acc_h]
        loop = dict(uop_bgn=bgn, uop_end=end, iter_out=tm, dst_out=tn, src_out=tn, use_imm=True)
        pb.emit(Alu(op=AluOp.SHR, imm=shift, **loop))
        pb.emit(Alu(op=AluOp.MAX, imm=lo, **loop))
        pb.emit(Alu(op=AluOp.MIN, imm=hi, push_next=True, **loop))
        pb.emit(
            Store(
                sram_base=base("acc", acc_h),
                dram_base=c_dram + (mi * tm) * nb + ni * tn,
                y_size=tm,
                x_size=tn,
                x_stride=nb,
                pop_prev=True,
                push_prev=True,
            )
        )
    # Collect the store->compute tokens no reset consumed, so FINISH waits for the last stores.
    for _ in range(min(tiles_total, halves) - 1):
        pb.emit(
            Load(
                mem=MemId.UOP,
                sram_base=0,
                dram_base=0,
                y_size=0,
                x_size=0,
                x_stride=0,
                pop_next=True,
            )
        )
    pb.emit(Finish(pop_next=True))
    return pb.build(
        meta={
            "kind": "blocked_gemm",
            "M": m,
            "K": k,
            "N": n,
            "tiles": [tm, tn, tk],
            "overlap": overlap,
            "shift": shift,
            "macs": m * k * n,
        }
    )


def _fits(cfg: HwConfig, tm: int, tn: int, tk: int, halves: int) -> bool:
    return (
        tm * tk <= cfg.depth("inp") // halves
        and tn * tk <= cfg.depth("wgt") // halves
        and tm * tn <= cfg.depth("acc") // halves
        and halves * halves * tn * tk + halves * tn <= cfg.depth("uop")
        and tm < (1 << ITER_BITS)
    )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def run_demo(
    cfg: HwConfig, m: int = 64, k: int = 256, n: int = 128, *, seed: int = 0, trace: bool = False
) -> dict:
    """The main job: build the double-buffered GEMM, run it and the same tiles without overlap
    on the simulator, check both against numpy, and return the figures."""
    from tilecraft.runtime import get_device

    overlapped = blocked_gemm(cfg, m, k, n, overlap=True)  # validates the shape first
    tiles = tuple(overlapped.meta["tiles"])
    serial = blocked_gemm(cfg, m, k, n, overlap=False, tiles=tiles)
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    expected = reference(cfg, a, w, shift=8)
    inputs = {"a": pack_a(cfg, a), "b": pack_b(cfg, w)}
    device = get_device("sim")
    result = {"config": cfg.tag, "M": m, "K": k, "N": n, "tiles": list(tiles), "seed": seed}
    for label, program in (("overlap", overlapped), ("serial", serial)):
        run = device.run(program, inputs, trace=trace and label == "overlap")
        got = unpack_c(cfg, run.outputs["c"])
        result[label] = {
            "bit_exact": bool(np.array_equal(got, expected)),
            "mismatches": int(np.count_nonzero(got != expected)),
            "cycles": run.report.cycles,
            "gemm_utilization": run.report.gemm_utilization,
            "instructions": run.report.instructions,
            "report": run.report,
        }
    result["speedup"] = result["serial"]["cycles"] / result["overlap"]["cycles"]
    result["programs"] = {"overlap": overlapped, "serial": serial}
    return result
