"""Instruction fetch: reads the program a burst at a time (the next burst once the previous one
is dispatched, as the cycle model assumes), checks each instruction, and routes it into the
load, compute or store command queue (the routing of docs/ARCHITECTURE.md), one per cycle.
The element stream hands instructions over through a `ReadyBuffer`, so a command queue's
ready never reaches back into the element stream and its beat FIFO in the same cycle."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import (
    INSN_BITS,
    INSN_BYTES,
    AluOp,
    MemId,
    Opcode,
    Stage,
    insns_per_burst,
    isa_for,
)
from tilecraft.hw.rtl.dma import ElementStream, ReadClient, ReadyBuffer
from tilecraft.hw.rtl.layouts import insn_union
from tilecraft.hw.rtl.signatures import INDEX_BITS, ErrorReport, ReadPort, RunControl, command


class Fetch(wiring.Component):
    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.chunk = insns_per_burst(cfg.burst_len * cfg.axi_bytes)
        super().__init__(
            {
                "start": In(1),
                "insn_offset": In(32),
                "insn_count": In(INDEX_BITS),
                "run": In(RunControl()),
                "error": Out(ErrorReport()),
                "read": Out(ReadPort(cfg.axi_data_bits)),
                # one command stream per stage, indexed by hw.isa.Stage
                "cmds": Out(command()).array(len(Stage)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        spec = isa_for(cfg)
        m.submodules.client = client = ReadClient(cfg)
        # each instruction arrives with its route and error code decoded into registers (the
        # element stream works them out with its last beat), so dispatch starts from flip-flops
        m.submodules.insns = stream = ElementStream(
            cfg.axi_data_bits,
            INSN_BITS,
            decode=lambda word: _classify(spec, word),
            tag_bits=TAG_BITS,
        )
        wiring.connect(m, wiring.flipped(self.read), client.read)
        wiring.connect(m, client.beats, stream.beats)
        m.submodules.head = head = ReadyBuffer(INSN_BITS + TAG_BITS)  # the one being dispatched
        wiring.connect(m, stream.elems, head.i)
        run, error = self.run, self.error
        index = Signal(INDEX_BITS)  # next instruction to dispatch
        requested = Signal(INDEX_BITS)  # instructions requested so far
        # index == requested, in a register (set as each changes): DISPATCH's choice between
        # another request and a dispatch, on the path to the command queues' writes, starts
        # from flip-flops, not from a 16-bit compare
        caught_up = Signal()
        # the next request's size, min(instructions left, a burst's), and what is left after
        # it, in registers: each is worked out the cycle after what it depends on changes
        # (CHECK follows START; DISPATCH, at least a cycle, follows each REQUEST), so neither
        # the subtraction nor the compare is on the path into `requested` (a routed worst path)
        left = Signal(INDEX_BITS)
        n = Signal(INDEX_BITS)
        m.d.sync += n.eq(Mux(left > self.chunk, self.chunk, left))
        word, tag = head.o.payload[:INSN_BITS], head.o.payload[INSN_BITS:]
        routes = {s: tag[s] for s in Stage}
        code = tag[len(Stage) :]
        ready = Cat(*(sel & self.cmds[s].ready for s, sel in routes.items())).any()
        for cmd in self.cmds:
            m.d.comb += [cmd.payload.insn.eq(word), cmd.payload.index.eq(index)]
        # the transfer's fields are driven in every state, `start` alone says when: the
        # planner registers them every cycle and reads them only with start, so the range
        # checks gate one flip-flop, not the whole transfer (the 72.5 MHz route's worst path)
        t = client.transfer
        m.d.comb += [
            t.addr.eq(run.dram_base + self.insn_offset + requested * INSN_BYTES),
            t.rows.eq(1),
            t.row_bytes.eq(n * INSN_BYTES),
            t.stride.eq(n * INSN_BYTES),
            t.span.eq(n * INSN_BYTES),
        ]
        # whether the program lies outside the DRAM region, worked out every cycle from the
        # register file's values (written before START, and not while a run is under way), so
        # CHECK's decision, and the error report it sets, start from a flip-flop
        end = self.insn_offset + self.insn_count * INSN_BYTES
        outside = Signal()
        m.d.sync += outside.eq((self.insn_count == 0) | (end > run.dram_size))
        with m.FSM():
            with m.State("IDLE"), m.If(self.start):
                m.d.sync += [
                    index.eq(0),
                    requested.eq(0),
                    caught_up.eq(1),
                    left.eq(self.insn_count),
                    error.valid.eq(0),
                ]
                m.next = "CHECK"
            with m.State("CHECK"):
                with m.If(outside):
                    m.d.sync += [
                        error.valid.eq(1),
                        error.index.eq(0),
                        error.code.eq(regs.ErrorCode.DRAM_RANGE),
                    ]
                    m.next = "IDLE"
                with m.Else():
                    m.next = "REQUEST"
            with m.State("REQUEST"):
                with m.If(left == 0):
                    m.next = "IDLE"
                with m.Elif(~run.halt):
                    m.d.comb += [
                        client.transfer.start.eq(1),
                        stream.row_start.eq(1),
                        stream.row_offset.eq(0),
                        stream.row_elems.eq(n),
                    ]
                    m.d.sync += [requested.eq(requested + n), left.eq(left - n), caught_up.eq(0)]
                    m.next = "DISPATCH"
            with m.State("DISPATCH"):
                with m.If(caught_up):
                    m.next = "REQUEST"
                with m.Elif(head.o.valid & ~run.halt):
                    with m.If(code != 0):
                        m.d.sync += [error.valid.eq(1), error.index.eq(index), error.code.eq(code)]
                        m.next = "IDLE"
                    with m.Else():
                        for s, sel in routes.items():
                            m.d.comb += self.cmds[s].valid.eq(sel)
                        with m.If(ready):
                            m.d.comb += head.o.ready.eq(1)
                            m.d.sync += [index.eq(index + 1), caught_up.eq(index + 1 == requested)]
        return m


CODE_BITS = 8
TAG_BITS = len(Stage) + CODE_BITS  # an instruction's stage (one-hot), then its error code


def _classify(spec, word):
    """An instruction word's stage, one-hot in hw.isa.Stage's order, and its error code (0 for a
    legal one; the first that applies of: opcode, memory, flags)."""
    insn = insn_union(spec)(word)
    op, mem = insn.load.opcode, insn.load.mem
    is_load_stage = (op == Opcode.LOAD) & ((mem == MemId.INP) | (mem == MemId.WGT))
    is_store = op == Opcode.STORE
    is_compute = ~is_load_stage & ~is_store
    # the config's kinds: DEPTHWISE only with the depthwise mode (as the simulator rules)
    bad_op = op > (Opcode.DEPTHWISE if spec.config.depthwise_window else Opcode.ALU)
    bad_mem = ((op == Opcode.LOAD) & (mem > MemId.ACC)) | (is_store & (mem != MemId.OUT))
    bad_alu = (op == Opcode.ALU) & (insn.alu.alu_op > max(AluOp))
    f = insn.load
    bad_flags = (is_load_stage & (f.pop_prev | f.push_prev)) | (
        is_store & (f.pop_next | f.push_next)
    )
    code = Mux(
        bad_op | bad_alu,
        regs.ErrorCode.ILLEGAL_OPCODE,
        Mux(
            bad_mem, regs.ErrorCode.ILLEGAL_MEMORY, Mux(bad_flags, regs.ErrorCode.ILLEGAL_FLAGS, 0)
        ),
    )
    stages = {Stage.LOAD: is_load_stage, Stage.COMPUTE: is_compute, Stage.STORE: is_store}
    return Cat(*(stages[s] for s in Stage), code[:CODE_BITS])
