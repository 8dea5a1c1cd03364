"""DMA building blocks over the AXI4 master.

- `ReadClient`: a unit hands it a 2-D transfer (byte address of row 0, rows, bytes per row,
  stride); it issues the AXI read bursts (at most `burst_len` beats, never across a 4 KiB
  boundary, one row never shares a burst with another) and queues the returned beats.
- `ReadArbiter`: gives the one AR channel to one client at a time, for all the bursts of its
  transfer (so a transfer's data is contiguous on the bus, as the cycle model assumes), and
  routes R beats back in issue order.
- `ElementStream`: beats -> scratchpad elements (several beats per element, or several elements
  per beat with a per-row starting offset).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import HwConfig

OUTSTANDING = 32  # read bursts in flight on the AXI port
READ_OUT = ("ar_valid", "ar_addr", "ar_len", "ar_last", "r_ready")  # driven by a read client
READ_IN = ("ar_ready", "r_valid", "r_data")  # driven by the arbiter


def read_port_members(cfg: HwConfig) -> dict:
    """A unit's port onto the read arbiter (directions as seen by the unit)."""
    return {
        "ar_valid": Out(1), "ar_addr": Out(64), "ar_len": Out(8), "ar_last": Out(1),
        "ar_ready": In(1), "r_valid": In(1), "r_data": In(cfg.axi_data_bits), "r_ready": Out(1),
    }  # fmt: skip


def forward_read_port(m: Module, outer, inner) -> None:
    """Connect `outer`'s read port (a unit) to `inner`'s (the client or unit inside it)."""
    for name in READ_OUT:
        m.d.comb += getattr(outer, name).eq(getattr(inner, name))
    for name in READ_IN:
        m.d.comb += getattr(inner, name).eq(getattr(outer, name))


def log2_exact(n: int) -> int:
    assert n & (n - 1) == 0, n
    return n.bit_length() - 1


class BurstPlanner(wiring.Component):
    """Splits a 2-D transfer into bursts: one per `next` while `valid`. Rows that follow each
    other in memory (stride = row length) are one run of `span` bytes, the distance from `addr`
    to the end of the last row ((rows - 1) * stride + row_bytes, which the caller has already
    computed for its range check: no multiplier here)."""

    def __init__(self, cfg: HwConfig):
        self.ab = cfg.axi_bytes
        self.burst_len = cfg.burst_len
        super().__init__(
            {
                "start": In(1),
                "addr": In(64),
                "rows": In(16),
                "row_bytes": In(32),
                "stride": In(32),
                "span": In(32),
                "valid": Out(1),  # a burst is presented
                "burst_addr": Out(64),
                "burst_beats": Out(9),  # 1..burst_len
                "last": Out(1),  # the transfer's final burst
                "next": In(1),  # take the presented burst
                "busy": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        sh = log2_exact(self.ab)
        row_addr = Signal(64)
        rows_left = Signal(16)
        cur = Signal(64 - sh)  # current beat address
        end = Signal(64 - sh)  # one past the row's last beat
        stride, row_bytes = Signal(32), Signal(32)
        loading = Signal()  # compute cur/end for row_addr this cycle
        to_4k = (1 << (12 - sh)) - cur[: 12 - sh]
        left = end - cur
        capped = Mux(left > self.burst_len, self.burst_len, left)
        beats = Signal(9)
        m.d.comb += beats.eq(Mux(to_4k < capped, to_4k, capped))
        m.d.comb += [
            self.burst_addr.eq(cur << sh),
            self.burst_beats.eq(beats),
            self.valid.eq(self.busy & ~loading),
            self.last.eq((rows_left == 1) & (beats == left)),
        ]
        contiguous = self.stride == self.row_bytes  # rows back to back: one run
        with m.If(self.start):
            m.d.sync += [
                row_addr.eq(self.addr),
                rows_left.eq(Mux(contiguous, 1, self.rows)),
                stride.eq(self.stride),
                row_bytes.eq(Mux(contiguous, self.span, self.row_bytes)),
                self.busy.eq((self.rows != 0) & (self.row_bytes != 0)),
                loading.eq(1),
            ]
        with m.Elif(loading):
            m.d.sync += [
                cur.eq(row_addr >> sh),
                end.eq((row_addr + row_bytes + self.ab - 1) >> sh),
                loading.eq(0),
            ]
        with m.Elif(self.valid & self.next):
            with m.If(beats == left):
                m.d.sync += [rows_left.eq(rows_left - 1), row_addr.eq(row_addr + stride)]
                with m.If(rows_left == 1):
                    m.d.sync += self.busy.eq(0)
                with m.Else():
                    m.d.sync += loading.eq(1)
            with m.Else():
                m.d.sync += cur.eq(cur + beats)
        return m


class ReadClient(wiring.Component):
    """A unit's port onto the read arbiter: 2-D transfer in, beats out (in order)."""

    def __init__(self, cfg: HwConfig, fifo_beats: int = 32):
        self.cfg = cfg
        self.fifo_beats = fifo_beats
        w = cfg.axi_data_bits
        super().__init__(
            {
                "start": In(1),
                "addr": In(64),
                "rows": In(16),
                "row_bytes": In(32),
                "stride": In(32),
                "span": In(32),  # (rows - 1) * stride + row_bytes
                "issuing": Out(1),
                # to the arbiter
                "ar_valid": Out(1),
                "ar_addr": Out(64),
                "ar_len": Out(8),
                "ar_last": Out(1),
                "ar_ready": In(1),
                "r_valid": In(1),
                "r_data": In(w),
                "r_ready": Out(1),
                # to the unit
                "beat_valid": Out(1),
                "beat": Out(w),
                "beat_ready": In(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        m.submodules.plan = plan = BurstPlanner(self.cfg)
        m.submodules.fifo = fifo = SyncFIFO(width=self.cfg.axi_data_bits, depth=self.fifo_beats)
        m.d.comb += [
            plan.start.eq(self.start),
            plan.addr.eq(self.addr),
            plan.rows.eq(self.rows),
            plan.row_bytes.eq(self.row_bytes),
            plan.stride.eq(self.stride),
            plan.span.eq(self.span),
            self.issuing.eq(plan.busy),
            self.ar_valid.eq(plan.valid),
            self.ar_addr.eq(plan.burst_addr),
            self.ar_len.eq(plan.burst_beats - 1),
            self.ar_last.eq(plan.last),
            plan.next.eq(self.ar_ready),
            fifo.w_data.eq(self.r_data),
            fifo.w_en.eq(self.r_valid),
            self.r_ready.eq(fifo.w_rdy),
            self.beat.eq(fifo.r_data),
            self.beat_valid.eq(fifo.r_rdy),
            fifo.r_en.eq(self.beat_ready),
        ]
        return m


class ReadArbiter(wiring.Component):
    """`clients` ReadClients onto one AXI AR/R pair (lower index wins a tie)."""

    def __init__(self, cfg: HwConfig, clients: int):
        self.n = clients
        w = cfg.axi_data_bits
        members = {
            "araddr": Out(64),
            "arlen": Out(8),
            "arvalid": Out(1),
            "arready": In(1),
            "rdata": In(w),
            "rlast": In(1),
            "rvalid": In(1),
            "rready": Out(1),
        }
        for k in range(clients):
            members.update(
                {
                    f"c{k}_ar_valid": In(1),
                    f"c{k}_ar_addr": In(64),
                    f"c{k}_ar_len": In(8),
                    f"c{k}_ar_last": In(1),
                    f"c{k}_ar_ready": Out(1),
                    f"c{k}_r_valid": Out(1),
                    f"c{k}_r_data": Out(w),
                    f"c{k}_r_ready": In(1),
                }
            )
        super().__init__(members)

    def client(self, k: int, name: str):
        return getattr(self, f"c{k}_{name}")

    def elaborate(self, platform):
        m = Module()
        idw = max(self.n - 1, 1).bit_length()
        m.submodules.route = route = SyncFIFO(width=idw, depth=OUTSTANDING)
        owner = Signal(idw)
        locked = Signal()
        chosen = Signal(idw)
        any_req = Signal()
        for k in reversed(range(self.n)):
            with m.If(self.client(k, "ar_valid")):
                m.d.comb += [chosen.eq(k), any_req.eq(1)]
        who = Mux(locked, owner, chosen)
        ar_valid = Signal()
        ar_last = Signal()
        for k in range(self.n):
            with m.If(who == k):
                m.d.comb += [
                    self.araddr.eq(self.client(k, "ar_addr")),
                    self.arlen.eq(self.client(k, "ar_len")),
                    ar_valid.eq(self.client(k, "ar_valid")),
                    ar_last.eq(self.client(k, "ar_last")),
                ]
        m.d.comb += self.arvalid.eq(ar_valid & route.w_rdy)
        fire = self.arvalid & self.arready
        for k in range(self.n):
            m.d.comb += self.client(k, "ar_ready").eq(fire & (who == k))
        m.d.comb += [route.w_data.eq(who), route.w_en.eq(fire)]
        with m.If(fire):
            m.d.sync += [owner.eq(who), locked.eq(~ar_last)]
        # R: to the client at the head of the route FIFO
        head = route.r_data
        for k in range(self.n):
            sel = route.r_rdy & (head == k)
            m.d.comb += [
                self.client(k, "r_valid").eq(self.rvalid & sel),
                self.client(k, "r_data").eq(self.rdata),
            ]
            with m.If(sel):
                m.d.comb += self.rready.eq(self.client(k, "r_ready"))
        m.d.comb += route.r_en.eq(self.rvalid & self.rready & self.rlast)
        return m


class ElementStream(wiring.Component):
    """Beats of `beat_bits` -> elements of `elem_bits`. Wider elements gather consecutive beats
    (LSB first); narrower ones are cut from a beat, starting each row at `row_offset` (the row's
    first element's index within its beat) and dropping what follows its `row_elems`."""

    def __init__(self, beat_bits: int, elem_bits: int):
        self.beat_bits, self.elem_bits = beat_bits, elem_bits
        super().__init__(
            {
                "beat_valid": In(1),
                "beat": In(beat_bits),
                "beat_ready": Out(1),
                "row_start": In(1),  # pulse before a row's first element is taken
                "row_offset": In(8),
                "row_elems": In(16),
                "elem_valid": Out(1),
                "elem": Out(elem_bits),
                "elem_ready": In(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        if self.elem_bits >= self.beat_bits:
            k = self.elem_bits // self.beat_bits
            parts = Signal(self.elem_bits)
            count = Signal(range(k + 1))
            full = count == k
            take = self.elem_valid & self.elem_ready
            m.d.comb += [
                self.elem.eq(parts),
                self.elem_valid.eq(full),
                self.beat_ready.eq(~full | take),  # the next element starts as this one leaves
            ]
            with m.If(self.beat_valid & self.beat_ready):
                m.d.sync += [
                    parts.eq(
                        (parts >> self.beat_bits) | (self.beat << (self.elem_bits - self.beat_bits))
                    ),
                    count.eq(Mux(take, 1, count + 1)),
                ]
            with m.Elif(take):
                m.d.sync += count.eq(0)
            return m
        per = self.beat_bits // self.elem_bits
        sub = Signal(range(per))
        left = Signal(16)
        cases = {i: self.beat[i * self.elem_bits : (i + 1) * self.elem_bits] for i in range(per)}
        with m.Switch(sub):
            for i, value in cases.items():
                with m.Case(i):
                    m.d.comb += self.elem.eq(value)
        m.d.comb += self.elem_valid.eq(self.beat_valid & (left != 0))
        take = self.elem_valid & self.elem_ready
        done_beat = take & ((sub == per - 1) | (left == 1))
        m.d.comb += self.beat_ready.eq(done_beat)
        with m.If(self.row_start):
            m.d.sync += [sub.eq(self.row_offset), left.eq(self.row_elems)]
        with m.Elif(take):
            m.d.sync += [left.eq(left - 1), sub.eq(Mux(done_beat, 0, sub + 1))]
        return m
