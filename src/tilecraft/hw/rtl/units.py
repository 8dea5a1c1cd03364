"""The compute stage's two execution units and the loop they share.

`LoopSequencer` (loop.py) walks a GEMM/ALU instruction's loop (i < iter_out, j < iter_in,
micro-op u in [uop_bgn, uop_end)) keeping running offsets (i*out + j*in) instead of multiplying.

Both units are pipelined for the clock: every scratchpad read comes back from a register
(`SRAM_READ_LATENCY`), indices are summed in a cycle of their own, and the accumulator is
written from a register. A unit's accumulator reads do not see its own writes of the last few
cycles, so each unit forwards them (`WriteHistory`): the value a micro-op works on is always the
row as its predecessors left it.

`GemmUnit`, one micro-op per cycle: uop read -> indices -> range check and INP/WGT reads -> the
GEMM core -> accumulator value (forwarded) + sums -> accumulator (and narrowed OUT) write.

`AluUnit`: uop read -> indices -> accumulator reads of dst (and, for a tensor operand, of src
the next cycle: two reads on one port) -> operands (forwarded, and kept up to date with the
unit's writes: a cycle after each, and the cycle of it from the write-data register) -> lane
ops into registers -> their pick -> write, so an immediate op takes one cycle per
micro-op and a tensor op two, or one where its src is the micro-op before's (the loop's
`src_repeats`: a per-channel operand across a tile's pixels), whose copy is still current; a
micro-op of one cycle that reads the row the micro-op before writes waits one more (`hazard`:
no path from the lane ops back into the operands, see sim.timing.alu_hazards).
"""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import ALU_MUL_LANES, HwConfig
from tilecraft.hw.isa import AluOp, Opcode, isa_for
from tilecraft.hw.rtl.alu import (
    MUL_TAIL,
    OpFlags,
    lane_candidates,
    lane_multiply,
    lane_multiply_dsp,
    lane_product,
    registered,
    select,
)
from tilecraft.hw.rtl.depthwise import DepthwiseEngine
from tilecraft.hw.rtl.forwarding import WriteHistory
from tilecraft.hw.rtl.gemm import GemmCore
from tilecraft.hw.rtl.layouts import insn_layout, uop_layout
from tilecraft.hw.rtl.loop import STRIDED, LoopSequencer
from tilecraft.hw.rtl.replicas import pick, replicated
from tilecraft.hw.rtl.signatures import SRAM_READ_LATENCY, ReadAddress, WritePort


def _loop_members(cfg: HwConfig) -> dict:
    spec = isa_for(cfg)
    acc_bits = cfg.batch * cfg.block_out * cfg.acc_bits
    return {
        "start": In(1),
        "insn": In(insn_layout(spec, Opcode.GEMM)),  # ALU shares the loop fields
        "busy": Out(1),
        "done": Out(1),  # pulse: the last write has happened
        "error": Out(1),  # with done: an index was outside its scratchpad
        # `en` clear holds the word read last (a stalled ALU front end)
        "uop": Out(ReadAddress(spec.uop_idx_bits, uop_layout(spec), enable=True)),
        "acc_read": Out(ReadAddress(spec.acc_idx_bits, acc_bits, enable=True)),
        "acc_write": Out(WritePort(spec.acc_idx_bits, acc_bits)),
    }


def _start_loop(m: Module, unit, idx_bits: int, fields: tuple[str, ...], loops=None):
    """The loop sequencer, the latched instruction and the running/failed flags both units
    share; `fields` are the index kinds with strides (the rest loop in place); the sequencer
    starts where `loops` is set (an instruction without a loop: DEPTHWISE). Also returns
    `failed`'s next value, for copies of the flag (`replicas.replicated`)."""
    spec = isa_for(unit.cfg)
    m.submodules.seq = seq = LoopSequencer(spec, idx_bits)
    insn = Signal.like(unit.insn)
    running, failed = Signal(), Signal()
    with m.If(unit.start):
        m.d.sync += [insn.eq(unit.insn), running.eq(1), failed.eq(0)]
    with m.Elif(unit.error):
        m.d.sync += failed.eq(1)
    failed_next = Mux(unit.start, 0, unit.error | failed)  # (only where a copy is made)
    m.d.comb += [
        seq.start.eq(unit.start if loops is None else unit.start & loops),
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
    return seq, insn, running, failed, failed_next


def _index(base, offset, name: str) -> Signal:
    """A register for base + offset, wide enough never to wrap (the range check sees it all)."""
    bits = max(Value.cast(base).shape().width, Value.cast(offset).shape().width) + 1
    return Signal(bits, name=f"{name}_idx")


def _room(m: Module, depth, offset, name: str, hold=None) -> Signal:
    """depth - offset, from the offset a cycle before it is added (`offset`, one stage of a
    `_delayed` chain, kept alike under `hold`): the range check, index >= depth, is then the
    micro-op's field against this register, one carry chain, not the sum's and a compare's
    (the 93.1 MHz route's worst path, 10.7 ns). Signed: an offset past the depth leaves it
    negative, and every field is then over."""
    width = max(Value.cast(depth).shape().width, Value.cast(offset).shape().width) + 1
    room = Signal(signed(width), name=f"{name}_room")
    with m.If(~hold if hold is not None else 1):
        m.d.sync += room.eq(depth - offset)
    return room


def _delayed(m: Module, value, cycles: int, name: str, hold=None) -> list:
    """`value` and its copies 1..cycles cycles later (each register keeps its value in a cycle
    where `hold` is set: a stalled pipeline's front)."""
    out = [value]
    for k in range(cycles):
        held = Signal.like(value, name=f"{name}_{k + 1}")
        with m.If(~hold if hold is not None else 1):
            m.d.sync += held.eq(out[-1])
        out.append(held)
    return out


class GemmUnit(wiring.Component):
    def __init__(self, cfg: HwConfig, packed: bool | str | None = None):
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
        lat = SRAM_READ_LATENCY
        m.submodules.core = core = GemmCore(cfg, self.packed)
        fields = ("dst", "src", "wgt")
        dw = dw_mode = None  # a config without the depthwise mode builds as it always did
        if cfg.depthwise_window:
            dw = DepthwiseEngine(cfg, core.packed, core.rows)
            is_dw = self.insn.opcode == Opcode.DEPTHWISE
            seq, insn, running, failed, failed_next = _start_loop(
                m, self, self.idx_bits, fields, ~is_dw
            )
            dw_mode = Signal()  # the running instruction is a DEPTHWISE (its own front end)
            dw_next = Mux(self.start, is_dw, dw_mode)
            m.d.sync += dw_mode.eq(dw_next)
            # and a copy of it per multiplier row for the core's operand selects (replicas.py:
            # one flip-flop into every row's operands was on the 1x8x8 routes' failing paths)
            dw_rows = replicated(m, dw_next, core.rows, "dw_mode", self.packed)
            reset = insn.reset & ~dw_mode
        else:
            seq, insn, running, failed, _ = _start_loop(m, self, self.idx_bits, fields)
            reset = insn.reset
        # P0: micro-op read; the word is here at P(lat)
        m.d.comb += [self.uop.addr.eq(seq.u), self.uop.en.eq(1), seq.advance.eq(1)]
        v = _delayed(m, seq.valid & ~failed & ~self.error, lat, "v")
        last = _delayed(m, seq.last & seq.valid, lat, "last")
        off = _delayed(m, seq.offsets, lat, "off")
        # P(lat): indices, summed into registers
        u = self.uop.data
        idx, over = {}, {}
        for f, mem in zip(STRIDED, ("acc", "inp", "wgt")):
            idx[f] = _index(u[f], off[lat][f], f)
            total = Signal.like(idx[f], name=f"{f}_sum")
            m.d.comb += total.eq(u[f] + off[lat][f])
            m.d.sync += idx[f].eq(total)
            over[f] = u[f] >= _room(m, cfg.depth(mem), off[lat - 1][f], f)
        vi, lasti = Signal(), Signal()
        # the range check, registered with the indices: `bad` (the unit's error, and what
        # stops it) is a flip-flop, so only its fan-out lies between it and the error report
        bad = Signal()
        m.d.sync += [
            vi.eq(v[lat]),
            lasti.eq(last[lat]),
            bad.eq(v[lat] & (over["dst"] | (~reset & (over["src"] | over["wgt"])))),
        ]
        # P(lat+1) = "I": range checks; INP/WGT reads; a reset's zeros are written at I+1
        dst, src, wgt = idx["dst"], idx["src"], idx["wgt"]
        at_i = (dst[: len(self.acc_write.addr)], vi & ~bad & ~reset, lasti)
        error = bad
        if dw is None:
            m.d.comb += [self.inp.addr.eq(src), self.wgt.addr.eq(wgt), core.wgt.eq(self.wgt.data)]
        else:  # a DEPTHWISE's passes take the micro-ops' place from I on
            m.submodules.dw = dw
            error = bad | dw.bad
            at_i = (
                Mux(dw_mode, dw.dst, at_i[0]),
                Mux(dw_mode, dw.valid & ~dw.bad, at_i[1]),
                Mux(dw_mode, dw.last, at_i[2]),
            )
            # the mode's stop from a copy of `failed` of its own (the 1x8x8 route at the default
            # seed had the one flag, shared with the micro-op path, into its pass counter and
            # output address, 10.2-10.4 ns)
            (stop,) = replicated(m, failed_next, 1, "dw_stop", self.packed)
            _depthwise_ports(m, cfg, self, core, dw, dw_mode, stop, (src, wgt))
            m.d.comb += core.dw.eq(Cat(*dw_rows))
        # the operands reach the core at I+lat, its sums come out core.LATENCY later at "S"
        to_sums = lat + GemmCore.LATENCY
        dsts = _delayed(m, at_i[0], to_sums + 1, "dst")
        vals = _delayed(m, at_i[1], to_sums + 1, "val")
        lasts = _delayed(m, at_i[2], to_sums + 1, "lst")
        m.d.comb += [core.inp.eq(self.inp.data), core.valid.eq(vals[lat])]
        # accumulate: the row is read at S-lat, added to the sums at S, written at S+1
        m.d.comb += [
            self.acc_read.addr.eq(dsts[to_sums - lat]),
            self.acc_read.en.eq(vals[to_sums - lat]),
        ]
        w = self.acc_write
        lanes, ab = cfg.batch * cfg.block_out, cfg.acc_bits
        history = WriteHistory(m, w, (vals[to_sums], dsts[to_sums]), lanes, self.packed)
        # this cycle's write against the row named next cycle, a cycle early: the write is
        # next cycle's (vals and dsts one step back, or the reset's zeros about to be taken),
        # the row dsts[to_sums - 2] (dsts is a shift register: the GEMM pipeline never holds)
        w_hit = Signal(name="row_w_hit")
        row_next = dsts[to_sums - 2]
        m.d.sync += w_hit.eq(
            (vals[to_sums] & (dsts[to_sums] == row_next))
            | (vi & reset & ~bad & (dst[: len(w.addr)] == row_next))
        )
        hits = history.hits(dsts[to_sums - 1], "row", current=w_hit)
        row = history.latest(hits, self.acc_read.data)
        # a reset's write comes from registers a cycle after its range check, so neither the
        # check's compare nor the index reaches the banks' write ports or the forwarding's
        # row-hit compares in one cycle (that was the routed worst path, hw timing at 60 MHz).
        # The write port is registers alone: a reset's zeros are the sum register's synchronous
        # reset, its row picked a cycle ahead (the 85.9 MHz route had the zeros' pick between
        # the sum register and the accumulator's block RAMs)
        zero_next = Signal()
        m.d.comb += zero_next.eq(vi & reset & ~bad)
        if dw is not None:  # a DEPTHWISE output's first pass writes its sums alone
            fresh = _delayed(m, dw_mode & dw.fresh, to_sums, "fresh")[to_sums]
            row = Mux(fresh, 0, row)
        total = Signal.like(w.data, reset_less=True)  # data: `w_en` says when it is written
        for k in range(lanes):
            m.d.sync += total[k * ab : (k + 1) * ab].eq(
                Mux(zero_next, 0, row[k * ab : (k + 1) * ab] + core.sums[k * ab : (k + 1) * ab])
            )
        w_val = vals[to_sums + 1]
        zero_en, zero_last = Signal(), Signal()
        w_addr, w_en = Signal.like(w.addr, name="w_addr"), Signal(name="w_en")
        m.d.sync += [
            zero_en.eq(zero_next),
            zero_last.eq(lasti),
            w_addr.eq(Mux(zero_next, dst[: len(w.addr)], dsts[to_sums])),
            w_en.eq(zero_next | vals[to_sums]),
        ]
        m.d.comb += [w.addr.eq(w_addr), w.data.eq(total), w.en.eq(w_en)]
        # completion: the last micro-op's write (or reset), or an error
        reset_done = zero_en & zero_last
        gemm_done = lasts[to_sums + 1] & w_val
        first = Signal()  # an instruction with no steps finishes the cycle after it starts
        m.d.sync += first.eq(self.start)
        finished = Signal()
        empty = first & ~seq.valid
        if dw_mode is not None:  # a DEPTHWISE has no loop, and is not empty
            empty &= ~dw_mode
        m.d.comb += finished.eq(running & (reset_done | (gemm_done & ~reset) | error | empty))
        with m.If(finished):
            m.d.sync += running.eq(0)
        m.d.comb += [self.done.eq(finished), self.error.eq(error), self.busy.eq(running)]
        return m


def _depthwise_ports(m: Module, cfg: HwConfig, unit, core, dw, dw_mode, stop, at_i) -> None:
    """The depthwise engine between the GEMM unit's ports and its core: its INP and WGT reads
    in place of the micro-ops' (`at_i`), the window's taps into the core's own inputs, and on
    a packed core the weights of the pair's other lane zeroed for each pass."""
    src, wgt = at_i
    m.d.comb += [
        dw.start.eq(unit.start & (unit.insn.opcode == Opcode.DEPTHWISE)),
        dw.insn.eq(unit.insn.as_value()),
        dw.stop.eq(stop),
        dw.inp_data.eq(unit.inp.data),
        unit.inp.addr.eq(Mux(dw_mode, dw.inp_addr, src)),
        unit.wgt.addr.eq(Mux(dw_mode, dw.wgt_addr, wgt)),
        core.dw_inp.eq(dw.operands),
    ]
    if not core.packed:
        m.d.comb += core.wgt.eq(unit.wgt.data)
        return
    row = cfg.block_in * (1 << cfg.log_wgt_width)
    rows = []
    for o in range(cfg.block_out):
        data = unit.wgt.data[o * row : (o + 1) * row]
        rows.append(Mux(dw_mode & (dw.half != o % 2), 0, data))
    m.d.comb += core.wgt.eq(Cat(*rows))


class AluUnit(wiring.Component):
    def __init__(self, cfg: HwConfig, dsp: str | None = None):
        """`dsp`: gemm.ECP5_DSP (or its model) for MUL's products on registered MULT18X18D."""
        self.cfg = cfg
        self.dsp = dsp
        spec = isa_for(cfg)
        super().__init__(_loop_members(cfg) | {"insn": In(insn_layout(spec, Opcode.ALU))})
        self.idx_bits = max(spec.acc_idx_bits, spec.src_idx_bits)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        spec = isa_for(cfg)
        lat = SRAM_READ_LATENCY
        seq, insn, running, failed, _ = _start_loop(m, self, self.idx_bits, ("dst", "src"))
        tensor = ~insn.use_imm
        depth = cfg.depth("acc")
        lanes, ab = cfg.batch * cfg.block_out, cfg.acc_bits
        group = min(ALU_MUL_LANES, lanes)
        groups = lanes // group
        # Each micro-op spends `phases` cycles in every pipeline step: reads (dst, then src for
        # a tensor op: two reads on one port; a src the micro-op before read is not read
        # again, its copy is current, see the operands below), then for MUL one cycle per lane
        # group into the shared multipliers and MUL_TAIL more until the last group's products
        # are in (the last of them also writes).
        is_mul = insn.alu_op == AluOp.MUL

        def reads(repeat):
            return Mux(tensor & ~repeat, 2, 1)

        # each micro-op's last phase, for a src read and a src repeated, decoded into registers
        # as the instruction is latched (the sequencer advances on a compare of registers)
        given_mul = self.insn.alu_op == AluOp.MUL
        final = [Signal(8, name=f"final_phase{r}") for r in (0, 1)]
        with m.If(self.start):
            for r, reg in enumerate(final):
                n = Mux(self.insn.use_imm, 1, 2) if r == 0 else 1  # reads, as `reads`
                m.d.sync += reg.eq(Mux(given_mul, n + groups + MUL_TAIL, n) - 1)

        def last_phase(repeat):
            return Mux(repeat, final[1], final[0])

        rep = seq.src_repeats
        ph = Signal(8)
        at_last = Signal()
        # `stall` holds everything up to and including I for a cycle (see `hazard` below)
        stall = Signal()
        m.d.comb += at_last.eq(ph == last_phase(rep))
        with m.If(self.start):
            m.d.sync += ph.eq(0)
        with m.Elif(running & ~stall):
            m.d.sync += ph.eq(Mux(at_last, 0, ph + 1))
        m.d.comb += [
            self.uop.addr.eq(seq.u),
            self.uop.en.eq(~stall),
            seq.advance.eq(at_last & ~stall),
        ]
        # P0 -> P(lat): the micro-op word
        v = _delayed(m, seq.valid & ~failed & ~self.error, lat, "v", hold=stall)
        last = _delayed(m, seq.last & seq.valid, lat, "last", hold=stall)
        off = _delayed(m, seq.offsets, lat, "off", hold=stall)
        phs = _delayed(m, ph, lat, "ph", hold=stall)
        reps = _delayed(m, rep, lat, "rep", hold=stall)
        # P(lat): indices, summed into registers
        u = self.uop.data
        dst, src = _index(u.dst, off[lat].dst, "dst"), _index(u.src, off[lat].src, "src")
        dst_sum, src_sum = Signal.like(dst, name="dst_sum"), Signal.like(src, name="src_sum")
        m.d.comb += [dst_sum.eq(u.dst + off[lat].dst), src_sum.eq(u.src + off[lat].src)]
        early = off[lat - 1]
        rooms = {f: _room(m, depth, getattr(early, f), f, hold=stall) for f in ("dst", "src")}
        vi, lasti, phi, repi = Signal(), Signal(), Signal(8), Signal()
        reading, src_phase = Signal(), Signal()  # decoded a cycle early, for the read port
        # The hazard: a micro-op of one phase (an immediate op, or a tensor op whose src
        # repeats) has its X1 the cycle after the micro-op before's, whose result is written
        # two cycles after that X1 (at X1, the lane ops take a write of that cycle from the
        # write-data register: the loop through the lane ops, their pick and that register is
        # three cycles). Where it reads the row that one writes (its dst, or the src it
        # repeats), it waits a cycle at I. Decided as it enters
        # I, from the index sums against the indices of the slot at I (the micro-op before's
        # last phase), into a register: `stall` starts from flip-flops.
        single = ~is_mul & (~tensor | reps[lat])
        before_last = vi & (phi == last_phase(repi))
        # rows compared on the accumulator's index bits: an index beyond them stops the unit
        # (`bad`), so a match the high bits would undo never times a run that completes
        k = spec.acc_idx_bits
        reads_before = (dst_sum[:k] == dst[:k]) | (tensor & reps[lat] & (src_sum[:k] == dst[:k]))
        hazard, stalled = Signal(), Signal()
        # the range check, registered with the indices (the error report starts from `bad`)
        bad = Signal()
        over = (u.dst >= rooms["dst"]) | (tensor & (u.src >= rooms["src"]))
        with m.If(~stall):
            m.d.sync += [
                dst.eq(dst_sum),
                src.eq(src_sum),
                bad.eq(v[lat] & (phs[lat] == 0) & over),
                vi.eq(v[lat]),
                lasti.eq(last[lat]),
                phi.eq(phs[lat]),
                repi.eq(reps[lat]),
                reading.eq(v[lat] & (phs[lat] < reads(reps[lat]))),
                src_phase.eq(phs[lat] == 1),
                hazard.eq(v[lat] & (phs[lat] == 0) & single & before_last & reads_before),
            ]
        m.d.sync += stalled.eq(stall)
        m.d.comb += stall.eq(hazard & ~stalled)
        # I: the reads (dst, then src; one out of range is harmless: the unit stops)
        read = self.acc_read
        width = len(self.acc_write.addr)
        tag = Signal(width)
        m.d.comb += [
            tag.eq(Mux(src_phase, src, dst)),
            read.en.eq(reading),
            read.addr.eq(tag),
        ]
        # I -> O = I+lat: the read's data; every step also carries dst, phase, last, valid
        tags = _delayed(m, tag, lat, "tag")
        dsts = _delayed(m, dst[:width], lat + 3, "dst")
        vals = _delayed(m, vi & ~bad & ~stall, lat, "val")  # a stall sends a bubble on
        lasts = _delayed(m, lasti, lat + 3, "lst")
        phos = _delayed(m, phi, lat, "pho")
        repos = _delayed(m, repi, lat, "repo")
        w = self.acc_write
        # decoded a cycle early from the stage before's copies (the same registers' inputs)
        done_x, done_x_next = Signal(), Signal()  # X1 now; next cycle
        done_x2 = Signal()  # X2 now: its write is next cycle
        m.d.comb += done_x_next.eq(vals[lat] & (phos[lat] == last_phase(repos[lat])))
        m.d.sync += [done_x.eq(done_x_next), done_x2.eq(done_x)]
        history = WriteHistory(
            m, w, (done_x2, dsts[lat + 2]), lanes, self.dsp, ahead=(done_x, dsts[lat + 1])
        )
        # O: the operands, with the unit's writes the reads missed, then kept up to date from
        # each write to their row (so a src read once serves the micro-ops after it that repeat
        # it: within an instruction, only this unit writes the rows it reads, see the
        # unit-overlap rule of compiler/analysis/verify.py). A write reaches them the cycle
        # after it, from the write-data register: no path from the lane ops back into the
        # operands (`hazard`)
        value = history.latest(history.hits_ahead(tags[lat - 2], "read"), read.data)
        # an immediate op's b is its immediate in every lane, from the instruction's start
        # (so no lane op selects between a tensor and an immediate operand)
        imm = Signal(signed(ab))
        m.d.comb += imm.eq(insn.imm)
        first = Signal()  # the cycle after start: the instruction is latched
        m.d.sync += first.eq(self.start)
        flags = OpFlags("alu_op")  # registers: decoded as the instruction is latched
        with m.If(self.start):
            m.d.sync += flags.decode(self.insn.alu_op)
        operands = {}
        for name, phase in (("a", 0), ("b", 1)):
            reg = Signal.like(read.data, name=name, reset_less=True)  # data: no reset
            tag = Signal(width, name=f"{name}_tag")
            capture = Signal(name=f"{name}_capture")  # decoded a cycle early, as done_x
            # capture_next: the read at O-1 is this operand's, worked out from O-2's copies
            # into a register (the pipeline's delay lines never hold): the 85.9 MHz route ran
            # repos through reads()' compare and the tag's muxes into b_hit (10.96 ns)
            ph_early = phos[lat - 2]
            capture_next = Signal(name=f"{name}_capture_next")
            m.d.sync += capture_next.eq(
                vals[lat - 2] & (ph_early == phase) & (ph_early < reads(repos[lat - 2]))
            )
            m.d.sync += capture.eq(capture_next)
            # `hit`: this cycle's write goes to the operand's row (its tag as of next cycle),
            # worked out a cycle ahead into a register: that write is X2's (done_x2 and
            # dsts[lat + 2]) a cycle ahead, and the tag as of next cycle follows from the
            # captures due; `bypass`: it goes to the row the operand holds now, whose copy
            # takes it only next cycle (X1 takes it from the write-data register instead)
            enable = 1 if name == "a" else tensor
            tag_next = Mux(capture, tags[lat], tag)  # the tag as of next cycle
            tag_after = Mux(capture_next, tags[lat - 1], tag_next)  # and the cycle after
            hit = Signal(name=f"{name}_hit")
            m.d.sync += hit.eq(enable & done_x2 & (dsts[lat + 2] == tag_after))
            # one flag per lane (replicas.py): one flag for every bit of the operand was the
            # 91.0 MHz route's worst net (3.9 ns). Worked out two cycles ahead (X1's write and
            # the tag the cycle after next, as `hit`) into one register, which the copies take
            # a cycle later: the compare drives one flip-flop, not one per lane (11.8 ns)
            bypass_next = Signal(name=f"{name}_bypass_next")
            m.d.sync += bypass_next.eq(enable & done_x & (dsts[lat + 1] == tag_after))
            bypass = replicated(m, bypass_next, lanes, f"{name}_bypass", self.dsp)
            load_imm = first & insn.use_imm if name == "b" else Const(0)
            held = Mux(load_imm, Cat(*([imm] * lanes)), Mux(capture, value, reg))
            m.d.sync += reg.eq(Mux(hit, w.data, held))
            with m.If(capture):
                m.d.sync += tag.eq(tags[lat])
            # X1 = O+1: the operand as the lane ops and MUL's lane-group picks see it
            current = Signal.like(reg, name=f"{name}_current")
            m.d.comb += current.eq(pick(bypass, w.data, reg))
            operands[name] = current
        lhs, rhs = operands["a"], operands["b"]
        # MUL: `group` shared multipliers, one lane group per cycle, pipelined (see lane_multiply)
        # each lane's three partial products, registered as they leave the DSPs (their sum
        # behind the DSPs' routing was the 81.1 MHz route's 10.75 ns path)
        h = ab // 2
        parts = [
            tuple(
                Signal(n, name=f"mul_part{k}_{j}", reset_less=True)
                for j, n in enumerate((2 * h, ab - h, ab - h))
            )
            for k in range(lanes)
        ]
        result = Signal.like(w.data)
        # X1: the lane ops' candidates into registers; X2: the pick (`select`) into `res`.
        # MUL's products are summed at X2 from their registers (the next micro-op's first lane
        # group is in them several cycles later)
        for k in range(lanes):
            lane = slice(k * ab, (k + 1) * ab)
            x, y = lhs[lane].as_signed(), rhs[lane].as_signed()
            product = Signal(signed(ab), name=f"mul_product{k}")
            m.d.comb += product.eq(lane_product(parts[k], ab))
            cands = lane_candidates(m, spec, x, y, product)
            cands = registered(m, spec, cands, f"lane{k}")
            cands["mul"] = product
            m.d.comb += result[lane].eq(select(m, flags, cands, ab))
        # the lane group X multiplies, and whether it does, decoded a cycle early (as done_x)
        # (g on the bits that name a group: `multiplying` compares the whole difference, and
        # the pick and the products' slot matter only while it is set)
        pick_bits = max(1, (groups - 1).bit_length())
        g, multiplying = Signal(pick_bits), Signal()
        g_early = Signal(8)
        m.d.comb += g_early.eq(phos[lat] - reads(repos[lat]))
        m.d.sync += [
            g.eq(g_early[:pick_bits]),
            multiplying.eq(
                vals[lat] & is_mul & (phos[lat] >= reads(repos[lat])) & (g_early < groups)
            ),
        ]
        active = _delayed(m, multiplying, MUL_TAIL - 1, "mul_v")
        slot = _delayed(m, g, MUL_TAIL - 1, "mul_g")
        # a copy of g for each operand pick (replicas.py): one 8-bit g decoded into every
        # operand bit's pick was the 90.9 MHz route's worst path (three LUTs, 6.8 ns routed)
        picks = replicated(m, g_early[:pick_bits], 2 * group, "mul_pick", self.dsp)
        for i in range(group):
            xs = Array(lhs[(j * group + i) * ab : (j * group + i + 1) * ab] for j in range(groups))
            ys = Array(rhs[(j * group + i) * ab : (j * group + i + 1) * ab] for j in range(groups))
            # the group's operands, picked into fabric registers, which the DSPs multiply with
            # their input registers off (the pick's select fans out to every operand bit:
            # straight into the DSPs' input registers, the 92.2 MHz route's worst paths)
            x = Signal(signed(ab), name=f"mul_x{i}", reset_less=True)
            y = Signal(signed(ab), name=f"mul_y{i}", reset_less=True)
            m.d.sync += [x.eq(xs[picks[2 * i]]), y.eq(ys[picks[2 * i + 1]])]
            if self.dsp:
                p = lane_multiply_dsp(m, x, y, ab, f"mul{i}", self.dsp)
            else:
                p = lane_multiply(m, x, y, ab, f"mul{i}")
            for j in range(groups):
                with m.If(active[-1] & (slot[-1] == j)):
                    k = j * group + i
                    m.d.sync += [r.eq(v) for r, v in zip(parts[k], p, strict=True)]
        # W = X2+1: the write, from registers
        res, w_val = Signal.like(w.data, reset_less=True), Signal()
        m.d.sync += [res.eq(result), w_val.eq(done_x2)]
        w_dst, w_last = dsts[lat + 3], lasts[lat + 3]
        m.d.comb += [w.addr.eq(w_dst), w.data.eq(res), w.en.eq(w_val)]
        finished = Signal()
        m.d.comb += finished.eq(running & ((w_val & w_last) | bad | (first & ~seq.valid)))
        with m.If(finished):
            m.d.sync += running.eq(0)
        m.d.comb += [self.done.eq(finished), self.error.eq(bad), self.busy.eq(running)]
        return m
