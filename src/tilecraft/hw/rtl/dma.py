"""DMA building blocks over the AXI4 master.

- `BurstPlanner`: a 2-D transfer -> AXI bursts (at most `burst_len` beats, never across a 4 KiB
  boundary, one row never sharing a burst with another).
- `ReadClient`: a unit hands it a transfer; it issues the bursts on its `ReadPort` and queues
  the returned beats for the unit.
- `ReadArbiter`: gives the one AR channel to one client at a time, for all the bursts of its
  transfer (so a transfer's data is contiguous on the bus, as the cycle model assumes), and
  routes R beats back in issue order.
- `ElementStream`: beats -> scratchpad elements (several beats per element, or several elements
  per beat with a per-row starting offset).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import isa_for
from tilecraft.hw.rtl.signatures import ADDR_BITS, LEN_BITS, ReadPort, Transfer

OUTSTANDING = 32  # read bursts in flight on the AXI port
BEATS_BITS = LEN_BITS + 1  # 1..256 beats


def log2_exact(n: int) -> int:
    assert n & (n - 1) == 0, n
    return n.bit_length() - 1


def rows_bits(cfg: HwConfig) -> int:
    """Width of a transfer's row count: the ISA's y_size field."""
    return isa_for(cfg).field("y_size").width


class BurstPlanner(wiring.Component):
    """Splits a transfer into bursts, presented one at a time on `bursts`. Rows that follow each
    other in memory (stride = row length) are one run of `span` bytes (no multiplier here)."""

    def __init__(self, cfg: HwConfig):
        self.ab = cfg.axi_bytes
        self.burst_len = cfg.burst_len
        super().__init__(
            {
                "transfer": In(Transfer(rows_bits(cfg))),
                "bursts": Out(stream.Signature(_planned())),
                "busy": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        t, out = self.transfer, self.bursts
        sh = log2_exact(self.ab)
        row_addr = Signal(ADDR_BITS)
        rows_left = Signal.like(t.rows)
        cur = Signal(ADDR_BITS - sh)  # current beat address
        end = Signal(ADDR_BITS - sh)  # one past the row's last beat
        stride, row_bytes = Signal(32), Signal(32)
        loading = Signal()  # compute cur/end for row_addr this cycle
        to_4k = (1 << (12 - sh)) - cur[: 12 - sh]
        left = end - cur
        capped = Mux(left > self.burst_len, self.burst_len, left)
        beats = Signal(BEATS_BITS)
        m.d.comb += beats.eq(Mux(to_4k < capped, to_4k, capped))
        m.d.comb += [
            out.payload.addr.eq(cur << sh),
            out.payload.beats.eq(beats),
            out.valid.eq(self.busy & ~loading),
            out.payload.last.eq((rows_left == 1) & (beats == left)),
        ]
        contiguous = t.stride == t.row_bytes  # rows back to back: one run
        with m.If(t.start):
            m.d.sync += [
                row_addr.eq(t.addr),
                rows_left.eq(Mux(contiguous, 1, t.rows)),
                stride.eq(t.stride),
                row_bytes.eq(Mux(contiguous, t.span, t.row_bytes)),
                self.busy.eq((t.rows != 0) & (t.row_bytes != 0)),
                loading.eq(1),
            ]
        with m.Elif(loading):
            m.d.sync += [
                cur.eq(row_addr >> sh),
                end.eq((row_addr + row_bytes + self.ab - 1) >> sh),
                loading.eq(0),
            ]
        with m.Elif(out.valid & out.ready):
            with m.If(beats == left):
                m.d.sync += [rows_left.eq(rows_left - 1), row_addr.eq(row_addr + stride)]
                with m.If(rows_left == 1):
                    m.d.sync += self.busy.eq(0)
                with m.Else():
                    m.d.sync += loading.eq(1)
            with m.Else():
                m.d.sync += cur.eq(cur + beats)
        return m


def _planned():
    from amaranth.hdl import unsigned
    from amaranth.lib import data

    return data.StructLayout(
        {"addr": unsigned(ADDR_BITS), "beats": unsigned(BEATS_BITS), "last": unsigned(1)}
    )


class ReadClient(wiring.Component):
    """A unit's reads: a transfer in, its bursts out on `read`, the beats (in order) out on
    `beats`."""

    def __init__(self, cfg: HwConfig, fifo_beats: int = 32):
        self.cfg = cfg
        self.fifo_beats = fifo_beats
        super().__init__(
            {
                "transfer": In(Transfer(rows_bits(cfg))),
                "issuing": Out(1),
                "read": Out(ReadPort(cfg.axi_data_bits)),
                "beats": Out(stream.Signature(cfg.axi_data_bits)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.plan = plan = BurstPlanner(self.cfg)
        m.submodules.fifo = fifo = SyncFIFO(width=self.cfg.axi_data_bits, depth=self.fifo_beats)
        wiring.connect(m, wiring.flipped(self.transfer), plan.transfer)
        ar, burst = self.read.ar, plan.bursts
        m.d.comb += [
            self.issuing.eq(plan.busy),
            ar.valid.eq(burst.valid),
            ar.payload.addr.eq(burst.payload.addr),
            ar.payload.len.eq(burst.payload.beats - 1),
            ar.payload.last.eq(burst.payload.last),
            burst.ready.eq(ar.ready),
        ]
        wiring.connect(m, wiring.flipped(self.read.r), fifo.w_stream)
        wiring.connect(m, fifo.r_stream, wiring.flipped(self.beats))
        return m


class ReadArbiter(wiring.Component):
    """`clients` read ports onto one AXI AR/R pair (lower index wins a tie)."""

    def __init__(self, cfg: HwConfig, clients: int):
        self.n = clients
        w = cfg.axi_data_bits
        super().__init__(
            {
                "clients": In(ReadPort(w)).array(clients),
                "araddr": Out(ADDR_BITS),
                "arlen": Out(LEN_BITS),
                "arvalid": Out(1),
                "arready": In(1),
                "rdata": In(w),
                "rlast": In(1),
                "rvalid": In(1),
                "rready": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        idw = max(self.n - 1, 1).bit_length()
        m.submodules.route = route = SyncFIFO(width=idw, depth=OUTSTANDING)
        owner = Signal(idw)
        locked = Signal()
        chosen = Signal(idw)
        any_req = Signal()
        for k in reversed(range(self.n)):
            with m.If(self.clients[k].ar.valid):
                m.d.comb += [chosen.eq(k), any_req.eq(1)]
        who = Mux(locked, owner, chosen)
        ar_valid = Signal()
        ar_last = Signal()
        for k, client in enumerate(self.clients):
            with m.If(who == k):
                m.d.comb += [
                    self.araddr.eq(client.ar.payload.addr),
                    self.arlen.eq(client.ar.payload.len),
                    ar_valid.eq(client.ar.valid),
                    ar_last.eq(client.ar.payload.last),
                ]
        m.d.comb += self.arvalid.eq(ar_valid & route.w_rdy)
        fire = self.arvalid & self.arready
        for k, client in enumerate(self.clients):
            m.d.comb += client.ar.ready.eq(fire & (who == k))
        m.d.comb += [route.w_data.eq(who), route.w_en.eq(fire)]
        with m.If(fire):
            m.d.sync += [owner.eq(who), locked.eq(~ar_last)]
        # R: to the client at the head of the route FIFO
        head = route.r_data
        for k, client in enumerate(self.clients):
            sel = route.r_rdy & (head == k)
            m.d.comb += [client.r.valid.eq(self.rvalid & sel), client.r.payload.eq(self.rdata)]
            with m.If(sel):
                m.d.comb += self.rready.eq(client.r.ready)
        m.d.comb += route.r_en.eq(self.rvalid & self.rready & self.rlast)
        return m


class ElementStream(wiring.Component):
    """Beats of `beat_bits` -> elements of `elem_bits`. Wider elements gather consecutive beats
    (LSB first); narrower ones are cut from a beat, starting each row at `row_offset` (the row's
    first element's index within its beat) and dropping what follows its `row_elems`."""

    def __init__(self, beat_bits: int, elem_bits: int, row_bits: int = 16):
        self.beat_bits, self.elem_bits = beat_bits, elem_bits
        super().__init__(
            {
                "beats": In(stream.Signature(beat_bits)),
                "row_start": In(1),  # pulse before a row's first element is taken
                "row_offset": In(8),
                "row_elems": In(row_bits),
                "elems": Out(stream.Signature(elem_bits)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        beats, elems = self.beats, self.elems
        if self.elem_bits >= self.beat_bits:
            k = self.elem_bits // self.beat_bits
            parts = Signal(self.elem_bits)
            count = Signal(range(k + 1))
            full = count == k
            take = elems.valid & elems.ready
            m.d.comb += [
                elems.payload.eq(parts),
                elems.valid.eq(full),
                beats.ready.eq(~full | take),  # the next element starts as this one leaves
            ]
            with m.If(beats.valid & beats.ready):
                m.d.sync += [
                    parts.eq(
                        (parts >> self.beat_bits)
                        | (beats.payload << (self.elem_bits - self.beat_bits))
                    ),
                    count.eq(Mux(take, 1, count + 1)),
                ]
            with m.Elif(take):
                m.d.sync += count.eq(0)
            return m
        per = self.beat_bits // self.elem_bits
        sub = Signal(range(per))
        left = Signal.like(self.row_elems)
        with m.Switch(sub):
            for i in range(per):
                with m.Case(i):
                    m.d.comb += elems.payload.eq(
                        beats.payload[i * self.elem_bits : (i + 1) * self.elem_bits]
                    )
        m.d.comb += elems.valid.eq(beats.valid & (left != 0))
        take = elems.valid & elems.ready
        done_beat = take & ((sub == per - 1) | (left == 1))
        m.d.comb += beats.ready.eq(done_beat)
        with m.If(self.row_start):
            m.d.sync += [sub.eq(self.row_offset), left.eq(self.row_elems)]
        with m.Elif(take):
            m.d.sync += [left.eq(left - 1), sub.eq(Mux(done_beat, 0, sub + 1))]
        return m
