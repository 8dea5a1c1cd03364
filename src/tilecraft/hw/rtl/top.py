"""The accelerator: register file, fetch, the three stages, their command and token queues,
the scratchpads and the AXI4 master, all sized by one HwConfig and joined with
`wiring.connect`.

`Accelerator` uses Amaranth's default clock domain (clk, rst: synchronous, active high);
`Top` is what Verilog and bitstreams are made from: the same design clocked by `aclk` with an
active-low `aresetn`, AXI ports named as Vivado infers them (`s_axi_control_*`, `m_axi_*`)
and an `interrupt` line.
"""

from __future__ import annotations

from amaranth import Cat, ClockDomain, ClockSignal, Module, Mux, ResetSignal, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tilecraft.errors import ConfigError
from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Stage, TokenQueue
from tilecraft.hw.rtl.compute import Compute
from tilecraft.hw.rtl.depthwise import check_window
from tilecraft.hw.rtl.dma import ReadArbiter, ReadyBuffer
from tilecraft.hw.rtl.dsp import ECP5_DSP, ECP5_DSP_MODEL
from tilecraft.hw.rtl.fetch import Fetch
from tilecraft.hw.rtl.gemm import multipliers_packed
from tilecraft.hw.rtl.queues import StreamRegister, command_queue, token_queue
from tilecraft.hw.rtl.regfile import RegisterFile
from tilecraft.hw.rtl.signatures import (
    ADDR_BITS,
    COMMAND,
    NO_RW_CHECK,
    Axi4,
    AxiLite,
    RunControl,
    WritePort,
    flat_ports,
    read_registers,
)
from tilecraft.hw.rtl.stages import LoadStage, StoreStage

AXI_CACHE = 0b0011  # normal non-cacheable bufferable (HP ports; coherent ACP needs 0b1111)


def top_signature(cfg: HwConfig) -> wiring.Signature:
    """The ports of `Top` (without making one)."""
    return wiring.Signature({"aclk": In(1), "aresetn": In(1), **_members(cfg)})


def _members(cfg: HwConfig) -> dict:
    return {
        "s_axi_control": In(AxiLite(regs.ADDR_BITS)),
        "m_axi": Out(Axi4(ADDR_BITS, cfg.axi_data_bits)),
        "interrupt": Out(1),
    }


def refuse_unbuildable(part, cfg: HwConfig, packed: bool | str | None) -> None:
    """A ConfigError for a config this build of the RTL cannot make, raised from `part`'s
    constructor before any of its parts is built (each part built and left unused, `part`
    itself too, would add a warning after the error)."""
    if cfg.depthwise_window:
        try:
            check_window(cfg, multipliers_packed(cfg, packed))
        except ConfigError:
            part._MustUse__used = True  # refused, not forgotten: no UnusedElaboratable warning
            raise


class Accelerator(wiring.Component):
    def __init__(self, cfg: HwConfig, packed: bool | str | None = None):
        self.cfg = cfg
        self.packed = packed
        refuse_unbuildable(self, cfg, packed)
        super().__init__(_members(cfg))
        # built here, not in elaborate, so benches can watch their ports
        self.regs = RegisterFile(cfg)
        self.fetch = Fetch(cfg)
        dsp = packed if packed in (ECP5_DSP, ECP5_DSP_MODEL) else None
        self.load = LoadStage(cfg, dsp)
        self.compute = Compute(cfg, packed)
        self.store = StoreStage(cfg, dsp)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.regs = regs_ = self.regs
        m.submodules.fetch = fetch = self.fetch
        m.submodules.load = load = self.load
        m.submodules.compute = compute = self.compute
        m.submodules.store = store = self.store
        stages = {Stage.LOAD: load, Stage.COMPUTE: compute, Stage.STORE: store}
        wiring.connect(m, wiring.flipped(self.s_axi_control), regs_.bus)

        # ---- run control ------------------------------------------------------------------
        running = Signal()
        done = Signal()
        error = Signal()
        cycles = Signal(64)
        error_code = Signal.like(fetch.error.code)
        error_index = Signal.like(fetch.error.index)
        reports = [unit.error for unit in (fetch, load, compute, store)]
        any_error = Signal()
        for report in reports:
            with m.If(report.valid & ~error):
                m.d.sync += [error_code.eq(report.code), error_index.eq(report.index)]
        m.d.comb += any_error.eq(Cat(*(r.valid for r in reports)).any())
        with m.If(regs_.start):
            m.d.sync += [
                running.eq(1),
                done.eq(0),
                error.eq(0),
                cycles.eq(0),
                error_code.eq(0),
                error_index.eq(0),
            ]
        with m.Elif(running):
            m.d.sync += cycles.eq(cycles + 1)
            with m.If(compute.finished | any_error):
                m.d.sync += [running.eq(0), done.eq(1), error.eq(any_error)]
        m.d.comb += [
            regs_.busy.eq(running),
            regs_.done.eq(done),
            regs_.error.eq(error),
            regs_.error_code.eq(error_code),
            regs_.error_index.eq(error_index),
            regs_.cycles.eq(cycles),
            self.interrupt.eq(done & regs_.irq_enable),
        ]
        run = RunControl().create(path=("run",))
        m.d.comb += [
            run.dram_base.eq(regs_.dram_base),
            run.dram_size.eq(regs_.dram_size),
            run.halt.eq(~running),
        ]
        wiring.connect(m, run, fetch.run, load.run, compute.run, store.run)
        m.d.comb += [
            fetch.start.eq(regs_.start),
            fetch.insn_offset.eq(regs_.insn_offset),
            fetch.insn_count.eq(regs_.insn_count),
        ]

        # ---- command queues: fetch -> each stage ------------------------------------------
        # Not reset by START: a run that stopped on an error leaves its queued commands, its
        # tokens and the units' error reports behind, and the next START stops at once with
        # that error; the board's runtime resets the accelerator then (runtime/pynq.py).
        # Buffered (registered reads): block RAM, not ~1,700 LUTs of distributed RAM each.
        for stage, unit in stages.items():
            q = command_queue(cfg)
            m.submodules[f"{stage.name.lower()}_cmds"] = q
            m.submodules[f"{stage.name.lower()}_cmd"] = held = StreamRegister()
            # the stage's ready stops at a ReadyBuffer (no latency; its ready a flip-flop): the
            # stage's decision (its tokens, its state) never reaches the queue's block RAM
            # enable through the register's (the 98.2 MHz route's worst path, 10.2 ns: the
            # store's token into store_cmds' storage). It holds one command more when the
            # stage stalls, which only a full queue would notice.
            m.submodules[f"{stage.name.lower()}_cmd_ready"] = head = ReadyBuffer(COMMAND)
            wiring.connect(m, fetch.cmds[stage], q.w_stream)
            wiring.connect(m, q.r_stream, held.i)
            wiring.connect(m, held.o, head.i)
            wiring.connect(m, head.o, unit.cmd)

        # ---- dependence-token queues, from hw.isa's table of their ends --------------------
        for q in TokenQueue:
            fifo = token_queue(cfg)
            m.submodules[q.name.lower()] = fifo
            wiring.connect(m, stages[q.producer].tokens[q.push_flag], fifo.w_stream)
            wiring.connect(m, fifo.r_stream, stages[q.consumer].tokens[q.pop_flag])

        # ---- scratchpads the load stage writes and the GEMM unit reads ----------------------
        inp_write = load.inp_write
        if cfg.store_to_inp:  # and INP the store stage too, in turns (`InpTurn`): one port
            wiring.connect(m, load.inp_turn, store.load_inp)
            wiring.connect(m, store.inp_turn, load.store_inp)
            inp_write = WritePort(len(load.inp_write.addr), len(load.inp_write.data)).create(
                path=("inp_write",)
            )
            by_store = store.inp_write.en
            for f in ("addr", "data", "en"):
                pick = Mux(by_store, getattr(store.inp_write, f), getattr(load.inp_write, f))
                m.d.comb += getattr(inp_write, f).eq(pick)
        for name, write, read in (
            ("inp", inp_write, compute.inp),
            ("wgt", load.wgt_write, compute.wgt),
        ):
            mem = Memory(
                shape=unsigned(cfg.elem_bytes(name) * 8),
                depth=cfg.depth(name),
                init=[],
                attrs=NO_RW_CHECK,
            )
            m.submodules[f"{name}_mem"] = mem
            w, r = mem.write_port(), mem.read_port()
            word = read_registers(m, r.data, name)  # SRAM_READ_LATENCY
            # the write reaches the block RAM through a register of its own (what yosys's
            # read-during-write emulation built before NO_RW_CHECK), so the load engine's one
            # write-data register does not drive both memories' 45 block RAMs across the chip
            # (without it, routes of this RTL stalled on congestion). A row lands a cycle
            # later, still well before a token lets the GEMM unit read it.
            w_addr = Signal.like(w.addr, name=f"{name}_w_addr", reset_less=True)
            w_data = Signal.like(w.data, name=f"{name}_w_data", reset_less=True)
            w_en = Signal(name=f"{name}_w_en")
            m.d.sync += [w_addr.eq(write.addr), w_data.eq(write.data), w_en.eq(write.en)]
            m.d.comb += [
                w.addr.eq(w_addr),
                w.data.eq(w_data),
                w.en.eq(w_en),
                r.addr.eq(read.addr),
                read.data.eq(word),
            ]
            if name == "inp" and cfg.requant_residual:  # a copy of INP, written alike, whose
                # read port is the unit's residual add's (the GEMM core keeps its own)
                copy = Memory(shape=mem.shape, depth=mem.depth, init=[], attrs=NO_RW_CHECK)
                m.submodules.inp_residual_mem = copy
                w2, r2 = copy.write_port(), copy.read_port()
                res = store.inp_read
                m.d.comb += [
                    w2.addr.eq(w_addr),
                    w2.data.eq(w_data),
                    w2.en.eq(w_en),
                    r2.addr.eq(res.addr),
                    res.data.eq(read_registers(m, r2.data, "inp_residual")),
                ]
        wiring.connect(m, store.out, compute.out)
        if cfg.requant_lanes:  # the unit's reads, through the bank the store holds
            wiring.connect(m, store.acc, compute.acc_store)
            wiring.connect(m, store.hold, compute.bank_hold)

        # ---- the AXI4 master: reads arbitrated (fetch, compute, load), writes from store ---
        axi = self.m_axi
        readers = (fetch, compute, load)  # the arbiter favours the lower index in a tie
        m.submodules.reads = arb = ReadArbiter(cfg, len(readers))
        for reader, client in zip(readers, arb.clients):
            wiring.connect(m, reader.read, client)
        size = (cfg.axi_bytes - 1).bit_length()
        w = store.axi
        m.d.comb += [
            axi.araddr.eq(arb.araddr),
            axi.arlen.eq(arb.arlen),
            axi.arsize.eq(size),
            axi.arburst.eq(1),
            axi.arcache.eq(AXI_CACHE),
            axi.arprot.eq(0),
            axi.arvalid.eq(arb.arvalid),
            arb.arready.eq(axi.arready),
            arb.rdata.eq(axi.rdata),
            arb.rlast.eq(axi.rlast),
            arb.rvalid.eq(axi.rvalid),
            axi.rready.eq(arb.rready),
            axi.awaddr.eq(w.awaddr),
            axi.awlen.eq(w.awlen),
            axi.awsize.eq(size),
            axi.awburst.eq(1),
            axi.awcache.eq(AXI_CACHE),
            axi.awprot.eq(0),
            axi.awvalid.eq(w.awvalid),
            w.awready.eq(axi.awready),
            axi.wdata.eq(w.wdata),
            axi.wstrb.eq((1 << cfg.axi_bytes) - 1),
            axi.wlast.eq(w.wlast),
            axi.wvalid.eq(w.wvalid),
            w.wready.eq(axi.wready),
            w.bvalid.eq(axi.bvalid),
            axi.bready.eq(w.bready),
        ]
        return m


class Top(wiring.Component):
    """`Accelerator` with an AXI-style clock and active-low reset, for Verilog and boards."""

    def __init__(self, cfg: HwConfig, packed: bool | str | None = None):
        self.cfg = cfg
        self.packed = packed
        refuse_unbuildable(self, cfg, packed)
        super().__init__(top_signature(cfg))

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain()
        # the reset comes from a flip-flop (a cycle after aresetn; set at power-up): the
        # design's largest net starts at a register, not at the pin through an inverter
        rst = Signal(reset_less=True, init=1)
        m.d.sync += rst.eq(~self.aresetn)
        m.d.comb += [ClockSignal().eq(self.aclk), ResetSignal().eq(rst)]
        m.submodules.core = core = Accelerator(self.cfg, self.packed)
        wiring.connect(m, wiring.flipped(self.s_axi_control), core.s_axi_control)
        wiring.connect(m, wiring.flipped(self.m_axi), core.m_axi)
        m.d.comb += self.interrupt.eq(core.interrupt)
        return m


def verilog(cfg: HwConfig, name: str = "tilecraft_top", packed: bool | str | None = None) -> str:
    """The top level's Verilog, its AXI ports named `s_axi_control_*` and `m_axi_*`."""
    from amaranth.back import verilog as back

    top = Top(cfg, packed)
    return back.convert(top, name=name, ports=flat_ports(top))
