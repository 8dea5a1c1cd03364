"""A unit's forwarding of its own recent accumulator writes: a read issued
`SRAM_READ_LATENCY` cycles ago cannot have seen them, so the row it returns is patched with
every write since (hw/rtl/units.py: the GEMM's accumulate, the ALU's operands)."""

from __future__ import annotations

from amaranth import Module, Signal

from tilecraft.hw.rtl.replicas import pick, replicated
from tilecraft.hw.rtl.signatures import SRAM_READ_LATENCY


class WriteHistory:
    """A unit's accumulator writes of this cycle and the last `SRAM_READ_LATENCY` ones: what a
    read issued that many cycles ago cannot have seen. `upcoming` is (en, addr) of the write the
    unit will make next cycle, so whether a row is hit is worked out a cycle ahead, into
    registers (a compare is never on the path from a write's data to the next operation)."""

    def __init__(
        self, m: Module, write, upcoming, copies: int = 1, dsp: str | None = None, ahead=None
    ):
        """`copies` of each hit flag, each picking its share of the row (replicas.py). `ahead`,
        if given, is (en, addr) of the write two cycles ahead, which `upcoming` takes a cycle
        later (registers, never holding): `hits_ahead` needs it."""
        self.m = m
        self.write = write
        self.upcoming = upcoming
        self.ahead = ahead
        self.copies, self.dsp = copies, dsp
        self.past = []  # (en, addr, data), most recent first
        prev = (write.en, write.addr, write.data)
        for k in range(SRAM_READ_LATENCY):
            held = tuple(  # the data is no use without its valid flag: no reset
                Signal.like(x, name=f"hist{k}_{f}", reset_less=f == "d")
                for x, f in zip(prev, "vad")
            )
            m.d.sync += [h.eq(x) for h, x in zip(held, prev)]
            self.past.append(held)
            prev = held

    def hits(self, next_addr, name: str, current=None) -> list:
        """Registered flags, for the row `next_addr` names now and a signal will name next
        cycle: [next cycle's write hits it, this cycle's does, the ones before]. `current`,
        if given, is this cycle's hit worked out a cycle earlier into a register (the copies
        then take a flip-flop, not a compare: the 85.9 MHz route's GEMM row_hit1 copies)."""
        en, addr = self.upcoming
        writes = [(en, addr), (self.write.en, self.write.addr)]
        writes += [(e, a) for e, a, _ in self.past[: SRAM_READ_LATENCY - 1]]
        flags = []
        for k, (e, a) in enumerate(writes):
            hit = Signal(name=f"{name}_hit{k}_next")
            if k == 1 and current is not None:
                self.m.d.comb += hit.eq(current)
            else:
                self.m.d.comb += hit.eq(e & (a == next_addr))
            flags.append(replicated(self.m, hit, self.copies, f"{name}_hit{k}", self.dsp))
        return flags

    def hits_ahead(self, addr_before, name: str) -> list:
        """`hits`' flags for a row named by `addr_before` a cycle before `hits`' `next_addr`
        (a delay line that never holds): each compare made a cycle earlier, against the writes
        as they will be a cycle later (`ahead`, `upcoming`, this cycle's, the ones before), into
        one flip-flop that the copies take a cycle later. The compare then drives one
        flip-flop, not a copy per share: the ALU's read-hit flags, the 99.0 MHz seed-2 route's
        worst path (its tag through the compare into the copies, 10.10 ns)."""
        assert self.ahead is not None, "hits_ahead needs the write two cycles ahead"
        writes = [self.ahead, self.upcoming, (self.write.en, self.write.addr)]
        writes += [(e, a) for e, a, _ in self.past[: SRAM_READ_LATENCY - 2]]
        flags = []
        for k, (e, a) in enumerate(writes):
            early = Signal(name=f"{name}_hit{k}_early")
            self.m.d.sync += early.eq(e & (a == addr_before))
            flags.append(replicated(self.m, early, self.copies, f"{name}_hit{k}", self.dsp))
        return flags

    def upcoming_hit(self, next_addr, enable=1):
        """Whether next cycle's write goes to the row `next_addr` names (combinational: the
        input of `hits`' first flag)."""
        en, addr = self.upcoming
        return enable & en & (addr == next_addr)

    def latest(self, flags: list, read):
        """The row as read `SRAM_READ_LATENCY` cycles ago (`read`) plus every write since, this
        cycle's included (`flags` from `hits` a cycle ago)."""
        datas = [self.write.data] + [d for _, _, d in self.past]
        value = read
        for k, (copies, written) in reversed(list(enumerate(zip(flags, datas)))):
            # each pick into a wire of its own: slicing the pick before it (a Cat of Muxes)
            # copies that whole expression into every share, and the Verilog grows with the
            # lanes squared (9 MB for 1x8x8, minutes and gigabytes for the default config)
            picked = Signal.like(read, name=f"fwd{k}")
            self.m.d.comb += picked.eq(pick(copies, written, value))
            value = picked
        return value
