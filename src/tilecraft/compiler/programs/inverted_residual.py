"""One inverted residual block run as one program, its expanded tensors kept on chip.

A 1x1 expand, a 3x3 depthwise conv (stride 1 or 2, padding 1) and a 1x1 projection (no
residual add), each requantized by the unit: per band of output rows and per BLOCK channels
of the expanded tensor, the expand's GEMMs, the unit writing their rows into a depthwise plane
in INP (a STORE into INP, `HwConfig.store_to_inp`), the depthwise mode over the plane, the unit
writing its outputs into INP, and the projection's GEMMs over them. A hand-built program for
judging the design on the cycle model (`scripts/fused_block.py`, docs/DEPTHWISE.md), not the
compiler's lowering: its weights and parameters are random, and `build` returns numpy's answer
(`reference`) beside it. Square planes, square blocks (BLOCK_IN == BLOCK_OUT), batch 1.

The program, band by band (the halo rows the 3x3 window shares with the band before are
computed again), its steps software-pipelined so the GEMM core and the unit overlap:
expand(j) writes accumulator bank j % 2 (zeroed by the ALU first, or not at all with
`zeroing=False`, a what-if), depthwise(j - 1) the other bank, each plane's frame (the zero
point) loaded once and left alone by the stores. Dependence flags come from the token pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.compiler.analysis.tokens import insert_tokens
from tilecraft.compiler.operator.builder import ProgramBuilder
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Alu, AluOp, Depthwise, Finish, Gemm, Load, MemId, Store, Uop
from tilecraft.hw.isa.requant import pack_clip, pack_scale
from tilecraft.ops.requant import float32_requantize, scale_fields
from tilecraft.runtime.buffers import Role
from tilecraft.runtime.program import Program


@dataclass(frozen=True)
class Block:
    """The block's shape: a size x size plane of `cin` channels, `expand` of them inside (a
    multiple of BLOCK), `cout` out, the depthwise conv's stride."""

    size: int
    cin: int
    expand: int
    cout: int
    stride: int

    @property
    def out_size(self) -> int:
        return (self.size - 1) // self.stride + 1

    def channel_blocks(self, b: int) -> tuple[int, int, int]:
        """Blocks of `b` channels: in (padded), expanded, out (padded)."""
        return -(-self.cin // b), self.expand // b, -(-self.cout // b)


@dataclass(frozen=True)
class Band:
    """How the program tiles the block: output rows a band; whether each expanded channel
    block's projection runs as it comes (else all at the band's end, their inputs all kept);
    whether the input band is double-buffered."""

    rows: int
    project_each: bool
    input_twice: bool


def bands(cfg: HwConfig, block: Block) -> list[Band]:
    """The tilings whose buffers fit: per variant, its two largest bands."""
    out = []
    for each in (False, True):
        if not (each or _weights_once(cfg, block)):
            continue  # projecting at the band's end needs every weight in WGT at once
        for twice in (True, False):
            fit = [r for r in range(1, block.out_size + 1) if _layout(cfg, block, r, each, twice)]
            out += [Band(r, each, twice) for r in fit[-2:]]
    return out


def build(
    cfg: HwConfig, block: Block, band: Band, *, seed: int = 0, zeroing: bool = True
) -> tuple[Program, dict[str, np.ndarray], np.ndarray]:
    """The block's program for random weights, parameters and input (from `seed`), its inputs,
    and the output numpy gives (out_size, out_size, cout) int8."""
    b = cfg.block_out
    if cfg.block_in != b or cfg.batch != 1 or not cfg.store_to_inp or not cfg.depthwise_window:
        raise ScheduleError(
            f"an inverted residual block on one pass needs square blocks, batch 1, the "
            f"depthwise mode and STORE into INP; config {cfg.tag} lacks one"
        )
    layout = _layout(cfg, block, band.rows, band.project_each, band.input_twice)
    if layout is None:
        raise ScheduleError(f"{band} does not fit {block} on {cfg.tag}")
    rng = np.random.default_rng(seed)
    h, s, ho = block.size, block.stride, block.out_size
    cb, eb, ob = block.channel_blocks(b)
    x = rng.integers(-128, 128, (h, h, block.cin)).astype(np.int8)
    w1 = rng.integers(-128, 128, (block.expand, block.cin)).astype(np.int8)
    wd = rng.integers(-128, 128, (block.expand, 3, 3)).astype(np.int8)
    w3 = rng.integers(-128, 128, (block.cout, block.expand)).astype(np.int8)
    p1, p2 = _params(rng, block.expand, block.cin), _params(rng, block.expand, 9)
    p3 = _params(rng, block.cout, block.expand, relu=False)
    want = reference(x, w1, wd, w3, (p1, p2, p3), s)

    pb = ProgramBuilder(cfg, "inverted-residual")
    full = np.zeros((h, h, cb * b), np.int8)
    full[..., : block.cin] = x
    xin = np.ascontiguousarray(full.reshape(h, h, cb, b).transpose(2, 0, 1, 3))  # blocks of rows
    weights = _weight_groups(block, b, w1, wd, w3)
    group = cb + 1 + ob
    params = np.concatenate(
        [_param_rows(p, k * b, b) for p, n in ((p1, eb), (p2, eb), (p3, ob)) for k in range(n)]
    ).astype(np.int32)[:, None, :]
    r_in = (band.rows - 1) * s + 3
    plane = r_in * (h + 2)
    frame = np.broadcast_to(np.int8(p1[2][0]), (plane, b)).copy()
    X = pb.buffer("x", Role.INPUT, xin.shape, np.int8)
    W = pb.buffer("w", Role.CONSTANT, weights.shape, np.int8, data=weights)
    P = pb.buffer("params", Role.CONSTANT, params.shape, np.int32, data=params)
    Z = pb.buffer("frame", Role.CONSTANT, frame.shape, np.int8, data=frame)
    Y = pb.buffer("y", Role.OUTPUT, (ob, ho, ho, b), np.int8)

    xband, din_rows = layout
    xb = [0, xband if band.input_twice else 0]
    planes = [xb[1] + xband, xb[1] + xband + plane]
    each = band.rows * ho
    din = [planes[1] + plane + (j % 2 if band.project_each else j) * each for j in range(eb)]
    bank, n_prm = cfg.acc_bank_rows, len(params)
    prm = [0, bank]  # a copy of the parameters at the foot of each bank
    exp_acc = [n_prm, bank + n_prm]
    dwo = [n_prm + r_in * h, bank + n_prm + r_in * h]
    prj = dwo[1] + each
    once = _weights_once(cfg, block)
    # a group lives three steps; the loads run ahead while WGT holds more, and no further than
    # half a token queue (the load stage's tokens and the compute stage's back would fill both)
    slots = min(cfg.depth("wgt") // group, max(cfg.dep_queue_depth // 2, 3))

    uops: list[Uop] = []
    made: dict[tuple, tuple[int, int]] = {}

    def loop(*us: Uop) -> dict:
        if us not in made:
            made[us] = (len(uops), len(uops) + len(us))
            uops.extend(us)
        return dict(zip(("uop_bgn", "uop_end"), made[us]))

    def dma(mem, sram, dram, count):
        return Load(mem=mem, sram_base=sram, dram_base=dram, y_size=1, x_size=count, x_stride=count)

    head = [dma(MemId.ACC, p, pb.elem(P, "acc"), n_prm) for p in prm]
    if once:
        head.append(dma(MemId.WGT, 0, pb.elem(W, "wgt"), len(weights)))
    head += [dma(MemId.INP, p, pb.elem(Z, "inp"), plane) for p in planes]  # the frames
    body = []
    k = 0
    for n in range(-(-ho // band.rows)):
        oy0 = n * band.rows
        r_out = min(band.rows, ho - oy0)
        iy0, r_in = oy0 * s - 1, (r_out - 1) * s + 3
        lo, hi = max(iy0, 0), min(iy0 + r_in, h)
        nv, xbb, n_out = hi - lo, xb[n % 2], r_out * ho
        body += [
            dma(MemId.INP, xbb + c * nv * h, pb.elem(X, "inp") + (c * h + lo) * h, nv * h)
            for c in range(cb)
        ]
        if iy0 + r_in > h:  # the bottom padding row: the zero point again
            body += [
                dma(MemId.INP, p + (h - iy0) * (h + 2), pb.elem(Z, "inp"), h + 2) for p in planes
            ]
        for o in range(ob):
            body.append(
                Gemm(reset=True, **loop(Uop(prj + o * each, 0, 0)), iter_out=n_out, dst_out=1)
            )
        steps = [{"expand": [], "depthwise": [], "project": []} for _ in range(eb + 2)]
        for j in range(eb):
            bk, k = k % 2, k + 1
            pl, ea, db = planes[j % 2], exp_acc[bk], 1 - bk
            wb = j * group if once else (j % slots) * group
            run = dict(iter_out=nv * h, dst_out=1, src_out=1)
            if not once:
                steps[j]["expand"].append(dma(MemId.WGT, wb, pb.elem(W, "wgt") + j * group, group))
            if zeroing:  # SHR by the lane's width: zeros, on the ALU beside the GEMM core
                steps[j]["expand"].append(
                    Alu(op=AluOp.SHR, use_imm=True, imm=-cfg.acc_bits, **loop(Uop(ea, ea)), **run)
                )
            steps[j]["expand"] += [
                Gemm(**loop(*(Uop(ea, xbb + c * nv * h, wb + c) for c in range(cb))), **run),
                Store(
                    sram_base=ea,
                    dram_base=pl + (lo - iy0) * (h + 2) + 1,
                    y_size=nv,
                    x_size=h,
                    x_stride=h + 2,
                    requant=True,
                    param_base=prm[bk] + 3 * j,
                    to_inp=True,
                ),
            ]
            steps[j + 1]["depthwise"] += [
                Depthwise(
                    acc_base=dwo[db],
                    inp_base=pl,
                    wgt_base=wb + cb,
                    in_rows=r_in,
                    in_cols=h + 2,
                    stride_y=s,
                    stride_x=s,
                ),
                Store(
                    sram_base=dwo[db],
                    dram_base=din[j],
                    y_size=1,
                    x_size=n_out,
                    x_stride=n_out,
                    requant=True,
                    param_base=prm[db] + 3 * (eb + j),
                    to_inp=True,
                ),
            ]
            at = steps[j + 2] if band.project_each else steps[eb + 1]
            us = (Uop(prj + o * each, din[j], wb + cb + 1 + o) for o in range(ob))
            at["project"].append(Gemm(**loop(*us), iter_out=n_out, dst_out=1, src_out=1))
        for step in steps:
            body += step["expand"] + step["depthwise"] + step["project"]
        body += [
            Store(
                sram_base=prj + o * each,
                dram_base=pb.elem(Y, "out") + (o * ho + oy0) * ho,
                y_size=1,
                x_size=n_out,
                x_stride=n_out,
                requant=True,
                param_base=prm[1] + 3 * (2 * eb + o),
            )
            for o in range(ob)
        ]
    region = pb.place_uops(uops)
    insns = [*head[:2], pb.load_uops(), *head[2:], *body, Finish()]
    return pb.build(insert_tokens(cfg, insns, uops, region)), {"x": xin}, want


def output(y: np.ndarray, cout: int) -> np.ndarray:
    """The program's output buffer (channel blocks of rows) as (rows, cols, cout)."""
    ob, ho, wo, b = y.shape
    return y.transpose(1, 2, 0, 3).reshape(ho, wo, ob * b)[..., :cout]


def reference(x, w1, wd, w3, params, stride: int) -> np.ndarray:
    """numpy's block: each layer's int32 sums requantized in float32 (`float32_requantize`),
    the depthwise input padded with the expand's zero point."""
    p1, p2, p3 = params
    m = _requantize(np.einsum("hwc,ec->hwe", x.astype(np.int64), w1.astype(np.int64)), p1)
    mp = np.pad(m, ((1, 1), (1, 1), (0, 0)))
    mp[0], mp[-1], mp[:, 0], mp[:, -1] = (p1[2],) * 4
    h = m.shape[0]
    ho = (h - 1) // stride + 1
    acc = np.zeros((ho, ho, m.shape[2]), np.int64)
    for ky in range(3):
        for kx in range(3):
            win = mp[
                ky : ky + stride * (ho - 1) + 1 : stride, kx : kx + stride * (ho - 1) + 1 : stride
            ]
            acc += win.astype(np.int64) * wd[:, ky, kx].astype(np.int64)
    d = _requantize(acc, p2)
    return _requantize(np.einsum("hwe,oe->hwo", d.astype(np.int64), w3.astype(np.int64)), p3)


def _layout(cfg: HwConfig, block: Block, rows: int, each: bool, twice: bool):
    """(INP rows of an input band, of the projection's inputs), or None where the band's
    buffers do not fit INP, an accumulator bank or a loop's count."""
    b, h, s, ho = cfg.block_out, block.size, block.stride, block.out_size
    cb, eb, ob = block.channel_blocks(b)
    r_in = (rows - 1) * s + 3
    xband = cb * r_in * h
    din = (2 if each else eb) * rows * ho
    inp = (2 if twice else 1) * xband + 2 * r_in * (h + 2) + din
    acc = 3 * (2 * eb + ob) + r_in * h + rows * ho + ob * rows * ho
    if inp > cfg.depth("inp") or acc > cfg.acc_bank_rows or r_in * h >= 1 << 14:
        return None
    return xband, din


def _weights_once(cfg: HwConfig, block: Block) -> bool:
    b = cfg.block_out
    cb, eb, ob = block.channel_blocks(b)
    return eb * (cb + 1 + ob) <= cfg.depth("wgt")


def _weight_groups(block: Block, b: int, w1, wd, w3) -> np.ndarray:
    """Per expanded channel block, one group of weight elements: its expand's (one an input
    channel block), its depthwise taps (row c: channel c's 9), its projection's (one an output
    channel block)."""
    cb, eb, ob = block.channel_blocks(b)
    w1p = np.zeros((block.expand, cb * b), np.int8)
    w1p[:, : block.cin] = w1
    taps = np.zeros((eb, 1, b, b), np.int8)
    taps[:, 0, :, :9] = wd.reshape(eb, b, 9)
    w3p = np.zeros((ob * b, block.expand), np.int8)
    w3p[: block.cout] = w3
    expand = w1p.reshape(eb, b, cb, b).transpose(0, 2, 1, 3)
    project = w3p.reshape(ob, b, eb, b).transpose(2, 0, 1, 3)
    return np.concatenate([expand, taps, project], axis=1).reshape(-1, b, b)


def _params(rng, c: int, fan_in: int, relu: bool = True) -> tuple:
    """Per-channel bias, scale, zero point and clip spreading a layer's outputs over int8 (a
    fused ReLU clips below at the zero point); one zero point a tensor."""
    scale = (rng.uniform(0.5, 2, c) * 40 / (np.sqrt(fan_in) * 74 * 74)).astype(np.float32)
    zero = np.full(c, int(rng.integers(-20, 20)))
    lo = zero.copy() if relu else np.full(c, -128)
    return rng.integers(-(2**10), 2**10, c), scale, zero, lo, np.full(c, 127)


def _param_rows(p: tuple, c0: int, b: int) -> np.ndarray:
    """The unit's three parameter rows for channels c0..c0 + b (pass-through past the last)."""
    pads = (0, 1.0, 0, -128, 127)
    bias, scale, zero, lo, hi = (
        np.concatenate([np.asarray(v), np.full(b, pad, np.asarray(v).dtype)])[c0 : c0 + b]
        for v, pad in zip(p, pads)
    )
    f = scale_fields(scale)
    return np.stack([bias, pack_scale(f.significand, f.exponent), pack_clip(zero, lo, hi)])


def _requantize(v: np.ndarray, p: tuple) -> np.ndarray:
    bias, scale, zero, lo, hi = p
    return float32_requantize(v + bias, scale, zero, lo, hi, channel_axis=-1)
