"""The accelerator's queues, library FIFOs sized from HwConfig: a command queue per stage
(instruction word + its program index; buffered, so it maps to block RAM) and the four
dependence-token queues (one bit wide: only the count matters)."""

from __future__ import annotations

from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered

from tilecraft.hw.config import HwConfig
from tilecraft.hw.rtl.signatures import COMMAND

CMD_BITS = COMMAND.size  # an instruction and its index in the program


def command_queue(cfg: HwConfig) -> SyncFIFOBuffered:
    return SyncFIFOBuffered(width=CMD_BITS, depth=cfg.cmd_queue_depth)


def token_queue(cfg: HwConfig) -> SyncFIFO:
    return SyncFIFO(width=1, depth=cfg.dep_queue_depth)
