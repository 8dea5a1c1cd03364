"""The accelerator's queues, sized from HwConfig: a command queue per stage (instruction word
+ its program index; buffered, so it maps to block RAM, and followed by a register so the
stage decodes a flip-flop, not a block RAM's output), the four
dependence-token queues (one bit wide: only the count matters), and `FlaggedFIFO`, the read
clients' beat queue."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import HwConfig
from tilecraft.hw.rtl.signatures import COMMAND, NO_RW_CHECK, command, token

CMD_BITS = COMMAND.size  # an instruction and its index in the program


class CommandQueue(SyncFIFOBuffered):
    """Amaranth's SyncFIFOBuffered (the same ports and cycles), its storage under NO_RW_CHECK.

    A read and a write of one row never meet: the storage is read (its port enabled) only
    while it holds an entry and written only while it has room, so the read and write
    pointers are equal in a cycle that does both only when it is empty (no read) or full (no
    write). Without the attribute yosys emulates the old-data answer to that collision: it
    delays each write a cycle and muxes its data into the read, a LUT between each of the
    block RAM's outputs and the register behind it (the 99.1 MHz route's path at seed 2,
    `load_cmds.storage` into the load command's payload index), and the flip-flops that hold
    the delayed write: the routed 1x8x8 went from 28,892 LUTs and 22,021 flip-flops to 28,395
    and 21,388 (benchmarks/TIMING.md, 2026-12-02)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        if self.depth > 1:  # a queue of one entry is its output register alone
            m.submodules.storage.attrs.update(NO_RW_CHECK)
        return m


def command_queue(cfg: HwConfig) -> CommandQueue:
    return CommandQueue(width=CMD_BITS, depth=cfg.cmd_queue_depth)


def token_queue(cfg: HwConfig) -> TokenCounter:
    return TokenCounter(cfg.dep_queue_depth)


class StreamRegister(wiring.Component):
    """One register stage on a command stream: full throughput, one cycle of latency."""

    def __init__(self):
        super().__init__({"i": In(command()), "o": Out(command())})

    def elaborate(self, platform):
        m = Module()
        free = self.o.ready | ~self.o.valid
        payload = Signal.like(self.i.payload, reset_less=True)  # data: `valid` is reset
        m.d.comb += [self.i.ready.eq(free), self.o.payload.eq(payload)]
        with m.If(free):
            m.d.sync += [self.o.valid.eq(self.i.valid), payload.eq(self.i.payload)]
        return m


class HeadRegister(StreamRegister):
    """One register stage on a stream of `width` bits (StreamRegister's, on any payload): behind
    a queue, its consumer's handshake starts from flip-flops and ends at the queue's take, not
    through the queue's storage (read without a register) back into its read pointer."""

    def __init__(self, width: int):
        wiring.Component.__init__(
            self, {"i": In(stream.Signature(width)), "o": Out(stream.Signature(width))}
        )


def _flags(m: Module, depth: int, put, take) -> tuple[Signal, Signal, Signal, Signal]:
    """(full, empty) of a queue of `depth` that takes `put` and gives `take` each cycle, as
    flip-flops set from flip-flops: one short of full and one short of empty are registers
    too, so no adder or compare lies between the handshakes and the flags (SyncFIFO's w_rdy
    and r_rdy compare its level). Returns (full, empty, near_empty: level == 1, near_full:
    level == depth - 1)."""
    # the level and the level one up and one down, all registers: a handshake picks one (a mux),
    # no carry chain follows it (the 86.3 MHz route had a token counter's `level + put - take`
    # on its third-worst path)
    bits = range(-1, depth + 2)
    level, up, down = Signal(bits), Signal(bits, init=1), Signal(bits, init=-1)
    full, empty = Signal(), Signal(init=1)
    near_full, near_empty = Signal(init=depth == 1), Signal()  # level == depth - 1, == 1
    grow, shrink = put & ~take, take & ~put
    m.d.sync += [
        level.eq(Mux(grow, up, Mux(shrink, down, level))),
        up.eq(Mux(grow, up + 1, Mux(shrink, level, up))),
        down.eq(Mux(grow, level, Mux(shrink, down - 1, down))),
        near_full.eq(Mux(grow, level == depth - 2, Mux(shrink, full, near_full))),
        near_empty.eq(Mux(shrink, level == 2, Mux(grow, empty, near_empty))),
        full.eq(Mux(grow, near_full, full & ~shrink)),
        empty.eq(Mux(shrink, near_empty, empty & ~grow)),
    ]
    return full, empty, near_empty, near_full


class FlaggedFIFO(wiring.Component):
    """A first-in first-out queue like Amaranth's SyncFIFO (data out the cycle it is there,
    storage read without a register), whose `w_stream.ready` (not full) and `r_stream.valid`
    (not empty) are flip-flops (`_flags`): neither a level's compare nor the producer's valid
    sits in front of the storage's write enable.

    `staged`: a put is registered first and reaches the storage and flags a cycle later (its
    entry shows a cycle later too), so the producer's handshake ends at one flip-flop; ready
    leaves room for the staged put (not full, and not one short of full with a put staged).

    `counted`: the producer counts the queue's places itself and never puts into a full queue
    (the requantization stream's row queue: its reads hold their places), so `ready` is 1 and
    a put is `valid` alone, nothing of the queue's state in front of the storage's write
    enable."""

    def __init__(self, width: int, depth: int, staged: bool = False, counted: bool = False):
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two of at least 2, not {depth}")
        if staged and counted:
            raise ValueError("a counted queue takes its puts unstaged: staged=True with counted")
        self.width, self.depth, self.staged, self.counted = width, depth, staged, counted
        super().__init__(
            {"w_stream": In(stream.Signature(width)), "r_stream": Out(stream.Signature(width))}
        )

    def elaborate(self, platform):
        m = Module()
        w, r = self.w_stream, self.r_stream
        m.submodules.storage = storage = Memory(
            shape=unsigned(self.width), depth=self.depth, init=[]
        )
        wp, rp = storage.write_port(), storage.read_port(domain="comb")
        w_ptr, r_ptr = Signal(range(self.depth)), Signal(range(self.depth))
        ready, valid = Signal(), Signal()
        put, take = w.valid & ready, r.ready & valid
        data = w.payload
        if self.staged:
            staged_put = Signal()
            data = Signal.like(w.payload, reset_less=True)
            m.d.sync += [staged_put.eq(put), data.eq(w.payload)]
            put = staged_put
        full, empty, _, near_full = _flags(m, self.depth, put, take)
        if self.counted:
            writable = 1
        elif self.staged:
            writable = ~full & ~(near_full & put)
        else:
            writable = ~full
        m.d.comb += [
            ready.eq(writable),
            valid.eq(~empty),
            w.ready.eq(ready),
            r.valid.eq(valid),
            wp.addr.eq(w_ptr),
            wp.data.eq(data),
            wp.en.eq(put),
            rp.addr.eq(r_ptr),
            r.payload.eq(rp.data),
        ]
        m.d.sync += [w_ptr.eq(w_ptr + put), r_ptr.eq(r_ptr + take)]
        return m


class TokenCounter(wiring.Component):
    """A dependence-token queue: only the count matters, so a counter of up to `depth` tokens
    with no storage, its flags from flip-flops (`_flags`); the payload bit is unused.

    A token taken leaves the count the cycle after (`taken`, a flip-flop), so the consumer's
    decision to take one ends at a flip-flop, not in the count's muxes (the 92.9 MHz route's
    worst path ran from `empty` through the compute stage's issue decision into them); until
    then the count less that token decides `valid` (the last token no longer shows), and a
    full counter shows full a cycle longer."""

    def __init__(self, depth: int):
        if depth < 1:
            raise ValueError(f"a token queue holds at least one token, not {depth}")
        self.depth = depth
        super().__init__({"w_stream": In(token()), "r_stream": Out(token())})

    def elaborate(self, platform):
        m = Module()
        w, r = self.w_stream, self.r_stream
        ready, valid, taken = Signal(), Signal(), Signal()
        m.d.sync += taken.eq(r.ready & valid)
        full, empty, near_empty, _ = _flags(m, self.depth, w.valid & ready, taken)
        m.d.comb += [
            ready.eq(~full),
            valid.eq(~empty & ~(taken & near_empty)),
            w.ready.eq(ready),
            r.valid.eq(valid),
        ]
        return m
