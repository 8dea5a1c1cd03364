"""The accelerator: register file, fetch, the three stages, their command and token queues,
the scratchpads and the AXI4 master, all sized by one HwConfig.

`Accelerator` uses Amaranth's default clock domain (clk, rst: synchronous, active high);
`Top` is what Verilog and bitstreams are made from: the same design clocked by `aclk` with an
active-low `aresetn`, AXI ports named as Vivado infers them (`s_axi_control_*`, `m_axi_*`)
and an `interrupt` line.
"""

from __future__ import annotations

from amaranth import ClockDomain, ClockSignal, Module, ResetSignal, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import HwConfig
from tilecraft.hw.rtl.axi import Bus, axi4_members, axi_lite_members
from tilecraft.hw.rtl.compute import Compute
from tilecraft.hw.rtl.dma import ReadArbiter
from tilecraft.hw.rtl.fetch import Fetch
from tilecraft.hw.rtl.queues import command_queue, token_queue
from tilecraft.hw.rtl.regfile import ADDR_BITS, RegisterFile
from tilecraft.hw.rtl.stages import LoadStage, StoreStage

AXI_CACHE = 0b0011  # normal non-cacheable bufferable (HP ports; coherent ACP needs 0b1111)


def _members(cfg: HwConfig) -> dict:
    return {
        **axi_lite_members("s_axi_control", ADDR_BITS),
        **axi4_members("m_axi", 64, cfg.axi_data_bits),
        "interrupt": Out(1),
    }


class Accelerator(wiring.Component):
    def __init__(self, cfg: HwConfig, packed: bool | None = None):
        self.cfg = cfg
        self.packed = packed
        super().__init__(_members(cfg))
        # built here, not in elaborate, so benches can watch their ports
        self.regs = RegisterFile(cfg)
        self.fetch = Fetch(cfg)
        self.load = LoadStage(cfg)
        self.compute = Compute(cfg, packed)
        self.store = StoreStage(cfg)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        axi = Bus(self, "m_axi")
        m.submodules.regs = regs = self.regs
        for name, member in axi_lite_members("s_axi_control", ADDR_BITS).items():
            if member.flow == wiring.In:
                m.d.comb += getattr(regs, name).eq(getattr(self, name))
            else:
                m.d.comb += getattr(self, name).eq(getattr(regs, name))
        m.submodules.fetch = fetch = self.fetch
        m.submodules.load = load = self.load
        m.submodules.compute = compute = self.compute
        m.submodules.store = store = self.store

        # ---- run control ------------------------------------------------------------------
        running = Signal()
        done = Signal()
        error = Signal()
        cycles = Signal(64)
        error_code = Signal(8)
        error_index = Signal(32)
        units = (fetch, load, compute, store)
        any_error = Signal()
        for u in units:
            with m.If(u.error_valid & ~error):
                m.d.sync += [error_code.eq(u.error_code), error_index.eq(u.error_index)]
        m.d.comb += any_error.eq(
            fetch.error_valid | load.error_valid | compute.error_valid | store.error_valid
        )
        with m.If(regs.start):
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
        halt = ~running
        for u in units:
            m.d.comb += u.halt.eq(halt)
        m.d.comb += [
            regs.busy.eq(running),
            regs.done.eq(done),
            regs.error.eq(error),
            regs.error_code.eq(error_code),
            regs.error_index.eq(error_index),
            regs.cycles.eq(cycles),
            self.interrupt.eq(done & regs.irq_enable),
        ]
        for u in (fetch, load, compute, store):
            if hasattr(u, "dram_base"):
                m.d.comb += [u.dram_base.eq(regs.dram_base), u.dram_size.eq(regs.dram_size)]
        m.d.comb += [
            fetch.start.eq(regs.start),
            fetch.insn_offset.eq(regs.insn_offset),
            fetch.insn_count.eq(regs.insn_count),
        ]

        # ---- command queues -----------------------------------------------------------------
        # Reset with each START so a run that stopped on an error leaves nothing behind.
        # Buffered (registered reads): block RAM, not ~1,700 LUTs of distributed RAM each.
        for name, stage in (("load", load), ("compute", compute), ("store", store)):
            q = command_queue(cfg)
            m.submodules[f"{name}_cmds"] = q
            m.d.comb += [
                q.w_data.eq(getattr(fetch, f"{name}_cmd")),
                q.w_en.eq(getattr(fetch, f"{name}_valid")),
                getattr(fetch, f"{name}_ready").eq(q.w_rdy),
                stage.cmd.eq(q.r_data),
                stage.cmd_valid.eq(q.r_rdy),
                q.r_en.eq(stage.cmd_ready),
            ]

        # ---- dependence-token queues --------------------------------------------------------
        def tokens(name, pusher_valid, pusher_ready, popper_valid, popper_ready):
            q = token_queue(cfg)
            m.submodules[name] = q
            m.d.comb += [
                q.w_data.eq(1),
                q.w_en.eq(pusher_valid),
                pusher_ready.eq(q.w_rdy),
                popper_valid.eq(q.r_rdy),
                q.r_en.eq(popper_ready),
            ]

        tokens(
            "load_to_compute",
            load.push_valid,
            load.push_ready,
            compute.ltc_valid,
            compute.ltc_ready,
        )
        tokens(
            "compute_to_load", compute.ctl_valid, compute.ctl_ready, load.pop_valid, load.pop_ready
        )
        tokens(
            "compute_to_store",
            compute.cts_valid,
            compute.cts_ready,
            store.pop_valid,
            store.pop_ready,
        )
        tokens(
            "store_to_compute",
            store.push_valid,
            store.push_ready,
            compute.stc_valid,
            compute.stc_ready,
        )

        # ---- scratchpads the load stage writes and the GEMM unit reads ----------------------
        for name in ("inp", "wgt"):
            mem = Memory(shape=unsigned(cfg.elem_bytes(name) * 8), depth=cfg.depth(name), init=[])
            m.submodules[f"{name}_mem"] = mem
            w = mem.write_port()
            r = mem.read_port()
            m.d.comb += [
                w.addr.eq(getattr(load, f"{name}_addr")),
                w.data.eq(getattr(load, f"{name}_data")),
                w.en.eq(getattr(load, f"{name}_en")),
                r.addr.eq(getattr(compute, f"{name}_addr")),
                getattr(compute, f"{name}_data").eq(r.data),
            ]
        m.d.comb += [store.out_rdata.eq(compute.out_rdata), compute.out_raddr.eq(store.out_raddr)]

        # ---- the AXI4 master: reads arbitrated (fetch, compute, load), writes from store ---
        m.submodules.reads = arb = ReadArbiter(cfg, 3)
        for k, client in enumerate((fetch, compute, load)):
            for name in ("ar_valid", "ar_addr", "ar_len", "ar_last", "r_ready"):
                m.d.comb += arb.client(k, name).eq(getattr(client, name))
            for name in ("ar_ready", "r_valid", "r_data"):
                m.d.comb += getattr(client, name).eq(arb.client(k, name))
        size = (cfg.axi_bytes - 1).bit_length()
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
            axi.awaddr.eq(store.awaddr),
            axi.awlen.eq(store.awlen),
            axi.awsize.eq(size),
            axi.awburst.eq(1),
            axi.awcache.eq(AXI_CACHE),
            axi.awprot.eq(0),
            axi.awvalid.eq(store.awvalid),
            store.awready.eq(axi.awready),
            axi.wdata.eq(store.wdata),
            axi.wstrb.eq((1 << cfg.axi_bytes) - 1),
            axi.wlast.eq(store.wlast),
            axi.wvalid.eq(store.wvalid),
            store.wready.eq(axi.wready),
            store.bvalid.eq(axi.bvalid),
            axi.bready.eq(store.bready),
        ]
        return m


class Top(wiring.Component):
    """`Accelerator` with an AXI-style clock and active-low reset, for Verilog and boards."""

    def __init__(self, cfg: HwConfig, packed: bool | None = None):
        self.cfg = cfg
        self.packed = packed
        super().__init__({"aclk": In(1), "aresetn": In(1), **_members(cfg)})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain()
        m.d.comb += [ClockSignal().eq(self.aclk), ResetSignal().eq(~self.aresetn)]
        m.submodules.core = core = Accelerator(self.cfg, self.packed)
        for name, member in _members(self.cfg).items():
            if member.flow == wiring.In:
                m.d.comb += getattr(core, name).eq(getattr(self, name))
            else:
                m.d.comb += getattr(self, name).eq(getattr(core, name))
        return m


def verilog(cfg: HwConfig, name: str = "tilecraft_top", packed: bool | None = None) -> str:
    from amaranth.back import verilog as back

    return back.convert(Top(cfg, packed), name=name)
