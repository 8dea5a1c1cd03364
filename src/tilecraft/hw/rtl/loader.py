"""The LOAD engine shared by the load stage (INP, WGT) and the compute stage (UOP, ACC):
checks the instruction's ranges, runs the 2-D DMA read, and writes the scratchpad row by row,
making the padding itself (y_pad0 rows, then x_pad0 pads / x_size elements / x_pad1 pads per
row, then y_pad1 rows; a pad is zeros, or for INP `pad_value` in every lane), one element per
cycle, each written from registers the cycle after it is made. It has one write port, for
whichever of its targets the instruction names (`mem`); the stage routes it to that
scratchpad."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import BUFFER_NAMES, MemId, Opcode, isa_for
from tilecraft.hw.rtl.dma import ElementStream, ReadClient, ReadyBuffer, log2_exact
from tilecraft.hw.rtl.dsp import registered_product
from tilecraft.hw.rtl.layouts import insn_layout
from tilecraft.hw.rtl.signatures import ADDR_BITS, ERROR_CODE_BITS, ReadPort, WritePort


class LoadEngine(wiring.Component):
    def __init__(self, cfg: HwConfig, targets: tuple[MemId, ...], dsp: str | None = None):
        self.cfg = cfg
        self.targets = targets
        self.dsp = dsp  # where PLAN's products are registered (dsp.registered_product)
        self.spec = isa_for(cfg)
        self.elem_bits = {t: cfg.elem_bytes(BUFFER_NAMES[t]) * 8 for t in targets}
        super().__init__(
            {
                "start": In(1),
                "insn": In(insn_layout(self.spec, Opcode.LOAD)),
                "dram_base": In(ADDR_BITS),
                "dram_size": In(32),
                "busy": Out(1),
                "done": Out(1),  # one-cycle pulse when the instruction has finished
                "error": Out(ERROR_CODE_BITS),  # an ErrorCode (0: none), valid with `done`
                "read": Out(ReadPort(cfg.axi_data_bits)),
                "mem": Out(3),  # the target of the write port: the instruction's memory id
                "write": Out(WritePort(self.spec.sram_bits, max(self.elem_bits.values()))),
            }
        )

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.client = client = ReadClient(cfg)
        wiring.connect(m, wiring.flipped(self.read), client.read)

        insn = Signal.like(self.insn)
        m.d.comb += self.mem.eq(insn.mem)
        # the target, one flip-flop per memory set as the instruction arrives: the muxes that
        # pick a target's stream, depth and element size select on a flip-flop, not on a
        # compare of `mem` (the 86.3 MHz route's worst path ran insn.mem into the write's
        # decision)
        sel = {mem_id: Signal(name=f"sel_{BUFFER_NAMES[mem_id]}") for mem_id in self.targets}
        size_bits = self.spec.field("x_size").width
        # the padded box's width and height, summed into registers as the instruction arrives
        # (so PLAN's multiply starts from flip-flops, not from two adders)
        width = Signal(size_bits + 1)
        height = Signal(size_bits + 1)
        depth = Signal(32)
        for mem_id in self.targets:
            with m.If(sel[mem_id]):
                m.d.comb += depth.eq(cfg.depth(BUFFER_NAMES[mem_id]))

        def in_bytes(elems, bits):
            """elems x the target's element bytes: a power of two, so a shift, not a DSP."""
            scaled = Signal(bits)
            for mem_id in self.targets:
                shift = log2_exact(cfg.elem_bytes(BUFFER_NAMES[mem_id]))
                with m.If(sel[mem_id]):
                    m.d.comb += scaled.eq(elems << shift)
            return scaled

        row_addr0 = Signal(ADDR_BITS)
        m.d.comb += row_addr0.eq(self.dram_base + in_bytes(insn.dram_base, 48))

        streams = {}
        for mem_id in self.targets:
            es = ElementStream(cfg.axi_data_bits, self.elem_bits[mem_id], size_bits)
            m.submodules[f"elems_{BUFFER_NAMES[mem_id]}"] = streams[mem_id] = es
            m.d.comb += [es.beats.payload.eq(client.beats.payload)]
            with m.If(sel[mem_id]):
                m.d.comb += [
                    es.beats.valid.eq(client.beats.valid),
                    client.beats.ready.eq(es.beats.ready),
                ]

        y = Signal(size_bits + 1)
        x = Signal(size_bits + 1)
        addr = Signal(len(self.write.addr))  # CHECK keeps sram_base + area within depth
        data_row = Signal(size_bits + 1)  # data rows started so far
        # the padded box's bounds, summed in PLAN so WRITE only compares registers
        x_data_last, x_last, y_last = (Signal(size_bits + 1) for _ in range(3))
        # x == x_last, kept in a flip-flop (set from x == x_last - 1 as x steps), so the write's
        # row end gates x, y and the flags without a compare in front
        x_at_last, x_last_1 = Signal(), Signal(size_bits + 1)
        y_data_last = Signal(size_bits + 2)  # pad0 + size - 1: pad0 - 1 without rows
        # whether y and x are inside the data box, kept in registers: set where the counter
        # leaves the padding before it, cleared where it leaves the data (equality compares
        # against bounds PLAN worked out), so no carry-chain compare sits between the counters
        # and the write's decision (the 61.8 MHz route's worst path ran y's compares into the
        # element stream's ready)
        in_rows, in_cols, cols_first = Signal(), Signal(), Signal()
        y_before, x_before = Signal(size_bits + 2), Signal(size_bits + 2)  # pad0 - 1 (may wrap)
        # likewise whether x is at the row's first data column (x == x_pad0), for the set-up
        at_pad0, pad0_zero = Signal(), Signal()
        is_data = in_rows & in_cols
        # each stream hands its elements over through a ReadyBuffer: the write's decision (the
        # padded box's compares) never reaches back into the stream and the beat FIFO
        heads = {}
        for mem_id, es in streams.items():
            head = ReadyBuffer(len(es.elems.payload))
            m.submodules[f"head_{BUFFER_NAMES[mem_id]}"] = heads[mem_id] = head
            wiring.connect(m, es.elems, head.i)
        elem_valid = Signal()
        elem = Signal.like(self.write.data)
        for mem_id, head in heads.items():
            with m.If(sel[mem_id]):
                m.d.comb += [elem_valid.eq(head.o.valid), elem.eq(head.o.payload)]
        pad = Signal.like(self.write.data)  # INP: pad_value in every lane; others: zeros
        if MemId.INP in self.targets:
            lanes = cfg.batch * cfg.block_in
            lane = Signal(signed(cfg.inp_bits))
            m.d.comb += lane.eq(insn.pad_value)  # sign-extended
            with m.If(sel[MemId.INP]):
                m.d.comb += pad.eq(Cat(*([lane] * lanes)))
        # the scratchpad write leaves from registers: it lands a cycle later, in DONE at the latest
        write = Signal()
        data = Signal.like(self.write.data, reset_less=True)  # no reset: `en` is
        m.d.comb += self.write.data.eq(data)
        m.d.sync += [
            self.write.addr.eq(addr),
            data.eq(Mux(is_data, elem, pad)),
            self.write.en.eq(write),
        ]
        for mem_id, head in heads.items():
            m.d.comb += head.o.ready.eq(write & is_data & sel[mem_id])
        narrow = any(cfg.elem_bytes(BUFFER_NAMES[t]) < cfg.axi_bytes for t in self.targets)
        per_beat = {
            t: max(cfg.axi_bytes // cfg.elem_bytes(BUFFER_NAMES[t]), 1) for t in self.targets
        }
        row_setup = Signal()
        # the current data row's first element index in DRAM, modulo the elements per beat
        # (all its use): a few bits, not a 48-bit adder on the write's enable
        row_elem = Signal(max(max(per_beat.values()).bit_length() - 1, 1))
        offset = Signal(8)
        for mem_id, per in per_beat.items():
            with m.If(sel[mem_id]):
                m.d.comb += offset.eq(row_elem % per if per > 1 else 0)
        for mem_id, es in streams.items():
            m.d.comb += [
                es.row_start.eq(row_setup & sel[mem_id]),
                es.row_offset.eq(offset),
                es.row_elems.eq(insn.x_size),
            ]

        # The transfer's plan, in two registered steps before CHECK (Timing.dma_plan cycles): the
        # multiplies, then the sums. In one cycle with the checks it was the design's longest
        # path (a MULT18X18D and three carry chains: 33 MHz on an ECP5).
        # y_size - 1, taken as the instruction arrives: PLAN's multiply starts from a register
        rows_1 = Signal(signed(len(self.insn.y_size) + 1))
        rows_stride = Signal(33)  # (y_size - 1) * x_stride
        m.d.comb += rows_stride.eq(registered_product(m, rows_1, insn.x_stride, "rows_x", self.dsp))
        # scratchpad rows written, pads included; both products are ready in SUMS: their
        # operands are registers by PLAN, and the products are registered every cycle
        area = registered_product(m, width, height, "area", self.dsp)
        span_now = Signal(33)
        m.d.comb += span_now.eq(rows_stride + insn.x_size)
        span_elems = Signal(33)  # first element of the first row to the end of the last
        # the DRAM check, (dram_base + span) x element bytes > dram_size, as the span's rows
        # part against what the rest leaves, dram_size // element bytes - dram_base - x_size
        # (`room`, in PLAN): SUMS compares two registers and CHECK reads a flip-flop (as in
        # the store, whose sum-then-compare was on the 86.3 MHz route's list)
        size_elems = Signal(32)
        for mem_id in self.targets:
            with m.If(sel[mem_id]):
                shift = log2_exact(cfg.elem_bytes(BUFFER_NAMES[mem_id]))
                m.d.comb += size_elems.eq(self.dram_size >> shift)
        room = Signal(signed(34))
        # dram_base + x_size, summed as the instruction arrives: PLAN's `room` is then one
        # subtraction after the target's pick (two chained were 10.8 ns from `sel_wgt`)
        base_x = Signal(34)
        dram_over = Signal()
        # the SRAM check, sram_base + area > depth, as area against depth - sram_base
        # (`sram_room`, in PLAN with area), compared in SUMS like the DRAM check
        sram_room = Signal(signed(max(len(insn.sram_base), len(depth)) + 2))
        sram_over = Signal()
        first_addr = Signal(ADDR_BITS)
        row_bytes, stride = in_bytes(insn.x_size, 32), in_bytes(insn.x_stride, 32)
        error = Signal(8)
        # the transfer's fields are driven in every state, `start` alone says when: the
        # planner registers them every cycle and reads them only with start, so the range
        # checks gate one flip-flop, not the whole transfer (the 72.5 MHz route's worst path)
        t = client.transfer
        m.d.comb += [
            t.addr.eq(first_addr),
            t.rows.eq(insn.y_size),
            t.row_bytes.eq(row_bytes),
            t.stride.eq(stride),
            t.span.eq(in_bytes(span_elems, 32)),
        ]
        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.busy.eq(0)
                with m.If(self.start):
                    given = self.insn
                    m.d.sync += [
                        insn.eq(given),
                        width.eq(given.x_pad0 + given.x_size + given.x_pad1),
                        height.eq(given.y_pad0 + given.y_size + given.y_pad1),
                        rows_1.eq(given.y_size - 1),
                        base_x.eq(given.dram_base + given.x_size),
                    ]
                    m.d.sync += [sel[t].eq(given.mem == t) for t in self.targets]
                    m.next = "PLAN"
                    with m.If(self.insn.x_size == 0):  # nothing to move: no plan
                        m.next = "CHECK"
            with m.State("PLAN"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [
                    room.eq(size_elems - base_x),
                    sram_room.eq(depth - insn.sram_base),
                    y_data_last.eq(insn.y_pad0 + insn.y_size - 1),
                    y_before.eq(insn.y_pad0 - 1),
                    x_before.eq(insn.x_pad0 - 1),
                    cols_first.eq((insn.x_pad0 == 0) & (insn.x_size != 0)),
                    pad0_zero.eq(insn.x_pad0 == 0),
                    x_data_last.eq(insn.x_pad0 + insn.x_size - 1),
                    x_last.eq(width - 1),
                    x_last_1.eq(width - 2),
                    y_last.eq(height - 1),
                ]
                m.next = "SUMS"
            with m.State("SUMS"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [
                    span_elems.eq(span_now),
                    dram_over.eq(rows_stride > room),
                    sram_over.eq(area > sram_room),
                    first_addr.eq(row_addr0),
                ]
                m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += [
                    y.eq(0),
                    x.eq(0),
                    addr.eq(insn.sram_base),
                    data_row.eq(0),
                    in_rows.eq((insn.y_pad0 == 0) & (insn.y_size != 0)),
                    in_cols.eq(cols_first),
                    at_pad0.eq(pad0_zero),
                    x_at_last.eq(x_last == 0),
                ]
                with m.If(insn.x_size == 0):
                    m.d.sync += error.eq(0)
                    m.next = "DONE"
                with m.Elif(sram_over):
                    m.d.sync += error.eq(regs.ErrorCode.SRAM_RANGE)
                    m.next = "DONE"
                with m.Elif((insn.y_size != 0) & dram_over):
                    m.d.sync += error.eq(regs.ErrorCode.DRAM_RANGE)
                    m.next = "DONE"
                with m.Else():
                    m.d.sync += error.eq(0)
                    m.d.comb += client.transfer.start.eq(1)
                    m.d.sync += row_elem.eq(insn.dram_base)
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += self.busy.eq(1)
                if narrow:  # one set-up cycle per data row: the stream learns its offset
                    armed = Signal()
                    with m.If(in_rows & at_pad0 & ~armed):
                        m.d.comb += row_setup.eq(1)
                        m.d.sync += armed.eq(1)
                    with m.If(write & is_data & at_pad0):
                        m.d.sync += armed.eq(0)
                m.d.comb += write.eq(~is_data | (elem_valid & ~row_setup))
                with m.If(write):
                    m.d.sync += addr.eq(addr + 1)
                    with m.If(is_data & (x == x_data_last)):
                        m.d.sync += row_elem.eq(row_elem + insn.x_stride)
                    with m.If(x_at_last):
                        m.d.sync += [
                            x.eq(0),
                            y.eq(y + 1),
                            in_cols.eq(cols_first),
                            at_pad0.eq(pad0_zero),
                            x_at_last.eq(x_last == 0),
                        ]
                        with m.If(y == y_data_last):
                            m.d.sync += in_rows.eq(0)
                        with m.Elif(y == y_before):
                            m.d.sync += in_rows.eq(1)
                        with m.If(y == y_last):
                            m.next = "DONE"
                    with m.Else():
                        m.d.sync += [
                            x.eq(x + 1),
                            at_pad0.eq(x == x_before),
                            x_at_last.eq(x == x_last_1),
                        ]
                        with m.If(x == x_data_last):
                            m.d.sync += in_cols.eq(0)
                        with m.Elif(x == x_before):
                            m.d.sync += in_cols.eq(1)
            with m.State("DONE"):
                m.d.comb += [self.busy.eq(1), self.done.eq(1), self.error.eq(error)]
                m.next = "IDLE"
        return m
