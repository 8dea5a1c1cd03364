"""A hand-scheduled blocked GEMM with double buffering: the example job's program.

C = int8(clip((A @ B) >> shift)), with A (M, K) and B (K, N) int8 (`ops.Gemm`). A is stored in
INP tiles (runtime.layout `Matrix`), B transposed in WGT tiles (`TransposedMatrix`), C in
accumulator-output tiles (`Matrix` with BLOCK_OUT lanes).

With `overlap`, INP/WGT and ACC are split into two halves used alternately, and tokens let the
load of step s+1 run under the GEMM of step s and the store of a tile under the next tile's
GEMMs. Without it, one half is used and every step waits for the previous one (the baseline).
The dependence flags are written here by hand, not by the token pass: this program is also the
token pass's and the verifier's independent check.
"""

from __future__ import annotations

import itertools

import numpy as np

from tilecraft.compiler.analysis.tokens import compute_nop
from tilecraft.compiler.mapping.clip import clip
from tilecraft.compiler.operator.builder import MAX_INSNS, ProgramBuilder
from tilecraft.compiler.programs.gemm_schedule import choose_tiles, fits
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Alu, AluOp, Finish, Gemm, Load, MemId, Store, Uop
from tilecraft.ops import Computation, GemmTiles
from tilecraft.ops import Gemm as GemmOp
from tilecraft.runtime.buffers import Role
from tilecraft.runtime.layout import Lanes, Matrix, TransposedMatrix
from tilecraft.runtime.program import Program


def blocked_gemm(
    cfg: HwConfig,
    m: int,
    k: int,
    n: int,
    *,
    tiles: GemmTiles | None = None,
    overlap: bool = True,
    shift: int = 8,
) -> Program:
    """The program of C = clip((A @ B) >> shift); `tiles` (in blocks) default to `choose_tiles`,
    and decide `overlap` when given."""
    b_, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    for name, dim, block in (("M", m, b_), ("K", k, bi), ("N", n, bo)):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0 or dim % block:
            kind = " (a Python int: give int(...))" if not isinstance(dim, int) else ""
            raise ScheduleError(f"{name} = {dim!r} must be a positive multiple of {block}{kind}")
    op = GemmOp(m, k, n, shift)
    mb, kb, nb = m // b_, k // bi, n // bo
    t = tiles or choose_tiles(cfg, mb, kb, nb, overlap)
    for name, total, size in (("tm", mb, t.tm), ("tn", nb, t.tn), ("tk", kb, t.tk)):
        if total % size:
            raise ScheduleError(f"tile {name} = {size} must divide {total} blocks")
    halves = 2 if t.overlap else 1
    if not fits(cfg, t):
        raise ScheduleError(f"tiles {t.describe()} do not fit the scratchpads")
    tm, tn, tk = t.tm, t.tn, t.tk
    steps_total = (mb // tm) * (nb // tn) * (kb // tk)
    tiles_total = (mb // tm) * (nb // tn)
    insns = 3 * steps_total + 5 * tiles_total + 3
    if insns > MAX_INSNS:
        raise ScheduleError(
            f"too large: {op.describe()} would need {insns:,} instructions with {t.describe()}, "
            f"more than {MAX_INSNS:,}; split the product"
        )

    pb = ProgramBuilder(cfg, f"gemm_{m}x{k}x{n}" + ("" if t.overlap else "_serial"))
    layouts = {"a": Matrix((m, k)), "b": TransposedMatrix((k, n)), "c": Matrix((m, n), Lanes.OUT)}
    a_buf, w_buf, c_buf = (
        pb.buffer(name, role, layouts[name].stored_shape(cfg), np.int8, layout=layouts[name])
        for name, role in (("a", Role.INPUT), ("b", Role.INPUT), ("c", Role.OUTPUT))
    )

    def base(kind: str, half: int) -> int:
        return half * (cfg.depth(kind) // halves)

    uops: list[Uop] = []

    def kernel(new: list[Uop]) -> tuple[int, int]:
        uops.extend(new)
        return len(uops) - len(new), len(uops)

    gemm_k = {
        (h, a): kernel(
            [
                Uop(base("acc", a) + j, base("inp", h) + kk, base("wgt", h) + j * tk + kk)
                for j in range(tn)
                for kk in range(tk)
            ]
        )
        for h, a in itertools.product(range(halves), range(halves))
    }
    reset_k = {
        a: kernel([Uop(base("acc", a) + j, base("acc", a) + j) for j in range(tn)])
        for a in range(halves)
    }
    pb.place_uops(uops)
    insns: list = [pb.load_uops()]

    lo, hi = -(1 << (cfg.out_bits - 1)), (1 << (cfg.out_bits - 1)) - 1
    a_dram, w_dram, c_dram = pb.elem(a_buf, "inp"), pb.elem(w_buf, "wgt"), pb.elem(c_buf, "out")
    step = 0
    for tile, (mi, ni) in enumerate(itertools.product(range(mb // tm), range(nb // tn))):
        acc_h = tile % halves
        bgn, end = reset_k[acc_h]
        insns.append(
            Gemm(
                reset=True,
                uop_bgn=bgn,
                uop_end=end,
                iter_out=tm,
                dst_out=tn,
                pop_next=tile >= halves,
            )
        )
        for ki in range(kb // tk):
            h = step % halves
            insns.append(
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
            insns.append(
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
            insns.append(
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
        loop = dict(uop_bgn=bgn, uop_end=end, iter_out=tm, dst_out=tn, src_out=tn)
        insns.append(Alu(op=AluOp.SHR, use_imm=True, imm=shift, **loop))
        insns += clip(lo, hi, last=dict(push_next=True), **loop)
        insns.append(
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
        insns.append(compute_nop(pop_next=True))
    insns.append(Finish(pop_next=True))
    return pb.build(insns, computation=Computation(op), schedule=t)
