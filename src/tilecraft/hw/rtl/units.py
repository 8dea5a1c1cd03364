"""The compute stage's two execution units and the loop they share.

`LoopSequencer` walks a GEMM/ALU instruction's loop (i < iter_out, j < iter_in, micro-op u in
[uop_bgn, uop_end)) keeping running offsets (i*out + j*in) instead of multiplying.

`GemmUnit`, one micro-op per cycle: uop read -> indices (range-checked) -> INP/WGT reads -> the
GEMM core -> accumulator read -> add -> accumulator (and narrowed OUT) write. The accumulator
read is transparent to the write port, so back-to-back micro-ops on one row add up.

`AluUnit`: uop read -> indices -> accumulator read of dst (and, for a tensor operand, of src
the next cycle: two reads on one port) -> lane ops -> write, so an immediate op takes one cycle
per micro-op and a tensor op two; a row written by one micro-op is read back correctly by the
next (the write and the next read share a cycle, and the port is transparent).
"""

from __future__ import annotations

from amaranth import Array, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import ALU_MUL_LANES, HwConfig
from tilecraft.hw.isa import AluOp, IsaSpec, Opcode, isa_for
from tilecraft.hw.rtl.alu import alu_lane
from tilecraft.hw.rtl.gemm import GemmCore
from tilecraft.hw.rtl.layouts import insn_layout, uop_layout
from tilecraft.hw.rtl.signatures import ReadAddress, WritePort

STRIDED = ("dst", "src", "wgt")  # the micro-op indices a loop advances


def _per_index(bits: int) -> data.StructLayout:
    return data.StructLayout({f: unsigned(bits) for f in STRIDED})


class LoopSequencer(wiring.Component):
    def __init__(self, spec: IsaSpec, idx_bits: int):
        self.iter_bits = spec.field("iter_out").width
        uop = spec.field("uop_end").width
        super().__init__(
            {
                "start": In(1),
                "uop_bgn": In(uop),
                "uop_end": In(uop),
                "iter_out": In(self.iter_bits),
                "iter_in": In(self.iter_bits),
                "strides_out": In(_per_index(idx_bits)),  # per i, for dst, src and wgt
                "strides_in": In(_per_index(idx_bits)),  # per j
                "advance": In(1),
                "valid": Out(1),
                "u": Out(uop),
                "last": Out(1),
                "offsets": Out(_per_index(idx_bits + self.iter_bits + 1)),  # i*out + j*in
            }
        )

    def elaborate(self, platform):
        m = Module()
        bgn, end = Signal.like(self.uop_bgn), Signal.like(self.uop_end)
        n_out, n_in = Signal(self.iter_bits), Signal(self.iter_bits)
        i, j = Signal(self.iter_bits), Signal(self.iter_bits)
        strides_out, strides_in = Signal.like(self.strides_out), Signal.like(self.strides_in)
        outer = Signal.like(self.offsets)
        last_u = self.u == end - 1
        last_j = j == n_in - 1
        last_i = i == n_out - 1
        m.d.comb += self.last.eq(last_u & last_j & last_i)
        with m.If(self.start):
            m.d.sync += [
                bgn.eq(self.uop_bgn),
                end.eq(self.uop_end),
                n_out.eq(self.iter_out),
                n_in.eq(self.iter_in),
                i.eq(0),
                j.eq(0),
                self.u.eq(self.uop_bgn),
                self.valid.eq(
                    (self.iter_out != 0) & (self.iter_in != 0) & (self.uop_bgn < self.uop_end)
                ),
            ]
            m.d.sync += [
                strides_out.eq(self.strides_out),
                strides_in.eq(self.strides_in),
                outer.eq(0),
                self.offsets.eq(0),
            ]
        with m.Elif(self.valid & self.advance):
            with m.If(~last_u):
                m.d.sync += self.u.eq(self.u + 1)
            with m.Else():
                m.d.sync += self.u.eq(bgn)
                with m.If(~last_j):
                    m.d.sync += j.eq(j + 1)
                    for f in STRIDED:
                        off = self.offsets[f]
                        m.d.sync += off.eq(off + strides_in[f])
                with m.Else():
                    m.d.sync += j.eq(0)
                    with m.If(~last_i):
                        m.d.sync += i.eq(i + 1)
                        for f in STRIDED:
                            nxt = outer[f] + strides_out[f]
                            m.d.sync += [outer[f].eq(nxt), self.offsets[f].eq(nxt)]
                    with m.Else():
                        m.d.sync += self.valid.eq(0)
        return m


def _loop_members(cfg: HwConfig) -> dict:
    spec = isa_for(cfg)
    acc_bits = cfg.batch * cfg.block_out * cfg.acc_bits
    return {
        "start": In(1),
        "insn": In(insn_layout(spec, Opcode.GEMM)),  # ALU shares the loop fields
        "busy": Out(1),
        "done": Out(1),  # pulse: the last write has happened
        "error": Out(1),  # with done: an index was outside its scratchpad
        "uop": Out(ReadAddress(spec.uop_idx_bits, uop_layout(spec))),
        "acc_read": Out(ReadAddress(spec.acc_idx_bits, acc_bits, enable=True)),
        "acc_write": Out(WritePort(spec.acc_idx_bits, acc_bits)),
    }


def _start_loop(m: Module, unit, idx_bits: int, fields: tuple[str, ...]):
    """The loop sequencer, the latched instruction and the running/failed flags both units
    share; `fields` are the index kinds with strides (the rest loop in place)."""
    spec = isa_for(unit.cfg)
    m.submodules.seq = seq = LoopSequencer(spec, idx_bits)
    insn = Signal.like(unit.insn)
    running, failed = Signal(), Signal()
    with m.If(unit.start):
        m.d.sync += [insn.eq(unit.insn), running.eq(1), failed.eq(0)]
    with m.Elif(unit.error):
        m.d.sync += failed.eq(1)
    m.d.comb += [
        seq.start.eq(unit.start),
        seq.uop_bgn.eq(unit.insn.uop_bgn),
        seq.uop_end.eq(unit.insn.uop_end),
        seq.iter_out.eq(unit.insn.iter_out),
        seq.iter_in.eq(unit.insn.iter_in),
    ]
    for f in fields:  # the instruction's (outer, inner) strides of each index it advances
        m.d.comb += [
            seq.strides_out[f].eq(unit.insn[f + "_out"]),
            seq.strides_in[f].eq(unit.insn[f + "_in"]),
        ]
    return seq, insn, running, failed


class GemmUnit(wiring.Component):
    def __init__(self, cfg: HwConfig, packed: bool | None = None):
        self.cfg = cfg
        self.packed = packed
        spec = isa_for(cfg)
        super().__init__(
            {
                **_loop_members(cfg),
                "inp": Out(ReadAddress(spec.inp_idx_bits, cfg.elem_bytes("inp") * 8)),
                "wgt": Out(ReadAddress(spec.wgt_idx_bits, cfg.elem_bytes("wgt") * 8)),
            }
        )
        self.idx_bits = max(spec.acc_idx_bits, spec.inp_idx_bits, spec.wgt_idx_bits)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.core = core = GemmCore(cfg, self.packed)
        seq, insn, running, failed = _start_loop(m, self, self.idx_bits, ("dst", "src", "wgt"))
        reset = insn.reset
        # P0: micro-op read
        m.d.comb += [self.uop.addr.eq(seq.u), seq.advance.eq(1)]
        v1 = Signal()
        off = Signal.like(seq.offsets)
        last1 = Signal()
        m.d.sync += [v1.eq(seq.valid & ~failed & ~self.error), last1.eq(seq.last & seq.valid)]
        m.d.sync += off.eq(seq.offsets)
        # P1: indices
        dst = Signal(32)
        src = Signal(32)
        wgt = Signal(32)
        u = self.uop.data
        m.d.comb += [dst.eq(u.dst + off.dst), src.eq(u.src + off.src), wgt.eq(u.wgt + off.wgt)]
        bad = v1 & (
            (dst >= cfg.depth("acc"))
            | (~reset & ((src >= cfg.depth("inp")) | (wgt >= cfg.depth("wgt"))))
        )
        m.d.comb += [self.inp.addr.eq(src), self.wgt.addr.eq(wgt)]
        # reset: write zeros straight away
        # pipeline registers for dst to the accumulate stage
        depth = 1 + GemmCore.LATENCY  # P1 -> P2 (SRAM data) -> core
        dsts = [Signal.like(self.acc_write.addr, name=f"dst_p{k}") for k in range(depth + 1)]
        vals = [Signal(name=f"v_p{k}") for k in range(depth + 1)]
        lasts = [Signal(name=f"last_p{k}") for k in range(depth + 1)]
        m.d.sync += [dsts[0].eq(dst), vals[0].eq(v1 & ~bad & ~reset), lasts[0].eq(last1)]
        for k in range(depth):
            m.d.sync += [
                dsts[k + 1].eq(dsts[k]),
                vals[k + 1].eq(vals[k]),
                lasts[k + 1].eq(lasts[k]),
            ]
        m.d.comb += [
            core.inp.eq(self.inp.data),
            core.wgt.eq(self.wgt.data),
            core.valid.eq(vals[0]),
        ]
        # accumulate: read at P(depth), data + sums at P(depth + 1)
        a_dst, a_val = dsts[depth - 1], vals[depth - 1]
        sums = Signal.like(core.sums)
        m.d.sync += sums.eq(core.sums)
        m.d.comb += [self.acc_read.addr.eq(a_dst), self.acc_read.en.eq(a_val)]
        w_dst, w_val = dsts[depth], vals[depth]
        lanes = cfg.batch * cfg.block_out
        ab = cfg.acc_bits
        total = Signal.like(self.acc_write.data)
        for k in range(lanes):
            m.d.comb += total[k * ab : (k + 1) * ab].eq(
                self.acc_read.data[k * ab : (k + 1) * ab] + sums[k * ab : (k + 1) * ab]
            )
        w = self.acc_write
        with m.If(v1 & reset & ~bad):
            m.d.comb += [w.addr.eq(dst), w.data.eq(0), w.en.eq(1)]
        with m.Else():
            m.d.comb += [w.addr.eq(w_dst), w.data.eq(total), w.en.eq(w_val)]
        # completion: the last micro-op's write (or reset), or an error
        reset_done = v1 & reset & last1
        gemm_done = lasts[depth] & vals[depth]
        first = Signal()  # an instruction with no steps finishes the cycle after it starts
        m.d.sync += first.eq(self.start)
        finished = Signal()
        m.d.comb += finished.eq(
            running & (reset_done | (gemm_done & ~reset) | bad | (first & ~seq.valid))
        )
        with m.If(finished):
            m.d.sync += running.eq(0)
        m.d.comb += [self.done.eq(finished), self.error.eq(bad), self.busy.eq(running)]
        return m


class AluUnit(wiring.Component):
    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        spec = isa_for(cfg)
        super().__init__(_loop_members(cfg) | {"insn": In(insn_layout(spec, Opcode.ALU))})
        self.idx_bits = max(spec.acc_idx_bits, spec.src_idx_bits)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        spec = isa_for(cfg)
        seq, insn, running, failed = _start_loop(m, self, self.idx_bits, ("dst", "src"))
        tensor = ~insn.use_imm
        depth = cfg.depth("acc")
        lanes, ab = cfg.batch * cfg.block_out, cfg.acc_bits
        group = min(ALU_MUL_LANES, lanes)
        groups = lanes // group
        # Each micro-op takes `phases` cycles in P1: reads (dst, then src for a tensor op: two
        # reads on one port), then for MUL one cycle per lane group on the shared multipliers
        # and one to write.
        is_mul = insn.alu_op == AluOp.MUL
        reads = Mux(tensor, 2, 1)
        phases = Signal(8)
        m.d.comb += phases.eq(Mux(is_mul, reads + groups + 1, reads))
        ph = Signal(8)
        with m.If(self.start):
            m.d.sync += ph.eq(0)
        with m.Elif(running):
            m.d.sync += ph.eq(Mux(ph == phases - 1, 0, ph + 1))
        m.d.comb += [self.uop.addr.eq(seq.u), seq.advance.eq(ph == phases - 1)]
        # P1: indices, dst (or src) read
        v1, last1 = Signal(), Signal()
        ph1 = Signal(8)
        off = Signal.like(seq.offsets)
        m.d.sync += [
            v1.eq(seq.valid & ~failed & ~self.error),
            last1.eq(seq.last & seq.valid),
            ph1.eq(ph),
            off.eq(seq.offsets),
        ]
        dst, src = Signal(32), Signal(32)
        u = self.uop.data
        m.d.comb += [dst.eq(u.dst + off.dst), src.eq(u.src + off.src)]
        bad = Signal()
        m.d.comb += bad.eq(v1 & (ph1 == 0) & ((dst >= depth) | (tensor & (src >= depth))))
        read = self.acc_read
        m.d.comb += [read.en.eq(v1 & ~bad & (ph1 < reads)), read.addr.eq(Mux(ph1 == 1, src, dst))]
        # P2: operands in; non-MUL ops write in the last read phase, MUL after its groups
        w_dst, v2, last2 = Signal.like(self.acc_write.addr), Signal(), Signal()
        ph2 = Signal(8)
        with m.If(ph1 == 0):
            m.d.sync += w_dst.eq(dst)
        m.d.sync += [v2.eq(v1 & ~bad), last2.eq(last1), ph2.eq(ph1)]
        a = Signal.like(read.data)
        b = Signal.like(read.data)
        with m.If(v2 & (ph2 == 0)):
            m.d.sync += a.eq(read.data)
        with m.If(v2 & tensor & (ph2 == 1)):
            m.d.sync += b.eq(read.data)
        lhs = Mux(tensor, a, read.data)
        result = Signal.like(self.acc_write.data)
        for k in range(lanes):
            x = lhs[k * ab : (k + 1) * ab].as_signed()
            y = Mux(tensor, read.data[k * ab : (k + 1) * ab].as_signed(), insn.imm)
            lane = alu_lane(m, spec, insn.alu_op, x, y, with_mul=False)
            m.d.comb += result[k * ab : (k + 1) * ab].eq(lane)
        # MUL: `group` shared multipliers, one lane group per cycle
        product = Signal.like(self.acc_write.data)
        g = Signal(8)
        m.d.comb += g.eq(ph2 - reads)
        active = v2 & is_mul & (ph2 >= reads)
        for i in range(group):
            xs = Array(a[(j * group + i) * ab : (j * group + i + 1) * ab] for j in range(groups))
            ys = Array(b[(j * group + i) * ab : (j * group + i + 1) * ab] for j in range(groups))
            x, y = Signal(signed(ab), name=f"mul_x{i}"), Signal(signed(ab), name=f"mul_y{i}")
            m.d.comb += [x.eq(xs[g]), y.eq(Mux(tensor, ys[g], insn.imm))]
            p = Signal(ab, name=f"mul_p{i}")
            m.d.comb += p.eq((x * y)[:ab])
            for j in range(groups):
                with m.If(active & (g == j)):
                    k = j * group + i
                    m.d.sync += product[k * ab : (k + 1) * ab].eq(p)
        w_val = Signal()
        m.d.comb += w_val.eq(v2 & (ph2 == phases - 1))
        w_last = last2
        w = self.acc_write
        m.d.comb += [w.addr.eq(w_dst), w.data.eq(Mux(is_mul, product, result)), w.en.eq(w_val)]
        first = Signal()
        m.d.sync += first.eq(self.start)
        finished = Signal()
        m.d.comb += finished.eq(running & ((w_val & w_last) | bad | (first & ~seq.valid)))
        with m.If(finished):
            m.d.sync += running.eq(0)
        m.d.comb += [self.done.eq(finished), self.error.eq(bad), self.busy.eq(running)]
        return m
