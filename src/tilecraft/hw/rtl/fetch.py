"""Instruction fetch: reads the program a burst at a time (the next burst once the previous one
is dispatched, as the cycle model assumes), checks each instruction, and routes it into the
load, compute or store command queue (ARCHITECTURE.md's routing), one per cycle."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import INSN_BYTES, AluOp, MemId, Opcode, insns_per_burst, isa_for
from tilecraft.hw.rtl.dma import ElementStream, ReadClient, forward_read_port, read_port_members
from tilecraft.hw.rtl.layouts import insn_union


class Fetch(wiring.Component):
    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        self.chunk = insns_per_burst(cfg.burst_len * cfg.axi_bytes)
        members = {
            "start": In(1),
            "dram_base": In(64),
            "insn_offset": In(32),
            "insn_count": In(32),
            "dram_size": In(32),
            "halt": In(1),
            "error_valid": Out(1),
            "error_code": Out(8),
            "error_index": Out(32),
            **read_port_members(cfg),
        }
        for q in ("load", "compute", "store"):
            members[f"{q}_valid"] = Out(1)
            members[f"{q}_cmd"] = Out(128 + 32)
            members[f"{q}_ready"] = In(1)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        spec = isa_for(cfg)
        m.submodules.client = client = ReadClient(cfg)
        m.submodules.insns = stream = ElementStream(cfg.axi_data_bits, 128)
        forward_read_port(m, self, client)
        m.d.comb += [
            stream.beat.eq(client.beat),
            stream.beat_valid.eq(client.beat_valid),
            client.beat_ready.eq(stream.beat_ready),
        ]
        index = Signal(32)  # next instruction to dispatch
        requested = Signal(32)  # instructions requested so far
        count = Signal(32)
        n = Signal(32)
        left = count - requested
        m.d.comb += n.eq(Mux(left > self.chunk, self.chunk, left))
        insn = insn_union(spec)(stream.elem)
        op, mem = insn.load.opcode, insn.load.mem
        is_load_stage = (op == Opcode.LOAD) & ((mem == MemId.INP) | (mem == MemId.WGT))
        is_store = op == Opcode.STORE
        is_compute = ~is_load_stage & ~is_store
        bad_op = op > Opcode.ALU
        bad_mem = ((op == Opcode.LOAD) & (mem > MemId.ACC)) | (is_store & (mem != MemId.OUT))
        bad_alu = (op == Opcode.ALU) & (insn.alu.alu_op > max(AluOp))
        f = insn.load
        bad_flags = (is_load_stage & (f.pop_prev | f.push_prev)) | (
            is_store & (f.pop_next | f.push_next)
        )
        cmd = Cat(stream.elem, index)
        ready = (
            (is_load_stage & self.load_ready)
            | (is_compute & self.compute_ready)
            | (is_store & self.store_ready)
        )
        code = Signal(8)
        m.d.comb += code.eq(0)
        with m.If(bad_flags):
            m.d.comb += code.eq(regs.ErrorCode.ILLEGAL_FLAGS)
        with m.If(bad_mem):
            m.d.comb += code.eq(regs.ErrorCode.ILLEGAL_MEMORY)
        with m.If(bad_op | bad_alu):
            m.d.comb += code.eq(regs.ErrorCode.ILLEGAL_OPCODE)
        for q in ("load", "compute", "store"):
            m.d.comb += getattr(self, f"{q}_cmd").eq(cmd)
        with m.FSM():
            with m.State("IDLE"), m.If(self.start):
                m.d.sync += [
                    index.eq(0),
                    requested.eq(0),
                    count.eq(self.insn_count),
                    self.error_valid.eq(0),
                ]
                m.next = "CHECK"
            with m.State("CHECK"):
                end = self.insn_offset + count * INSN_BYTES
                with m.If((count == 0) | (end > self.dram_size)):
                    m.d.sync += [
                        self.error_valid.eq(1),
                        self.error_index.eq(0),
                        self.error_code.eq(regs.ErrorCode.DRAM_RANGE),
                    ]
                    m.next = "IDLE"
                with m.Else():
                    m.next = "REQUEST"
            with m.State("REQUEST"):
                with m.If(requested == count):
                    m.next = "IDLE"
                with m.Elif(~self.halt):
                    m.d.comb += [
                        client.start.eq(1),
                        client.addr.eq(self.dram_base + self.insn_offset + requested * INSN_BYTES),
                        client.rows.eq(1),
                        client.row_bytes.eq(n * INSN_BYTES),
                        client.stride.eq(n * INSN_BYTES),
                        client.span.eq(n * INSN_BYTES),
                        stream.row_start.eq(1),
                        stream.row_offset.eq(0),
                        stream.row_elems.eq(n),
                    ]
                    m.d.sync += requested.eq(requested + n)
                    m.next = "DISPATCH"
            with m.State("DISPATCH"):
                with m.If(index == requested):
                    m.next = "REQUEST"
                with m.Elif(stream.elem_valid & ~self.halt):
                    with m.If(code != 0):
                        m.d.sync += [
                            self.error_valid.eq(1),
                            self.error_index.eq(index),
                            self.error_code.eq(code),
                        ]
                        m.next = "IDLE"
                    with m.Else():
                        for q, sel in (
                            ("load", is_load_stage),
                            ("compute", is_compute),
                            ("store", is_store),
                        ):
                            m.d.comb += getattr(self, f"{q}_valid").eq(sel)
                        with m.If(ready):
                            m.d.comb += stream.elem_ready.eq(1)
                            m.d.sync += index.eq(index + 1)
        return m
