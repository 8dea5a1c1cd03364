"""The accelerator's queues, library FIFOs sized from HwConfig: a command queue per stage
(instruction word + its program index; buffered, so it maps to block RAM, and followed by a
register so the stage decodes a flip-flop, not a block RAM's output) and the four
dependence-token queues (one bit wide: only the count matters)."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import HwConfig
from tilecraft.hw.rtl.signatures import COMMAND, command

CMD_BITS = COMMAND.size  # an instruction and its index in the program


def command_queue(cfg: HwConfig) -> SyncFIFOBuffered:
    return SyncFIFOBuffered(width=CMD_BITS, depth=cfg.cmd_queue_depth)


def token_queue(cfg: HwConfig) -> SyncFIFO:
    return SyncFIFO(width=1, depth=cfg.dep_queue_depth)


class StreamRegister(wiring.Component):
    """One register stage on a command stream: full throughput, one cycle of latency."""

    def __init__(self):
        super().__init__({"i": In(command()), "o": Out(command())})

    def elaborate(self, platform):
        m = Module()
        free = self.o.ready | ~self.o.valid
        m.d.comb += self.i.ready.eq(free)
        with m.If(free):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload)]
        return m
