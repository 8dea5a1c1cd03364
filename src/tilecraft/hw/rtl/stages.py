"""The load and store stages: token handling around the LOAD engine, and the STORE engine.

Load stage: LOAD INP/WGT; pops compute->load tokens, pushes load->compute ones.
Store stage: STORE from OUT (the narrowed accumulator) to DRAM, 2-D strided; pops
compute->store tokens, pushes store->compute ones. Its W data follows its AW bursts; it
finishes when every burst's write response has come back. With `store_to_inp`, a requantizing
STORE into INP writes the unit's rows into INP instead (no DRAM), through INP's one write
port, which the two stages take in turns (`InpTurn`): it finishes with its last row's write.

Each stage names its token streams after the dependence flags that use them (`pop_next`, ...)
and lists them in `tokens`, so the top level wires the queues from hw.isa's queue table.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import MemId, Opcode, isa_for
from tilecraft.hw.rtl.dma import BEATS_BITS, BurstPlanner, ReadyBuffer, SkidBuffer, log2_exact
from tilecraft.hw.rtl.dsp import registered_product
from tilecraft.hw.rtl.layouts import insn_layout
from tilecraft.hw.rtl.loader import LoadEngine
from tilecraft.hw.rtl.queues import FlaggedFIFO, HeadRegister
from tilecraft.hw.rtl.requant import LATENCY as LANE_LATENCY
from tilecraft.hw.rtl.requant_store import ROW_QUEUE, BankHold, RequantStream
from tilecraft.hw.rtl.signatures import (
    ADDR_BITS,
    INDEX_BITS,
    LEN_BITS,
    SRAM_READ_LATENCY,
    AxiWrite,
    ErrorReport,
    InpTurn,
    ReadAddress,
    ReadPort,
    RunControl,
    WritePort,
    command,
    token,
)


def _stage_members(pop: str, push: str) -> dict:
    return {
        "cmd": In(command()),
        pop: In(token()),  # the queue this stage pops
        push: Out(token()),  # and the one it pushes
        "run": In(RunControl()),
        "error": Out(ErrorReport()),
    }


# the store's element FIFO: room for the reads in flight and two more (one element a cycle
# while W takes them); with the unit, also the rows queued for its lanes and those in them
# (the rows the unit may be ahead of the write: Timing.requant_ahead)
STORE_AHEAD = SRAM_READ_LATENCY + 2
REQUANT_AHEAD = STORE_AHEAD + ROW_QUEUE + LANE_LATENCY + 1


class LoadStage(wiring.Component):
    def __init__(self, cfg: HwConfig, dsp: str | None = None):
        self.cfg = cfg
        self.dsp = dsp  # where the engine's PLAN products are registered
        spec = isa_for(cfg)
        members = {
            **_stage_members("pop_next", "push_next"),
            "read": Out(ReadPort(cfg.axi_data_bits)),
            "inp_write": Out(WritePort(spec.sram_bits, cfg.elem_bytes("inp") * 8)),
            "wgt_write": Out(WritePort(spec.sram_bits, cfg.elem_bytes("wgt") * 8)),
        }
        if cfg.store_to_inp:  # INP's write port, in turns with the store stage's STOREs into INP
            members |= {"inp_turn": Out(InpTurn()), "store_inp": In(InpTurn())}
        super().__init__(members)
        self.tokens = {"pop_next": self.pop_next, "push_next": self.push_next}

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        spec = isa_for(cfg)
        m.submodules.engine = engine = LoadEngine(cfg, (MemId.INP, MemId.WGT), self.dsp)
        wiring.connect(m, wiring.flipped(self.read), engine.read)
        for mem, port in ((MemId.INP, self.inp_write), (MemId.WGT, self.wgt_write)):
            m.d.comb += [
                port.addr.eq(engine.write.addr),
                port.data.eq(engine.write.data),
                port.en.eq(engine.write.en & (engine.mem == mem)),
            ]
        run, error, cmd = self.run, self.error, self.cmd
        m.d.comb += [engine.dram_base.eq(run.dram_base), engine.dram_size.eq(run.dram_size)]
        head = insn_layout(spec, Opcode.LOAD)(cmd.payload.insn)
        push = Signal()
        index = Signal(INDEX_BITS)
        ok = cmd.valid & (~head.pop_next | self.pop_next.valid) & ~run.halt & ~error.valid
        writes_inp = (head.mem == MemId.INP) & (head.x_size != 0)
        if cfg.store_to_inp:  # an INP LOAD waits while a STORE into INP runs (never starts
            # in the same cycle: the store stage yields to `start`); it takes INP's port as the
            # stage takes it (in IDLE, below), not while it waits behind a running LOAD
            turn = self.inp_turn
            ok = ok & ~(writes_inp & self.store_inp.busy)
            with m.If(turn.start):
                m.d.sync += turn.busy.eq(1)
            with m.Elif(engine.done):
                m.d.sync += turn.busy.eq(0)
        with m.FSM():
            with m.State("IDLE"), m.If(ok):
                m.d.comb += [
                    cmd.ready.eq(1),
                    self.pop_next.ready.eq(head.pop_next),
                    engine.start.eq(1),
                    engine.insn.eq(head),
                ]
                if cfg.store_to_inp:
                    m.d.comb += self.inp_turn.start.eq(writes_inp)
                m.d.sync += [push.eq(head.push_next), index.eq(cmd.payload.index)]
                m.next = "RUN"
            with m.State("RUN"), m.If(engine.done):
                with m.If(engine.error != 0):
                    m.d.sync += [
                        error.valid.eq(1),
                        error.code.eq(engine.error),
                        error.index.eq(index),
                    ]
                    m.next = "IDLE"
                with m.Elif(push):
                    m.next = "PUSH"
                with m.Else():
                    m.next = "IDLE"
            with m.State("PUSH"):
                m.d.comb += self.push_next.valid.eq(1)
                with m.If(self.push_next.ready):
                    m.next = "IDLE"
        return m


class StoreStage(wiring.Component):
    def __init__(self, cfg: HwConfig, dsp: str | None = None):
        self.cfg = cfg
        self.dsp = dsp  # where PLAN's products are registered (dsp.registered_product)
        eb = cfg.elem_bytes("out")
        if eb % cfg.axi_bytes:
            raise ValueError(
                f"the RTL's STORE needs OUT elements ({eb} bytes) to be whole AXI beats "
                f"({cfg.axi_bytes} bytes)"
            )
        members = {
            **_stage_members("pop_prev", "push_prev"),
            "out": Out(ReadAddress(isa_for(cfg).acc_idx_bits, eb * 8)),
            "axi": Out(AxiWrite(cfg.axi_data_bits)),
        }
        if cfg.requant_lanes:  # whole accumulator rows through a bank's read port, held
            acc_bits = cfg.elem_bytes("acc") * 8
            members["acc"] = Out(ReadAddress(isa_for(cfg).acc_idx_bits, acc_bits))
            members["hold"] = Out(BankHold())
        if cfg.requant_residual:  # the unit's residuals through INP's second read port
            inp_row = cfg.elem_bytes("inp") * 8
            members["inp_read"] = Out(ReadAddress(isa_for(cfg).inp_idx_bits, inp_row))
        if cfg.store_to_inp:  # the unit's rows into INP rows, in turns with the INP LOADs
            spec = isa_for(cfg)
            members["inp_write"] = Out(WritePort(spec.sram_bits, cfg.elem_bytes("inp") * 8))
            members |= {"inp_turn": Out(InpTurn()), "load_inp": In(InpTurn())}
        super().__init__(members)
        self.tokens = {"pop_prev": self.pop_prev, "push_prev": self.push_prev}

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        spec = isa_for(cfg)
        eb, ab = cfg.elem_bytes("out"), cfg.axi_bytes
        k = eb // ab
        run, error, cmd, axi = self.run, self.error, self.cmd, self.axi
        m.submodules.plan = plan = BurstPlanner(cfg)
        # each burst's beats, for WLAST: its flags are flip-flops (the 92.2 MHz route's second
        # worst path was SyncFIFO's level, WLAST's compare into the read's level update)
        m.submodules.lens = lens = FlaggedFIFO(BEATS_BITS, 32)
        lens_w, queued = lens.w_stream, lens.r_stream
        # the head burst's beats in a register (`lens_r`): WLAST's compare starts from flip-
        # flops and ends at the FIFO's take, not through its storage back into its read pointer
        # (the 85.9 MHz route's worst path, 11.6 ns)
        m.submodules.lens_head = lens_head = HeadRegister(BEATS_BITS)
        wiring.connect(m, queued, lens_head.i)
        lens_r = lens_head.o
        lead = REQUANT_AHEAD if cfg.requant_lanes else STORE_AHEAD
        m.submodules.elems = elems = SyncFIFO(width=eb * 8, depth=lead)
        head = insn_layout(spec, Opcode.STORE if cfg.requant_lanes else Opcode.LOAD)(
            cmd.payload.insn
        )
        insn = Signal.like(head)
        index = Signal(INDEX_BITS)
        push = Signal()
        # The transfer's plan, in two registered steps before CHECK (Timing.dma_plan cycles), as
        # in the LOAD engine: the multiplies, then the sums
        # (the products registered every cycle from registers, ready in SUMS)
        total = registered_product(m, insn.x_size, insn.y_size, "total", self.dsp)  # elements
        rows_1 = Signal(signed(len(insn.y_size) + 1))  # y_size - 1, taken with the instruction
        rows_stride = Signal(33)  # (y_size - 1) * x_stride
        m.d.comb += rows_stride.eq(registered_product(m, rows_1, insn.x_stride, "rows_x", self.dsp))
        span_now = Signal(33)
        m.d.comb += span_now.eq(rows_stride + insn.x_size)
        span_elems = Signal(33)  # first element of the first row to the end of the last
        # the DRAM check, (dram_base + span) * eb > dram_size, as span's rows part against what
        # the rest leaves: dram_size // eb - dram_base - x_size (`room`, in PLAN), compared in
        # SUMS, so CHECK reads a flip-flop (the 86.3 MHz route ran a 32-bit compare of the sum
        # with DRAM_SIZE into the error register's enable)
        room = Signal(signed(34))
        base_x = Signal(34)  # dram_base + x_size, summed as the instruction arrives
        dram_over = Signal()
        # likewise the SRAM check, sram_base + total > depth, as total against depth -
        # sram_base (`sram_room`, in PLAN with total): a flip-flop by CHECK (the 88.1 MHz
        # route had the sum's compare into the error register's enable)
        sram_room = Signal(signed(len(insn.sram_base) + 2))
        sram_over = Signal()
        param_bad = Signal()  # a requantizing STORE's rows not all in one bank, or past it
        if cfg.requant_lanes:  # (its parameter rows outside the rows' bank, and two rooms: PLAN)
            params_off, bank_room = Signal(), Signal(range(cfg.acc_bank_rows + 1))
        if cfg.requant_residual:
            res_room = Signal(signed(len(insn.residual_base) + 2))
        first_addr = Signal.like(run.dram_base)
        # AW from the planner through a skid buffer; the burst's beat count goes to the W side
        # (through a ReadyBuffer, as a read client's: AW's and the burst lengths' ready never
        # reach the planner's next-burst logic in the same cycle; the 81.8 MHz route's
        # second-worst path, 11.0 ns)
        m.submodules.burst_head = burst_head = ReadyBuffer(plan.bursts.payload.shape())
        wiring.connect(m, plan.bursts, burst_head.i)
        burst = burst_head.o
        m.submodules.aw = aw = SkidBuffer(ADDR_BITS + LEN_BITS)
        taken = burst.valid & aw.i.ready & lens_w.ready
        m.d.comb += [
            aw.i.payload.eq(Cat(burst.payload.addr, burst.payload.beats - 1)),
            aw.i.valid.eq(burst.valid & lens_w.ready),
            burst.ready.eq(aw.i.ready & lens_w.ready),
            lens_w.payload.eq(burst.payload.beats),
            lens_w.valid.eq(burst.valid & aw.i.ready),
            axi.awaddr.eq(aw.o.payload[:ADDR_BITS]),
            axi.awlen.eq(aw.o.payload[ADDR_BITS:]),
            axi.awvalid.eq(aw.o.valid),
            aw.o.ready.eq(axi.awready),
        ]
        bursts = Signal(32)
        responses = Signal(32)
        with m.If(taken):
            m.d.sync += bursts.eq(bursts + 1)
        m.d.comb += axi.bready.eq(1)
        with m.If(axi.bvalid):
            m.d.sync += responses.eq(responses + 1)
        # element reads from OUT (SRAM_READ_LATENCY cycles) into a small FIFO
        read = Signal(32)  # elements read so far
        pending = None  # reads whose element has not landed
        if cfg.requant_lanes:  # room for one more: a flip-flop, worked out a cycle ahead (below)
            space = Signal(init=1)
        else:
            pending = Signal(range(max(elems.depth + 1, 8)))
            space = elems.level + pending < elems.depth
        issue = Signal()
        # with the unit, `read < total` as a flip-flop stepped with `read` (the 73.2 MHz route of
        # 1x8x8 with the unit: the product `total` through that compare, `issue` and `ahead`'s
        # sum into `space`, 13.65 ns in 45 cells)
        more = Signal() if cfg.requant_lanes else None
        m.d.comb += [self.out.addr.eq(insn.sram_base + read)]
        landing = issue
        for step in range(SRAM_READ_LATENCY):
            held = Signal(name=f"landing_{step + 1}")
            m.d.sync += held.eq(landing)
            landing = held
        m.d.comb += [elems.w_data.eq(self.out.data), elems.w_en.eq(landing)]
        requant = stream = None
        into_inp = insn.to_inp if cfg.store_to_inp else None  # no DRAM: the rows into INP
        if cfg.requant_lanes:
            requant = Signal()  # the instruction requantizes (its stream feeds the FIFO)
            m.submodules.requant_unit = stream = RequantStream(cfg, self.dsp)
            wiring.connect(m, wiring.flipped(self.acc), stream.acc)
            if cfg.requant_residual:
                wiring.connect(m, wiring.flipped(self.inp_read), stream.inp)
            want = Signal()
            bank = Signal()
            m.d.comb += [self.hold.want.eq(want), self.hold.bank.eq(bank)]
            takes, to_elems = space, stream.out_valid  # where the unit's rows go
            if cfg.store_to_inp:  # INP's port takes a row a cycle: never a hold on the unit
                takes, to_elems = space | into_inp, to_elems & ~into_inp
            m.d.comb += stream.room.eq(takes)
            with m.If(requant):
                m.d.comb += [
                    issue.eq(stream.issued),
                    elems.w_data.eq(stream.out),
                    elems.w_en.eq(to_elems),
                ]
            # an element lands from the unit's stream, or from OUT for a STORE that does not
            # requantize (which counted its reads as pending forever, and so stalled once 26
            # were: a max pool's STOREs on a config with the unit never finished)
            landing = Mux(requant, stream.out_valid, landing)
        if pending is not None:
            m.d.sync += pending.eq(pending + issue - landing)
        # the elements out to W: with the unit, through a ReadyBuffer, so W's handshake ends at
        # its spare, not in the FIFO's read pointer and level (the 83.2 MHz route of 1x8x8 with
        # the unit: the burst-length head's valid through WVALID and WREADY into the pointer,
        # 12.0 ns); `space` then counts the elements in the FIFO, the spare and on their way
        # (`ahead`), its compare taken on next cycle's count into a flip-flop (the route's
        # `pending` into the unit's read decision, 10.7 ns). The same cycles as without them.
        out_valid, out_data, take = elems.r_rdy, elems.r_data, elems.r_en
        if cfg.requant_lanes:
            m.submodules.w_head = w_head = ReadyBuffer(eb * 8)
            m.d.comb += [
                w_head.i.payload.eq(elems.r_data),
                w_head.i.valid.eq(elems.r_rdy),
                elems.r_en.eq(w_head.i.ready),
            ]
            out_valid, out_data, take = w_head.o.valid, w_head.o.payload, w_head.o.ready
            ahead = Signal(range(elems.depth + 2))
            grow, gone = elems.w_en & elems.w_rdy, take & out_valid
            # the late terms, `issue` (the bank's grant through the unit's read decision),
            # `grow` (a write into the FIFO) and `gone` (W's handshake through the spare's
            # valid), only pick among the counts and compares worked out from the early ones,
            # so no adder or compare lies behind any of them (the 87.7 MHz route of 1x8x8 with
            # the unit: the grant through the read decision and the sum into `space`, 11.40 ns
            # in 18 cells; the 81.8 MHz route: the FIFO's level through W's ready and three
            # chained sums into `space`, 12.23 ns)
            base = ahead - landing
            both, either = issue & grow, issue | grow

            def pick(by_change):  # by_change[c]: the value for a net change of c - 1 (-1..2)
                arrived = [
                    Mux(both, by_change[k + 2], Mux(either, by_change[k + 1], by_change[k]))
                    for k in (0, 1)
                ]
                return Mux(gone, arrived[0], arrived[1])

            m.d.sync += [
                ahead.eq(pick([base + c - 1 for c in range(4)])),
                space.eq(pick([base < elems.depth + 1 - c for c in range(4)])),
            ]
        # W: the beats of each element, LSB first, WLAST on each burst's last beat
        part = Signal(range(k + 1))
        beat_in_burst = Signal(BEATS_BITS, init=1)  # from 1: no subtraction before the compare
        sent = Signal(32)
        m.d.comb += [
            axi.wdata.eq((out_data >> (part * ab * 8))[: ab * 8]),
            axi.wvalid.eq(out_valid & lens_r.valid),
            axi.wlast.eq(beat_in_burst == lens_r.payload),
        ]
        wfire = axi.wvalid & axi.wready
        with m.If(wfire):
            with m.If(part == k - 1):
                m.d.comb += take.eq(1)
                m.d.sync += [part.eq(0), sent.eq(sent + 1)]
            with m.Else():
                m.d.sync += part.eq(part + 1)
            with m.If(axi.wlast):
                m.d.comb += lens_r.ready.eq(1)
                m.d.sync += beat_in_burst.eq(1)
            with m.Else():
                m.d.sync += beat_in_burst.eq(beat_in_burst + 1)

        if cfg.store_to_inp:  # row y's elements to INP rows dram_base + y * x_stride + x
            port = self.inp_write
            at, next_row = Signal.like(port.addr), Signal.like(port.addr)
            x_at, x_last = Signal(32), Signal(32)
            m.d.comb += [
                port.addr.eq(at),
                port.data.eq(stream.out),
                port.en.eq(stream.out_valid & into_inp),
            ]
            with m.If(port.en):
                m.d.sync += sent.eq(sent + 1)
                with m.If(x_at == x_last):
                    m.d.sync += [
                        x_at.eq(0),
                        at.eq(next_row),
                        next_row.eq(next_row + insn.x_stride),
                    ]
                with m.Else():
                    m.d.sync += [x_at.eq(x_at + 1), at.eq(at + 1)]

        def fail(code):
            m.d.sync += [error.valid.eq(1), error.index.eq(index), error.code.eq(code)]

        # the transfer's fields are driven in every state, `start` alone says when: the
        # planner registers them every cycle and reads them only with start, so the range
        # checks gate one flip-flop, not the whole transfer (the 72.5 MHz route's worst path)
        t = plan.transfer
        m.d.comb += [
            t.addr.eq(first_addr),
            t.rows.eq(insn.y_size),
            t.row_bytes.eq(insn.x_size * eb),
            t.stride.eq(insn.x_stride * eb),
            t.span.eq(span_elems * eb),
        ]
        inp_bad, dest_error = None, regs.ErrorCode.DRAM_RANGE
        if cfg.store_to_inp:  # only the unit's rows go into INP; their rows within INP's
            inp_bad = into_inp & ~requant
            dest_error = Mux(
                inp_bad,
                regs.ErrorCode.ILLEGAL_MEMORY,
                Mux(into_inp, regs.ErrorCode.SRAM_RANGE, regs.ErrorCode.DRAM_RANGE),
            )
        with m.FSM():
            with m.State("IDLE"):
                if stream is not None:  # (the bank is held from a STORE's start to its end)
                    m.d.sync += [want.eq(0), requant.eq(0)]
                ok = cmd.valid & (~head.pop_prev | self.pop_prev.valid) & ~run.halt
                ok &= ~error.valid
                if cfg.store_to_inp:  # into INP only while no INP LOAD runs or starts
                    other, turn = self.load_inp, self.inp_turn
                    ok &= ~(head.to_inp & (other.busy | other.start))
                    m.d.sync += turn.busy.eq(0)
                    m.d.comb += turn.start.eq(ok & head.to_inp)
                    with m.If(turn.start):
                        m.d.sync += turn.busy.eq(1)
                with m.If(ok):
                    m.d.comb += [cmd.ready.eq(1), self.pop_prev.ready.eq(head.pop_prev)]
                    m.d.sync += [
                        insn.eq(head),
                        rows_1.eq(head.y_size - 1),
                        base_x.eq(head.dram_base + head.x_size),
                        index.eq(cmd.payload.index),
                        push.eq(head.push_prev),
                    ]
                    if stream is not None:  # its bank's read port asked for at once
                        bb = spec.acc_idx_bits - 1  # the bank: the row index's top bit
                        m.d.sync += [
                            requant.eq(head.requant),
                            want.eq(head.requant),
                            bank.eq(head.sram_base[bb]),
                        ]
                    m.next = "PLAN"
                    with m.If((head.x_size == 0) | (head.y_size == 0)):  # no plan needed
                        m.next = "CHECK"
            with m.State("PLAN"):
                dram_room = (run.dram_size >> log2_exact(eb)) - base_x
                if cfg.store_to_inp:  # dram_base and x_stride count INP rows
                    dram_room = Mux(insn.to_inp, cfg.depth("inp") - base_x, dram_room)
                m.d.sync += [
                    sram_room.eq(cfg.depth("acc") - insn.sram_base),
                    room.eq(dram_room),
                ]
                if stream is not None:  # sim/semantics.py's rule: one bank, in range
                    # what does not wait on `total`, worked out here; SUMS compares `total`
                    # against the rooms (the 81.8 MHz route of 1x8x8 with the unit: `total`
                    # through `sram_base + total - 1` and its bank's compare, 10.4 ns)
                    bank_rows = cfg.acc_bank_rows
                    sets = Mux(insn.param_per_row, insn.y_size, 1)
                    params_end = insn.param_base + (sets << 1) + sets  # 3 rows a set
                    bank_of = insn.sram_base // bank_rows
                    m.d.sync += [
                        params_off.eq(
                            (insn.param_base // bank_rows != bank_of)
                            | ((params_end - 1) // bank_rows != bank_of)
                        ),
                        # the rows from sram_base to its bank's end: the last row,
                        # sram_base + total - 1, stays in the bank while total is at most these
                        bank_room.eq(bank_rows - insn.sram_base % bank_rows),
                    ]
                    if cfg.requant_residual:  # the residual's rows, residual_base + total, in INP's
                        m.d.sync += res_room.eq(cfg.depth("inp") - insn.residual_base)
                m.next = "SUMS"
            with m.State("SUMS"):
                m.d.sync += [
                    span_elems.eq(span_now),
                    dram_over.eq(rows_stride > room),
                    sram_over.eq(total > sram_room),
                    first_addr.eq(run.dram_base + insn.dram_base * eb),
                ]
                if stream is not None:  # (total >= 1 here: an empty STORE skips PLAN and SUMS)
                    bad = params_off | (total > bank_room)
                    if cfg.requant_residual:
                        bad |= insn.residual & (total > res_room)
                    m.d.sync += param_bad.eq(requant & bad)
                m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [read.eq(0), sent.eq(0), bursts.eq(0), responses.eq(0)]
                if more is not None:  # read (0 from here) < total
                    m.d.sync += more.eq(total != 0)
                with m.If((insn.x_size == 0) | (insn.y_size == 0)):  # nothing to write
                    m.next = "PUSH"
                    with m.If(~push):
                        m.next = "IDLE"
                    if cfg.store_to_inp:  # (nor into INP: its port is free before the push)
                        m.d.sync += self.inp_turn.busy.eq(0)
                with m.Elif(sram_over if stream is None else sram_over | param_bad):
                    fail(regs.ErrorCode.SRAM_RANGE)
                    m.next = "IDLE"
                if cfg.requant_residual:  # only the unit adds a residual
                    with m.Elif(insn.residual & ~requant):
                        fail(regs.ErrorCode.ILLEGAL_MEMORY)
                        m.next = "IDLE"
                # (into INP: its rows past INP's, or not the unit's)
                with m.Elif(dram_over | inp_bad if cfg.store_to_inp else dram_over):
                    fail(dest_error)
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += plan.transfer.start.eq(~into_inp if cfg.store_to_inp else 1)
                    if cfg.store_to_inp:
                        m.d.sync += [
                            at.eq(insn.dram_base),
                            next_row.eq(insn.dram_base + insn.x_stride),
                            x_at.eq(0),
                            x_last.eq(insn.x_size - 1),
                        ]
                    if stream is not None:
                        m.d.comb += [
                            stream.start.eq(1),
                            stream.base.eq(insn.sram_base),
                            stream.total.eq(total),
                            stream.per_set.eq(Mux(insn.param_per_row, insn.x_size, total)),
                            stream.param_base.eq(insn.param_base),
                        ]
                        if cfg.requant_residual:
                            m.d.comb += [
                                stream.residual.eq(insn.residual),
                                stream.res_base.eq(insn.residual_base),
                            ]
                    m.next = "RUN"
            with m.State("RUN"):
                if stream is None:
                    m.d.comb += issue.eq((read < total) & space)
                else:
                    with m.If(~requant):
                        m.d.comb += issue.eq(more & space)
                    m.d.comb += stream.go.eq(requant & self.hold.granted)
                with m.If(issue):
                    m.d.sync += read.eq(read + 1)
                    if more is not None:  # read < total, so read + 1 < total unless equal
                        m.d.sync += more.eq(read + 1 != total)
                all_sent = (sent == total) & ~plan.busy
                with m.If(all_sent & (responses == bursts)):
                    m.next = "PUSH"
                    with m.If(~push):
                        m.next = "IDLE"
                    if stream is not None:  # the bank's read port is free again
                        m.d.sync += [want.eq(0), requant.eq(0)]
                        # a parameter row the simulator refuses: the transfer has run out
                        # (nothing is left in flight on AXI), and the STORE stops the run
                        with m.If(requant & stream.bad_params):
                            fail(regs.ErrorCode.REQUANT_PARAMS)
                            m.next = "IDLE"
                    if cfg.store_to_inp:  # and INP's write port
                        m.d.sync += self.inp_turn.busy.eq(0)
            with m.State("PUSH"):
                m.d.comb += self.push_prev.valid.eq(1)
                if stream is not None:
                    m.d.sync += [want.eq(0), requant.eq(0)]
                with m.If(self.push_prev.ready):
                    m.next = "IDLE"
        return m
