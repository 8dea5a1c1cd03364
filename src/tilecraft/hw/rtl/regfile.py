"""The AXI4-Lite register file, built from hw/regs.py's table."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig
from tilecraft.hw.rtl.signatures import ADDR_BITS, ERROR_CODE_BITS, INDEX_BITS, AxiLite


class RegisterFile(wiring.Component):
    """One transaction at a time: a write needs AW and W (in any order), a read AR; responses
    are OKAY (unknown offsets read 0 and ignore writes)."""

    def __init__(self, cfg: HwConfig):
        self.cfg = cfg
        super().__init__(
            {
                "bus": In(AxiLite(regs.ADDR_BITS)),
                "start": Out(1),  # one-cycle pulse
                "irq_enable": Out(1),
                "insn_count": Out(INDEX_BITS),
                "dram_base": Out(ADDR_BITS),
                "insn_offset": Out(32),
                "dram_size": Out(32),
                "busy": In(1),
                "done": In(1),
                "error": In(1),
                "error_code": In(ERROR_CODE_BITS),
                "error_index": In(INDEX_BITS),
                "cycles": In(64),
            }
        )

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        lo, hi = regs.id_words(self.cfg.digest)
        bit = {mask: mask.bit_length() - 1 for mask in (regs.BUSY, regs.DONE, regs.ERROR)}
        assert bit[regs.BUSY] == 0  # the OR below starts from BUSY, unshifted
        status = self.busy | (self.done << bit[regs.DONE]) | (self.error << bit[regs.ERROR])
        bound = {  # each register of hw/regs.py's table, by name: its offset and access are there
            "CONTROL": None,  # START, below
            "STATUS": status,
            "IRQ_ENABLE": self.irq_enable,
            "INSN_COUNT": self.insn_count,
            "DRAM_BASE_LO": self.dram_base[:32],
            "DRAM_BASE_HI": self.dram_base[32:],
            "INSN_OFFSET": self.insn_offset,
            "DRAM_SIZE": self.dram_size,
            "CYCLES_LO": self.cycles[:32],
            "CYCLES_HI": self.cycles[32:],
            "ERROR_CODE": self.error_code,
            "ERROR_INDEX": self.error_index,
            "ID_LO": lo,
            "ID_HI": hi,
            "MAGIC": regs.MAGIC,
        }
        missing = {r.name for r in regs.REGISTERS} ^ set(bound)
        assert not missing, f"registers of hw/regs.py and the register file differ: {missing}"
        readable = {r.offset: bound[r.name] for r in regs.REGISTERS if "r" in r.access}
        writable = {r.offset: bound[r.name] for r in regs.REGISTERS if r.access == "rw"}
        control = regs.OFFSETS["CONTROL"]
        # write: latch AW and W independently, act when both are held, then answer on B
        aw_addr, aw_ok = Signal(regs.ADDR_BITS), Signal()
        w_data, w_ok = Signal(32), Signal()
        m.d.comb += [
            bus.awready.eq(~aw_ok & ~bus.bvalid),
            bus.wready.eq(~w_ok & ~bus.bvalid),
        ]
        with m.If(bus.awvalid & bus.awready):
            m.d.sync += [aw_addr.eq(bus.awaddr), aw_ok.eq(1)]
        with m.If(bus.wvalid & bus.wready):
            m.d.sync += [w_data.eq(bus.wdata), w_ok.eq(1)]
        m.d.sync += self.start.eq(0)
        with m.If(aw_ok & w_ok):
            m.d.sync += [aw_ok.eq(0), w_ok.eq(0), bus.bvalid.eq(1)]
            with m.Switch(aw_addr[2:]):
                for offset, target in writable.items():
                    with m.Case(offset >> 2):
                        m.d.sync += target.eq(w_data)
                with m.Case(control >> 2):
                    m.d.sync += self.start.eq(w_data[regs.START.bit_length() - 1])
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        m.d.comb += bus.bresp.eq(0)
        # read: AR -> R the next cycle
        m.d.comb += [bus.arready.eq(~bus.rvalid), bus.rresp.eq(0)]
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += bus.rvalid.eq(1)
            m.d.sync += bus.rdata.eq(0)
            with m.Switch(bus.araddr[2:]):
                for offset, value in readable.items():
                    with m.Case(offset >> 2):
                        m.d.sync += bus.rdata.eq(value)
        with m.If(bus.rvalid & bus.rready):
            m.d.sync += bus.rvalid.eq(0)
        return m
