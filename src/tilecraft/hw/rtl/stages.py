"""The load and store stages: token handling around the LOAD engine, and the STORE engine.

Load stage: LOAD INP/WGT; pops compute->load tokens, pushes load->compute ones.
Store stage: STORE from OUT (the narrowed accumulator) to DRAM, 2-D strided; pops
compute->store tokens, pushes store->compute ones. Its W data follows its AW bursts; it
finishes when every burst's write response has come back.
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import MemId, Opcode, isa_for
from tilecraft.hw.rtl.axi import axi4_members
from tilecraft.hw.rtl.dma import BurstPlanner, forward_read_port, read_port_members
from tilecraft.hw.rtl.layouts import insn_layout
from tilecraft.hw.rtl.loader import LoadEngine
from tilecraft.hw.rtl.queues import CMD_BITS


def _stage_members(cfg: HwConfig) -> dict:
    return {
        "cmd_valid": In(1),
        "cmd": In(CMD_BITS),
        "cmd_ready": Out(1),
        "pop_valid": In(1),  # a token is there on the queue this stage pops
        "pop_ready": Out(1),
        "push_valid": Out(1),
        "push_ready": In(1),
        "dram_base": In(64),
        "dram_size": In(32),
        "halt": In(1),
        "error_valid": Out(1),
        "error_code": Out(8),
        "error_index": Out(32),
    }


class LoadStage(wiring.Component):
    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        spec = isa_for(cfg)
        members = _stage_members(cfg) | read_port_members(cfg)
        for name in ("inp", "wgt"):
            members[f"{name}_addr"] = Out(spec.sram_bits)
            members[f"{name}_data"] = Out(cfg.elem_bytes(name) * 8)
            members[f"{name}_en"] = Out(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        spec = isa_for(cfg)
        m.submodules.engine = engine = LoadEngine(cfg, (MemId.INP, MemId.WGT))
        forward_read_port(m, self, engine)
        for name in ("inp", "wgt"):
            for part in ("addr", "data", "en"):
                m.d.comb += getattr(self, f"{name}_{part}").eq(getattr(engine, f"{name}_{part}"))
        m.d.comb += [engine.dram_base.eq(self.dram_base), engine.dram_size.eq(self.dram_size)]
        head = insn_layout(spec, Opcode.LOAD)(self.cmd[:128])
        push = Signal()
        index = Signal(32)
        with m.FSM():
            with m.State("IDLE"):
                ok = self.cmd_valid & (~head.pop_next | self.pop_valid) & ~self.halt
                with m.If(ok & ~self.error_valid):
                    m.d.comb += [
                        self.cmd_ready.eq(1),
                        self.pop_ready.eq(head.pop_next),
                        engine.start.eq(1),
                        engine.insn.eq(head),
                    ]
                    m.d.sync += [push.eq(head.push_next), index.eq(self.cmd[128:])]
                    m.next = "RUN"
            with m.State("RUN"), m.If(engine.done):
                with m.If(engine.error != 0):
                    m.d.sync += [
                        self.error_valid.eq(1),
                        self.error_code.eq(engine.error),
                        self.error_index.eq(index),
                    ]
                    m.next = "IDLE"
                with m.Elif(push):
                    m.next = "PUSH"
                with m.Else():
                    m.next = "IDLE"
            with m.State("PUSH"):
                m.d.comb += self.push_valid.eq(1)
                with m.If(self.push_ready):
                    m.next = "IDLE"
        return m


class StoreStage(wiring.Component):
    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        eb = cfg.elem_bytes("out")
        if eb % cfg.axi_bytes:
            raise ValueError(
                f"the RTL's STORE needs OUT elements ({eb} bytes) to be whole AXI beats "
                f"({cfg.axi_bytes} bytes)"
            )
        members = _stage_members(cfg) | {
            "out_raddr": Out(16),
            "out_rdata": In(eb * 8),
        }
        full = axi4_members("m", 64, cfg.axi_data_bits)
        for k in (
            "awaddr",
            "awlen",
            "awvalid",
            "awready",
            "wdata",
            "wlast",
            "wvalid",
            "wready",
            "bvalid",
            "bready",
        ):
            members[k] = full[f"m_{k}"]
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        spec = isa_for(cfg)
        eb, ab = cfg.elem_bytes("out"), cfg.axi_bytes
        k = eb // ab
        m.submodules.plan = plan = BurstPlanner(cfg)
        m.submodules.lens = lens = SyncFIFO(width=9, depth=32)
        m.submodules.elems = elems = SyncFIFO(width=eb * 8, depth=4)
        head = insn_layout(spec, Opcode.LOAD)(self.cmd[:128])
        insn = Signal.like(head)
        index = Signal(32)
        push = Signal()
        total = Signal(32)  # elements to send
        m.d.comb += total.eq(insn.x_size * insn.y_size)
        span_elems = Signal(33)  # first element of the first row to the end of the last
        m.d.comb += span_elems.eq((insn.y_size - 1) * insn.x_stride + insn.x_size)
        last_byte = (insn.dram_base + span_elems) * eb
        # AW from the planner; the burst's beat count goes to the W side
        m.d.comb += [
            self.awaddr.eq(plan.burst_addr),
            self.awlen.eq(plan.burst_beats - 1),
            self.awvalid.eq(plan.valid & lens.w_rdy),
            plan.next.eq(self.awready & lens.w_rdy),
            lens.w_data.eq(plan.burst_beats),
            lens.w_en.eq(self.awvalid & self.awready),
        ]
        bursts = Signal(32)
        responses = Signal(32)
        with m.If(self.awvalid & self.awready):
            m.d.sync += bursts.eq(bursts + 1)
        m.d.comb += self.bready.eq(1)
        with m.If(self.bvalid):
            m.d.sync += responses.eq(responses + 1)
        # element reads from OUT (one cycle latency) into a small FIFO
        read = Signal(32)  # elements read so far
        pending = Signal(3)  # reads whose data has not arrived yet
        landing = Signal()
        space = elems.level + pending < elems.depth
        issue = Signal()
        m.d.comb += [self.out_raddr.eq(insn.sram_base + read)]
        m.d.sync += landing.eq(issue)
        m.d.comb += [elems.w_data.eq(self.out_rdata), elems.w_en.eq(landing)]
        m.d.sync += pending.eq(pending + issue - landing)
        # W: the beats of each element, LSB first, WLAST on each burst's last beat
        part = Signal(range(k + 1))
        beat_in_burst = Signal(9)
        sent = Signal(32)
        m.d.comb += [
            self.wdata.eq((elems.r_data >> (part * ab * 8))[: ab * 8]),
            self.wvalid.eq(elems.r_rdy & lens.r_rdy),
            self.wlast.eq(beat_in_burst == lens.r_data - 1),
        ]
        wfire = self.wvalid & self.wready
        with m.If(wfire):
            with m.If(part == k - 1):
                m.d.comb += elems.r_en.eq(1)
                m.d.sync += [part.eq(0), sent.eq(sent + 1)]
            with m.Else():
                m.d.sync += part.eq(part + 1)
            with m.If(self.wlast):
                m.d.comb += lens.r_en.eq(1)
                m.d.sync += beat_in_burst.eq(0)
            with m.Else():
                m.d.sync += beat_in_burst.eq(beat_in_burst + 1)
        with m.FSM():
            with m.State("IDLE"):
                ok = self.cmd_valid & (~head.pop_prev | self.pop_valid) & ~self.halt
                with m.If(ok & ~self.error_valid):
                    m.d.comb += [self.cmd_ready.eq(1), self.pop_ready.eq(head.pop_prev)]
                    m.d.sync += [insn.eq(head), index.eq(self.cmd[128:]), push.eq(head.push_prev)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [read.eq(0), sent.eq(0), bursts.eq(0), responses.eq(0)]
                with m.If((insn.x_size == 0) | (insn.y_size == 0)):  # nothing to write
                    m.next = "PUSH"
                    with m.If(~push):
                        m.next = "IDLE"
                with m.Elif(insn.sram_base + total > cfg.depth("acc")):
                    m.d.sync += [
                        self.error_valid.eq(1),
                        self.error_index.eq(index),
                        self.error_code.eq(regs.ErrorCode.SRAM_RANGE),
                    ]
                    m.next = "IDLE"
                with m.Elif(last_byte > self.dram_size):
                    m.d.sync += [
                        self.error_valid.eq(1),
                        self.error_index.eq(index),
                        self.error_code.eq(regs.ErrorCode.DRAM_RANGE),
                    ]
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += [
                        plan.start.eq(1),
                        plan.addr.eq(self.dram_base + insn.dram_base * eb),
                        plan.rows.eq(insn.y_size),
                        plan.row_bytes.eq(insn.x_size * eb),
                        plan.stride.eq(insn.x_stride * eb),
                        plan.span.eq(span_elems * eb),
                    ]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += issue.eq((read < total) & space)
                with m.If(issue):
                    m.d.sync += read.eq(read + 1)
                all_sent = (sent == total) & ~plan.busy
                with m.If(all_sent & (responses == bursts)):
                    m.next = "PUSH"
                    with m.If(~push):
                        m.next = "IDLE"
            with m.State("PUSH"):
                m.d.comb += self.push_valid.eq(1)
                with m.If(self.push_ready):
                    m.next = "IDLE"
        return m
