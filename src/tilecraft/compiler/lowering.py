"""Lowering a scheduled convolution to instructions and micro-ops.

Tensorization: each reduction step is one GEMM instruction whose two hardware loops run over
the two largest regular dimensions of the step (normally output rows and columns), so its
micro-op kernel holds only the rest (taps x input blocks x output blocks) and is shared by
every tile of the same shape and buffer slots. DMA: the input window of a tile is loaded with
its zero padding made by LOAD itself (nothing padded in DRAM). Epilogue: ALU instructions on the
accumulator tile, per-channel operands kept in reserved accumulator rows; the residual enters
through the GEMM with 0/1 selector weights. Buffers: with double buffering each scratchpad has
two slots; a load whose data is still resident in a slot (weights across tiles in `oc_outer`
order, the input window in `spatial_outer`) is skipped. Dependence flags come afterwards, from
tokens.insert_tokens.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.builder import ProgramBuilder
from tilecraft.compiler.epilogue import EpilogueLowering
from tilecraft.compiler.mapping import Lowered, residual_offsets
from tilecraft.compiler.schedule import ConvSchedule, Tile, budget, ranges, tiles
from tilecraft.compiler.tensorize import gemm_loops, kernel_uops, step_dims, window
from tilecraft.compiler.tokens import insert_tokens
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Alu, AluOp, Finish, Gemm, Load, MemId, Store, Uop
from tilecraft.runtime import layout as L
from tilecraft.runtime.program import Program


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


class ConvEmitter(EpilogueLowering):
    def __init__(self, cfg: HwConfig, low: Lowered, s: ConvSchedule, params: dict, name: str):
        self.cfg, self.low, self.s = cfg, low, s
        self.pb = pb = ProgramBuilder(cfg, name)
        b = budget(cfg, low, s)
        self.b = b
        n = b.slots
        self.inp_slot = [k * b.inp_window for k in range(n)]
        self.res_slot = [n * b.inp_window + k * b.inp_residual for k in range(n)]
        self.wgt_slot = [k * b.wgt_tile for k in range(n)]
        self.select_base = n * b.wgt_tile
        # accumulator slots alternate between the halves (the GEMM/ALU interlock's unit); the
        # epilogue parameters sit at the end of slot 0's region and, double-buffered, also of
        # slot 1's: an epilogue reads its own half's copy while the GEMM core uses the other
        half = cfg.depth("acc") // 2
        region = cfg.depth("acc") // b.acc_slots
        self.acc_slot = [(k % 2) * half + (k // 2) * region for k in range(b.acc_slots)]
        self.param_bases = [
            self.acc_slot[k] + region - b.acc_reserved for k in range(min(b.acc_slots, 2))
        ]
        self.kernels: dict = {}
        self.insns: list = []
        ep, op = low.epilogue, low.op
        bt, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
        self.inp = pb.buffer(
            "input",
            "input",
            (low.nbb, low.icb, low.h, low.w, bt, bi),
            np.int8,
            layout=low.input_layout(),
        )
        kh, kw = low.kernel
        self.wgt = self._param(
            "weight",
            (low.ocb, low.icb, kh, kw, bo, bi),
            np.int8,
            low.weight_layout(),
            params.get("weight"),
        )
        channels = {"pack": "channels", "logical": [op.oc]}
        self.bias = self.mul = self.res = self.sel = None
        if ep.bias:
            self.bias = self._param(
                "bias",
                (low.ocb, bt, bo),
                np.int32,
                {**channels, "range": [-(1 << 16), 1 << 16]},
                params.get("bias"),
            )
        if ep.multiplier == "channel":
            self.mul = self._param(
                "multiplier",
                (low.ocb, bt, bo),
                np.int32,
                {**channels, "range": [1, 1 << 12]},
                params.get("multiplier"),
            )
        if ep.residual:
            rb = -(-op.oc // bi)
            self.res_blocks = rb
            self.res = pb.buffer(
                "residual",
                "input",
                (low.nbb, rb, low.oh, low.ow, bt, bi),
                np.int8,
                layout={"pack": "activation", "logical": list(op.output_shape), "block": "inp"},
            )
            self.offsets = residual_offsets(cfg, op.oc)
            sel = np.zeros((len(self.offsets), bo, bi), np.int8)
            for t, d in enumerate(self.offsets):
                for o in range(bo):
                    if 0 <= o + d < bi:
                        sel[t, o, o + d] = 1
            self.sel = pb.buffer("select", "constant", sel.shape, np.int8, data=sel)
        self.out = pb.buffer(
            "output",
            "output",
            (low.nbb, low.ocb, low.oh, low.ow, bt, bo),
            np.int8,
            layout={"pack": "activation", "logical": list(op.output_shape), "block": "out"},
        )
        # a per-tensor multiplier is an immediate (conv2d._compile checked its range)
        self.m_imm = int(params["multiplier"]) if ep.multiplier == "tensor" else None

    def _param(self, name, shape, dtype, layout, value):
        if value is None:
            return self.pb.buffer(name, "input", shape, dtype, layout=layout)
        value = np.asarray(value)
        want = tuple(layout["logical"])
        if value.shape != want:
            raise ScheduleError(f"{name} has shape {value.shape}; expected {want}")
        info = np.iinfo(dtype)
        if value.size and (value.min() < info.min or value.max() > info.max):
            raise ScheduleError(f"{name} values must fit {np.dtype(dtype).name}")
        packed = L.pack(self.cfg, layout, value.astype(dtype))
        return self.pb.buffer(name, "constant", shape, dtype, data=packed, layout=layout)

    # ---- micro-op kernels ---------------------------------------------------------------------
    def kernel(self, key, make) -> tuple[int, int]:
        if key not in self.kernels:
            uops = make()
            first = self.pb.uops(uops)
            self.kernels[key] = (first, first + len(uops))
        return self.kernels[key]

    def loop(self, key, uops, outer=(1, 0, 0, 0), inner=(1, 0, 0, 0)) -> dict:
        """GEMM/ALU loop fields: outer/inner = (extent, dst stride, src stride, wgt stride)."""
        bgn, end = self.kernel(key, lambda: uops)
        return dict(
            uop_bgn=bgn,
            uop_end=end,
            iter_out=outer[0],
            iter_in=inner[0],
            dst_out=outer[1],
            dst_in=inner[1],
            src_out=outer[2],
            src_in=inner[2],
        )

    # ---- emission -----------------------------------------------------------------------------
    def emit(self) -> Program:
        low, s, cfg = self.low, self.s, self.cfg
        self.insns.append(None)  # LOAD UOP, once every kernel is known
        self._prologue()
        inp_cache, wgt_cache = SlotCache(self.b.slots), SlotCache(self.b.slots)
        steps = ranges(low.icb, s.tile_ic)
        # With several accumulator slots the epilogue of tile t-1 is emitted after the first
        # GEMM of tile t, and tile t+1's accumulators are zeroed after tile t's last GEMM: the
        # ALU unit then works on one half while the GEMM core works on the other.
        n_acc = self.b.acc_slots
        pipelined = n_acc > 1
        order = list(tiles(low, s))
        self._zero(order[0], 0)
        for t, tile in enumerate(order):
            a = t % n_acc
            for i, (ic0, tic) in enumerate(steps):
                islot, ihit = inp_cache.get((tile.nb, ic0, tile.oh0, tile.toh, tile.ow0, tile.tow))
                if not ihit:
                    self._load_window(tile, ic0, tic, islot)
                wslot, whit = wgt_cache.get((tile.oc0, tile.toc, ic0))
                if not whit:
                    self._load_weights(tile, ic0, tic, wslot)
                self._gemm(tile, tic, islot, wslot, a)
                if pipelined and i == 0 and t > 0:
                    self._finish_tile(order[t - 1], (t - 1) % n_acc)
            if not pipelined:
                self._finish_tile(tile, a)
            if t + 1 < len(order):
                self._zero(order[t + 1], (t + 1) % n_acc)
        if pipelined:
            self._finish_tile(order[-1], (len(order) - 1) % n_acc)
        self.insns.append(Finish())
        count = self.pb.uop_count
        if count > cfg.depth("uop"):
            raise ScheduleError(
                f"micro-op buffer: needs {count} micro-ops, has {cfg.depth('uop')} "
                f"(exceeds by {count - cfg.depth('uop')})"
            )
        self.pb.reserve_uops(count)
        region = self.pb.uop_dram(0)
        self.insns[0] = Load(
            mem=MemId.UOP, sram_base=0, dram_base=region, y_size=1, x_size=count, x_stride=count
        )
        flagged = insert_tokens(cfg, self.insns, self.pb._uops, region)
        for insn in flagged:
            self.pb.emit(insn)
        return self.pb.build()

    def _zero(self, tile: Tile, a: int) -> None:
        """Clear the accumulator tile on the ALU unit (a left shift by the lane width gives 0),
        leaving the GEMM core free."""
        self.insns.append(
            Alu(
                op=AluOp.SHR,
                use_imm=True,
                imm=-self.cfg.acc_bits,
                **self._tile_loop(tile, a, 0, False),
            )
        )

    def _finish_tile(self, tile: Tile, a: int) -> None:
        self._epilogue(tile, a)
        self._store(tile, a)

    def _load_window(self, tile: Tile, ic0: int, tic: int, slot: int) -> None:
        low = self.low
        (sh, sw), (ph, pw) = low.stride, low.pad
        wr, wc = window(low, tile.toh, tile.tow)
        if low.row_skip:
            r_lo, y_pad0, y_pad1, ystride = tile.oh0 * sh, 0, 0, sh * low.w
        else:
            r_lo = tile.oh0 * sh - ph
            y_pad0, y_pad1 = max(0, -r_lo), max(0, r_lo + wr - low.h)
            r_lo, ystride = max(r_lo, 0), low.w
        c_lo = tile.ow0 * sw - pw
        x_pad0, x_pad1 = max(0, -c_lo), max(0, c_lo + wc - low.w)
        c_lo = max(c_lo, 0)
        ys, xs = wr - y_pad0 - y_pad1, wc - x_pad0 - x_pad1
        base = self.pb.elem(self.inp, "inp")
        pads = dict(y_pad0=y_pad0, y_pad1=y_pad1, x_pad0=x_pad0, x_pad1=x_pad1)
        first = base + ((tile.nb * low.icb + ic0) * low.h + r_lo) * low.w + c_lo
        if not (low.row_skip or y_pad0 or y_pad1) and ys == low.h:
            # whole planes: the channel blocks are contiguous, one LOAD for all of them
            self.insns.append(
                Load(
                    mem=MemId.INP,
                    sram_base=self.inp_slot[slot],
                    dram_base=first,
                    y_size=tic * ys,
                    x_size=xs,
                    x_stride=ystride,
                    **pads,
                )
            )
            return
        for i in range(tic):
            self.insns.append(
                Load(
                    mem=MemId.INP,
                    sram_base=self.inp_slot[slot] + i * wr * wc,
                    dram_base=first + i * low.h * low.w,
                    y_size=ys,
                    x_size=xs,
                    x_stride=ystride,
                    **pads,
                )
            )

    def _load_weights(self, tile: Tile, ic0: int, tic: int, slot: int) -> None:
        low = self.low
        kk = low.kernel[0] * low.kernel[1]
        row = low.icb * kk
        first = self.pb.elem(self.wgt, "wgt") + tile.oc0 * row + ic0 * kk
        self.insns.append(
            Load(
                mem=MemId.WGT,
                sram_base=self.wgt_slot[slot],
                dram_base=first,
                y_size=tile.toc,
                x_size=tic * kk,
                x_stride=row,
            )
        )

    def _gemm(self, tile: Tile, tic: int, islot: int, wslot: int, a: int) -> None:
        dims = step_dims(self.low, tile.toc, tic, tile.toh, tile.tow)
        loops, rest = gemm_loops(dims)
        base = (self.acc_slot[a], self.inp_slot[islot], self.wgt_slot[wslot])
        bgn, end = self.kernel(
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

    def _store(self, tile: Tile, a: int) -> None:
        low = self.low
        plane = low.oh * low.ow
        first = self.pb.elem(self.out, "out") + (tile.nb * low.ocb + tile.oc0) * plane
        first += tile.oh0 * low.ow + tile.ow0
        if tile.tow == low.ow:
            self.insns.append(
                Store(
                    sram_base=self.acc_slot[a],
                    dram_base=first,
                    y_size=tile.toc,
                    x_size=tile.pix,
                    x_stride=plane,
                )
            )
            return
        for o in range(tile.toc):
            self.insns.append(
                Store(
                    sram_base=self.acc_slot[a] + o * tile.pix,
                    dram_base=first + o * plane,
                    y_size=tile.toh,
                    x_size=tile.tow,
                    x_stride=low.ow,
                )
            )
