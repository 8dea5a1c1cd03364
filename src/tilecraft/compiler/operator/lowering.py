"""Lowering a scheduled convolution to instructions and micro-ops.

Tensorization: each reduction step is one GEMM instruction whose two hardware loops run over
the two largest regular dimensions of the step (normally output rows and columns), so its
micro-op kernel holds only the rest (taps x input blocks x output blocks) and is shared by
every tile of the same shape and buffer slots. DMA: the input window of a tile is loaded with
its zero padding made by LOAD itself (nothing padded in DRAM). Epilogue (epilogue.py): ALU
instructions on the accumulator tile. Buffers: with double buffering each scratchpad has two
slots; a load whose data is still resident in a slot (weights across tiles in `oc_outer` order,
the input window in `spatial_outer`) is skipped. The ends of the layer are cut finer, since
nothing overlaps them: the first step's GEMM goes one input block at a time behind its LOADs,
and the last tile's epilogue and store one output block at a time. Dependence flags come
afterwards, from tokens.insert_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.compiler.mapping.blocks import MappedConv, residual_offsets
from tilecraft.compiler.operator.builder import ProgramBuilder
from tilecraft.compiler.operator.epilogue import EpilogueDram, EpilogueEmitter, Slots
from tilecraft.compiler.operator.kernels import UopKernels
from tilecraft.compiler.operator.params import (
    ACC_HI_RANGE,
    ACC_LO_RANGE,
    BIAS_RANGE,
    MULTIPLIER_RANGE,
    ConvParams,
)
from tilecraft.compiler.operator.pool_epilogue import PoolLowering
from tilecraft.compiler.operator.schedule import (
    Tile,
    budget,
    ranges,
    tiles,
)
from tilecraft.compiler.operator.tensorize import (
    gemm_loops,
    kernel_uops,
    merged_blocks,
    step_dims,
    window,
)
from tilecraft.compiler.operator.tile_work import tile_work
from tilecraft.hw.config import ACC_BANKS, HwConfig
from tilecraft.hw.isa import Alu, AluOp, Depthwise, Finish, Gemm, Load, MemId, Store, Uop
from tilecraft.hw.isa.requant import PARAM_ROWS, pack_clip, pack_scale
from tilecraft.hw.timing import Timing, busy_cycles
from tilecraft.ops import ConvSchedule, Multiplier
from tilecraft.ops.requant import scale_fields
from tilecraft.runtime.buffers import Role


@dataclass(frozen=True)
class Lowered:
    """A scheduled operator as instructions without dependence flags, and the micro-ops and DRAM
    plan they address (the builder holds the buffers; `insns[0]` loads the micro-ops)."""

    builder: ProgramBuilder
    insns: tuple
    uops: tuple[Uop, ...]
    uop_region: int  # the micro-ops' DRAM address, in micro-op elements
    schedule: ConvSchedule


def slots(cfg: HwConfig, low: MappedConv, s: ConvSchedule) -> Slots:
    """Row bases of every buffer slot; accumulator tiles alternate between the banks, each
    slot's region ending with a copy of the epilogue's parameters (one copy per bank used)."""
    b = budget(cfg, low, s)
    n = b.slots
    region = cfg.depth("acc") // b.acc_slots
    acc = tuple(
        (k % ACC_BANKS) * cfg.acc_bank_rows + (k // ACC_BANKS) * region for k in range(b.acc_slots)
    )
    return Slots(
        inp=tuple(k * b.inp_window for k in range(n)),
        residual=tuple(n * b.inp_window + k * b.inp_residual for k in range(n)),
        wgt=tuple(k * b.wgt_tile for k in range(n)),
        select=n * b.wgt_tile,
        acc=acc,
        params=tuple(
            acc[k] + b.acc_region(cfg) - b.acc_reserved for k in range(min(b.acc_slots, ACC_BANKS))
        ),
    )


class SlotCache:
    """Which slot of a double-buffered scratchpad holds what; least recently used is refilled."""

    def __init__(self, slots: int):
        self.keys = [None] * slots
        self.used = [-1] * slots
        self.clock = 0

    def get(self, key) -> tuple[int, bool]:
        self.clock += 1
        if key in self.keys:
            slot = self.keys.index(key)
            self.used[slot] = self.clock
            return slot, True
        slot = int(np.argmin(self.used))
        self.keys[slot], self.used[slot] = key, self.clock
        return slot, False


def lower_conv(
    cfg: HwConfig, low: MappedConv, s: ConvSchedule, params: ConvParams, name: str
) -> Lowered:
    """Instructions and micro-ops for `low` under the (legal) schedule `s`."""
    pb = ProgramBuilder(cfg, name)
    dram = _declare_buffers(pb, cfg, low, params)
    emitter = _ConvEmitter(cfg, low, s, dram, params.tensor_multiplier)
    body = emitter.body()
    region = pb.place_uops(emitter.kernels.uops)
    insns = (pb.load_uops(), *body)
    return Lowered(pb, insns, pb.uops, region, s)


@dataclass(frozen=True)
class _ConvDram:
    """DRAM addresses of a convolution's tensors, in elements of their scratchpads."""

    input: int
    weight: int
    output: int
    epilogue: EpilogueDram


def _declare_buffers(pb: ProgramBuilder, cfg: HwConfig, low: MappedConv, p: ConvParams):
    ep = low.epilogue

    def tensor(name, layout, dtype, value, value_range=None, role=Role.INPUT):
        shape = layout.stored_shape(cfg)
        if value is None:
            return pb.buffer(name, role, shape, dtype, layout=layout, value_range=value_range)
        data = layout.pack(cfg, value)
        return pb.buffer(name, Role.CONSTANT, shape, dtype, data=data, layout=layout)

    inp = tensor("input", low.input_layout, np.int8, None)
    wgt = tensor("weight", low.weight_layout, np.int8, p.weight)
    bias = mul = mul2 = res = sel = lo = hi = None
    if ep.pre_shift:
        mul2 = tensor("multiplier2", low.channel_layout, np.int32, p.multiplier2, MULTIPLIER_RANGE)
    if ep.acc_bounds:
        lo = tensor("acc_lo", low.channel_layout, np.int32, p.acc_lo, ACC_LO_RANGE)
        hi = tensor("acc_hi", low.channel_layout, np.int32, p.acc_hi, ACC_HI_RANGE)
    if ep.bias:
        bias = tensor("bias", low.channel_layout, np.int32, p.bias, BIAS_RANGE)
    if ep.multiplier == Multiplier.CHANNEL:
        mul = tensor("multiplier", low.channel_layout, np.int32, p.multiplier, MULTIPLIER_RANGE)
    requant = None
    if ep.on_unit:  # the requantization unit's parameter rows, packed at compile time (and
        # the scales as the reference reads them)
        tensor("multiplier", low.channel_layout, np.float32, p.multiplier)
        data = requant_rows(cfg, low, p.bias, p.multiplier)
        requant = pb.buffer("requant", Role.CONSTANT, data.shape, np.int32, data=data)
    offsets: tuple[int, ...] = ()
    res_blocks = 0
    if ep.residual:
        res = tensor("residual", low.residual_layout, np.int8, None)
        res_blocks = res.shape[1]
    if ep.residual and not ep.on_unit:  # selectors for the residual's GEMM (the unit adds it)
        offsets = tuple(residual_offsets(cfg, low.op.oc))
        bo, bi = cfg.block_out, cfg.block_in
        data = np.zeros((len(offsets), bo, bi), np.int8)
        for t, d in enumerate(offsets):
            for o in range(bo):
                if 0 <= o + d < bi:
                    data[t, o, o + d] = 1
        sel = pb.buffer("select", Role.CONSTANT, data.shape, np.int8, data=data)
    out = tensor("output", low.output_layout, np.int8, None, role=Role.OUTPUT)

    def at(buf, kind):
        return None if buf is None else pb.elem(buf, kind)

    return _ConvDram(
        input=pb.elem(inp, "inp"),
        weight=pb.elem(wgt, "wgt"),
        output=pb.elem(out, "out"),
        epilogue=EpilogueDram(
            bias=at(bias, "acc"),
            mul=at(mul, "acc"),
            lo=at(lo, "acc"),
            hi=at(hi, "acc"),
            mul2=at(mul2, "acc"),
            residual=at(res, "inp"),
            residual_blocks=res_blocks,
            select=at(sel, "wgt"),
            offsets=offsets,
            requant=at(requant, "acc"),
        ),
    )


def requant_rows(cfg: HwConfig, low: MappedConv, bias, scale) -> np.ndarray:
    """The requantization unit's parameter rows of `low` (hw/isa/requant.py): per output
    channel block its bias, scale and clip rows, as accumulator elements (every batch row the
    same; channels past the layer's, scale 1 and bias 0)."""
    ep, bo, channels = low.epilogue, cfg.block_out, low.source.channels
    lanes = low.ocb * bo
    b = np.zeros(lanes, np.int64)
    s = np.ones(lanes, np.float32)
    if bias is not None:
        b[:channels] = bias
    s[:channels] = scale
    fields = scale_fields(s)
    rows = np.stack(
        [
            b,
            pack_scale(fields.significand, fields.exponent),
            np.full(lanes, pack_clip(ep.offset, ep.low, ep.high), np.int64),
        ]
    )  # (3, lanes): one row per parameter, one lane per channel
    rows = rows.reshape(len(PARAM_ROWS), low.ocb, bo).transpose(1, 0, 2)
    rows = np.broadcast_to(rows[:, :, None, :], (low.ocb, len(PARAM_ROWS), cfg.batch, bo))
    return rows.reshape(low.ocb * len(PARAM_ROWS), cfg.batch, bo).astype(np.int32)


@dataclass(frozen=True)
class _Window:
    row: int  # first data row and column of the window in the input plane
    col: int
    rows: int  # data rows and columns (the rest is zero padding)
    cols: int
    row_stride: int  # elements between the window's rows in DRAM
    y_pad0: int
    y_pad1: int
    x_pad0: int
    x_pad1: int

    @property
    def padding_only(self) -> bool:
        return self.rows == 0 or self.cols == 0


class _ConvEmitter:
    def __init__(
        self,
        cfg: HwConfig,
        low: MappedConv,
        s: ConvSchedule,
        dram: _ConvDram,
        tensor_multiplier: int | None,
    ):
        self.cfg, self.low, self.s, self.dram = cfg, low, s, dram
        self.slots = slots(cfg, low, s)
        self.kernels = UopKernels()
        self.epilogue = EpilogueEmitter(
            cfg, low, self.slots, dram.epilogue, self.kernels, tensor_multiplier
        )
        self.insns: list = []
        self.timing = Timing.from_config(cfg)
        self.work = tile_work(cfg, low, s, self.timing)
        self.zero_on_gemm = self.work.zero_on_gemm
        self.pool = PoolLowering(cfg, low, s, self.slots, self.kernels) if low.pool else None

    def body(self) -> list:
        """Every instruction after the micro-op load: the epilogue's prologue, then the tiles."""
        low, s = self.low, self.s
        self.insns += self.epilogue.prologue()
        inp_cache, wgt_cache = SlotCache(s.slots), SlotCache(s.slots)
        steps = ranges(low.icb, s.tile_ic)
        # With several accumulator slots the epilogue of tile t-1 is spread over the GEMM
        # steps of tile t, and tile t+1's accumulators are zeroed after tile t's last GEMM: the
        # ALU unit then works on one bank while the GEMM core works on the other. Zeroed by
        # GEMM resets with four slots, tile t+1's slot (in the bank the epilogue of t-1 works
        # on) is cleared before tile t's GEMMs instead, while that epilogue has not started.
        n_acc = len(self.slots.acc)
        pipelined = n_acc > 1
        early = self.zero_on_gemm and n_acc > 2
        order = list(tiles(low, s))
        self._zero(order[0], 0)
        for t, tile in enumerate(order):
            a = t % n_acc
            if early and t + 1 < len(order):
                self._zero(order[t + 1], (t + 1) % n_acc)
            if pipelined and t > 0:
                previous = order[t - 1]
                spread = self._spread(self._finish(previous, (t - 1) % n_acc), len(steps))
            # a tile whose whole input window is padding (pad >= kernel, at the border) keeps
            # the zeros its accumulators were cleared to: its GEMMs would add nothing
            padding_only = self._window(tile).padding_only and not low.windowed
            for i, (ic0, tic) in enumerate(steps):
                if not padding_only:
                    block = ic0 + (tile.oc0 if low.grouped else 0)
                    key = (tile.nb, block, tile.oh0, tile.toh, tile.ow0, tile.tow)
                    islot, ihit = inp_cache.get(key)
                    wslot, whit = wgt_cache.get((tile.oc0, tile.toc, ic0))
                    if t == 0 and i == 0 and self._splits(tile, tic) and not (ihit or whit):
                        self._first_step(tile, ic0, tic, islot, wslot, a)
                        continue
                    if not ihit:
                        self._load_window(tile, ic0, tic, islot)
                    if not whit:
                        self._load_weights(tile, ic0, tic, wslot)
                    self._gemm(tile, tic, islot, wslot, a)
                if pipelined and t > 0:
                    self.insns += spread[i]
            if not pipelined:
                self.insns += self._finish(tile, a)
            if not early and t + 1 < len(order):
                self._zero(order[t + 1], (t + 1) % n_acc)
        if pipelined:
            self.insns += self._finish_last(order[-1], (len(order) - 1) % n_acc)
        self.insns.append(Finish())
        return self.insns

    def _first_step(self, tile: Tile, ic0: int, tic: int, islot: int, wslot: int, a: int):
        """The layer's first reduction step with its GEMM one input-channel block at a time,
        each part right behind its block's input LOAD (the weights come first, whole): the
        GEMM core starts on the first block's data instead of waiting for the step's whole
        window (ResNet-18's C4: its first GEMM 2,406 cycles in, with four 435-cycle input
        LOADs ahead of it). Only where the window takes a LOAD per block anyway: where one
        LOAD moves every block, more LOADs cost the load stage more than the GEMM core gains
        (C7 and C10: +382 and +309 cycles)."""
        self._load_weights(tile, ic0, tic, wslot)
        block = self._window_rows(tile)
        for j in range(tic):
            self._load_window(tile, ic0 + j, 1, islot, offset=j * block)
            self._gemm(tile, tic, islot, wslot, a, part=j)

    def _splits(self, tile: Tile, tic: int) -> bool:
        """Whether the first step goes block by block (`_first_step`): a window of several
        blocks, each with a LOAD of its own, and few enough of them that their tokens (one
        each way per part) stay well inside the dependence queues; 52 parts on queues of 16
        deadlocked the stages (the schedule-space property test)."""
        small = tic <= self.cfg.dep_queue_depth // 3
        return tic > 1 and small and not self._merged(tile)

    def _merged(self, tile: Tile) -> bool:
        """Whether one LOAD moves the window of every input-channel block."""
        w = self._window(tile)
        wr, _ = window(self.low, tile.toh, tile.tow)
        return wr == w.rows and merged_blocks(self.low, w.rows, w.y_pad0 + w.y_pad1, w.row_stride)

    def _window_rows(self, tile: Tile) -> int:
        wr, wc = window(self.low, tile.toh, tile.tow)
        return wr * wc

    def _zero(self, tile: Tile, a: int) -> None:
        """Clear the accumulator tile on whichever unit has the slack: the ALU (a left shift by
        the lane width gives 0), or, when the epilogue keeps the ALU the busier unit, the GEMM
        core (a reset). Nothing on the depthwise mode: it writes its outputs afresh."""
        if self.low.windowed:
            return
        if self.pool:  # the pooled rows too (after the tile's): the maxima go onto zeros
            rows = tile.pix + self.pool.pooled(tile).pix
            tile = Tile(tile.nb, tile.oc0, tile.toc, 0, 1, 0, rows)
        fields = self.epilogue.tile_loop(tile, a, 0, False)
        if self.zero_on_gemm:
            self.insns.append(Gemm(reset=True, **fields))
        else:
            self.insns.append(Alu(op=AluOp.SHR, use_imm=True, imm=-self.cfg.acc_bits, **fields))

    def _finish(self, tile: Tile, a: int, row: int = 0) -> list:
        """The tile's epilogue and its store (its accumulators from slot `a`'s row `row` on);
        with a pool, the window maxima first, then the epilogue and store of the pooled rows."""
        if self.pool:
            return self.pool.finish(tile, a, self.epilogue.tile, self._store)
        return self.epilogue.tile(tile, a, row) + self._store(tile, a, row)

    def _finish_last(self, tile: Tile, a: int) -> list:
        """The last tile's epilogue and store one output-channel block at a time, so the store
        stage writes each block while the ALU works on the next one: nothing comes after this
        tile to hide its epilogue behind (ResNet-18's C7: a 1,593-cycle tail for one 8-block
        tile). A residual epilogue (its GEMM, its loads) keeps the whole tile, as does one on
        the requantization unit: the ALU has nothing to do, and one STORE of every block
        starts once where one a block would pay the unit's latency each."""
        ep = self.low.epilogue
        if ep.residual or ep.on_unit or self.low.pool or tile.toc == 1:
            return self._finish(tile, a)
        out = []
        for o in range(tile.toc):
            block = Tile(tile.nb, tile.oc0 + o, 1, tile.oh0, tile.toh, tile.ow0, tile.tow)
            out += self._finish(block, a, o * tile.pix)
        return out

    def _spread(self, insns: list, steps: int) -> list[list]:
        """`insns` split into one chunk per reduction step of the next tile, by the compute
        time before each instruction: the in-order compute stage waits for the ALU unit at
        each ALU instruction, so an epilogue issued all at once would hold back the next
        tile's GEMM steps until its last pass starts. LOADs (the residual) go first, so their
        data arrives before it is used; STOREs go with the compute instruction before them.
        When the GEMM core is the busier unit the epilogue goes over as few steps as keep
        each part within one step's GEMM (one part, after the first step, when it fits):
        spread wider, its residual GEMM held back the next tile's GEMMs instead
        (ResNet-18's 3x3 residual layers on pynq-z1: 483K -> 509K cycles), while one part
        longer than a step idles the GEMM core at every tile (ResNet-18's stride-2 3x3 layers
        with one channel block a step: 435 cycles a tile)."""
        costs = [
            busy_cycles(self.timing, x.row()) if isinstance(x, (Alu, Gemm)) else 0 for x in insns
        ]
        total = sum(costs) or 1
        chunks: list[list] = [[] for _ in range(steps)]
        if not self.work.alu_bound and any(isinstance(x, Gemm) for x in insns):
            chunks[0] = list(insns)  # a residual GEMM would hold the steps after it
            return chunks
        if not self.work.alu_bound:  # fill each step's time on the GEMM core, in order
            chunk, used = 0, 0
            for x, cost in zip(insns, costs):
                if cost and used and used + cost > self.work.step and chunk < steps - 1:
                    chunk, used = chunk + 1, 0
                chunks[0 if isinstance(x, Load) else chunk].append(x)
                used += cost
            return chunks
        before, chunk = 0, 0
        for x, cost in zip(insns, costs):
            if cost:
                chunk = min(steps - 1, before * steps // total)
            chunks[0 if isinstance(x, Load) else chunk].append(x)
            before += cost
        return chunks

    def _window(self, tile: Tile) -> _Window:
        """Where the tile's input window lies: its first data row and column in the input
        plane, the zero padding around them, and the data rows and columns (0 when the whole
        window is padding)."""
        low = self.low
        (sh, sw), (ph, pw) = low.stride, low.pad
        wr, wc = window(low, tile.toh, tile.tow)
        if low.row_skip:
            r_lo, y_pad0, y_pad1, ystride = tile.oh0 * sh, 0, 0, sh * low.w
        else:
            r_lo = tile.oh0 * sh - ph
            y_pad0, y_pad1 = min(wr, max(0, -r_lo)), min(wr, max(0, r_lo + wr - low.h))
            r_lo, ystride = max(r_lo, 0), low.w
        c_lo = tile.ow0 * sw - pw
        x_pad0, x_pad1 = min(wc, max(0, -c_lo)), min(wc, max(0, c_lo + wc - low.w))
        ys, xs = max(wr - y_pad0 - y_pad1, 0), max(wc - x_pad0 - x_pad1, 0)
        return _Window(r_lo, max(c_lo, 0), ys, xs, ystride, y_pad0, y_pad1, x_pad0, x_pad1)

    def _load_window(self, tile: Tile, ic0: int, tic: int, slot: int, offset: int = 0) -> None:
        """The window's `tic` input-channel blocks from `ic0` into the slot (from its row
        `offset` on)."""
        low, w = self.low, self._window(tile)
        wr, wc = window(low, tile.toh, tile.tow)
        pads = dict(
            y_pad0=w.y_pad0,
            y_pad1=w.y_pad1,
            x_pad0=w.x_pad0,
            x_pad1=w.x_pad1,
            pad_value=low.pad_value if w.y_pad0 + w.y_pad1 + w.x_pad0 + w.x_pad1 else 0,
        )
        block = ic0 + (tile.oc0 if low.grouped else 0)  # a depthwise block reads its own
        first = self.dram.input + ((tile.nb * low.input_blocks + block) * low.h + w.row) * low.w
        first += w.col
        base = self.slots.inp[slot] + offset
        if self._merged(tile):
            # the window's rows go on evenly from one channel block into the next (whole
            # planes, or every row_skip row of them): one LOAD for all the blocks
            self.insns.append(
                Load(
                    mem=MemId.INP,
                    sram_base=base,
                    dram_base=first,
                    y_size=tic * w.rows,
                    x_size=w.cols,
                    x_stride=w.row_stride,
                    **pads,
                )
            )
            return
        for i in range(tic):
            self.insns.append(
                Load(
                    mem=MemId.INP,
                    sram_base=base + i * wr * wc,
                    dram_base=first + i * low.h * low.w,
                    y_size=w.rows,
                    x_size=w.cols,
                    x_stride=w.row_stride,
                    **pads,
                )
            )

    def _load_weights(self, tile: Tile, ic0: int, tic: int, slot: int) -> None:
        low = self.low
        kk = low.wgt_taps
        row = low.icb * kk
        self.insns.append(
            Load(
                mem=MemId.WGT,
                sram_base=self.slots.wgt[slot],
                dram_base=self.dram.weight + tile.oc0 * row + ic0 * kk,
                y_size=tile.toc,
                x_size=tic * kk,
                x_stride=row,
            )
        )

    def _gemm(
        self, tile: Tile, tic: int, islot: int, wslot: int, a: int, part: int | None = None
    ) -> None:
        """The step's GEMM, or with `part` only its input-channel block `part`; on the
        depthwise mode, its DEPTHWISE over the window."""
        if self.low.windowed:
            wr, wc = window(self.low, tile.toh, tile.tow)
            self.insns.append(
                Depthwise(
                    acc_base=self.slots.acc[a],
                    inp_base=self.slots.inp[islot],
                    wgt_base=self.slots.wgt[wslot],
                    in_rows=wr,
                    in_cols=wc,
                    stride_y=self.low.stride[0],
                    stride_x=self.low.stride[1],
                )
            )
            return
        dims = step_dims(self.low, tile.toc, tic, tile.toh, tile.tow)
        base = (self.slots.acc[a], self.slots.inp[islot], self.slots.wgt[wslot])
        if part is not None:
            ic = next(k for k, d in enumerate(dims) if d[0] == "ic")
            name, _, dst, src, wgt = dims[ic]
            dims[ic] = (name, 1, dst, src, wgt)
            base = (base[0], base[1] + part * src, base[2] + part * wgt)
        loops, rest = gemm_loops(dims)
        bgn, end = self.kernels.get(
            ("gemm", base, tuple(dims)), lambda: [Uop(*u) for u in kernel_uops(rest, base)]
        )
        (_, n1, d1, s1, w1), (_, n2, d2, s2, w2) = loops
        self.insns.append(
            Gemm(
                uop_bgn=bgn,
                uop_end=end,
                iter_out=n1,
                iter_in=n2,
                dst_out=d1,
                dst_in=d2,
                src_out=s1,
                src_in=s2,
                wgt_out=w1,
                wgt_in=w2,
            )
        )

    def _store(self, tile: Tile, a: int, row: int = 0) -> list:
        """The STOREs of `tile` (of the output: the pooled rows under a pool)."""
        low = self.low
        oh, ow = (low.pool.oh, low.pool.ow) if low.pool else (low.oh, low.ow)
        plane = oh * ow
        first = self.dram.output + (tile.nb * low.ocb + tile.oc0) * plane
        first += tile.oh0 * ow + tile.ow0
        acc = self.slots.acc[a] + row

        def requant(oc0: int, per_row: bool = False, at: int = row) -> dict:
            return self.epilogue.store_fields(oc0, a, per_row, at)

        if tile.tow == ow:
            return [
                Store(
                    sram_base=acc,
                    dram_base=first,
                    y_size=tile.toc,
                    x_size=tile.pix,
                    x_stride=plane,
                    **requant(tile.oc0, per_row=tile.toc > 1),
                )
            ]
        return [
            Store(
                sram_base=acc + o * tile.pix,
                dram_base=first + o * plane,
                y_size=tile.toh,
                x_size=tile.tow,
                x_stride=ow,
                **requant(tile.oc0 + o, at=row + o * tile.pix),
            )
            for o in range(tile.toc)
        ]
