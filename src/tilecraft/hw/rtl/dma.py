"""DMA building blocks over the AXI4 master.

- `BurstPlanner`: a 2-D transfer -> AXI bursts (at most `burst_len` beats, never across a 4 KiB
  boundary, one row never sharing a burst with another).
- `ReadClient`: a unit hands it a transfer; it issues the bursts on its `ReadPort` and queues
  the returned beats for the unit.
- `ReadArbiter`: gives the one AR channel to one client at a time, for all the bursts of its
  transfer (so a transfer's data is contiguous on the bus, as the cycle model assumes), and
  routes R beats back in issue order. AR leaves through a `SkidBuffer` (as the store's AW does).
- `ElementStream`: beats -> scratchpad elements (several beats per element, or several elements
  per beat with a per-row starting offset).
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import isa_for
from tilecraft.hw.rtl.queues import FlaggedFIFO
from tilecraft.hw.rtl.signatures import ADDR_BITS, LEN_BITS, ReadPort, Transfer

OUTSTANDING = 32  # read bursts in flight on the AXI port
SKID = 2  # bursts a SkidBuffer holds: granted, not yet on the port (the arbiter tracks them too)
BEATS_BITS = LEN_BITS + 1  # 1..256 beats


def log2_exact(n: int) -> int:
    assert n & (n - 1) == 0, n
    return n.bit_length() - 1


def rows_bits(cfg: HwConfig) -> int:
    """Width of a transfer's row count: the ISA's y_size field."""
    return isa_for(cfg).field("y_size").width


class BurstPlanner(wiring.Component):
    """Splits a transfer into bursts, presented one at a time on `bursts`. Rows that follow each
    other in memory (stride = row length) are one run of `span` bytes (no multiplier here).

    Pipelined for the clock, one burst per cycle: the transfer is registered as it arrives, then
    latched; each row's first beat, beats and beats to the next 4 KiB boundary are worked out
    from its address a cycle ahead, with its first burst's cut (`head_*`, `tail_*`); the row
    being cut keeps them as running counts, so a burst's length is two compares and a mux, and
    the next row takes over in the cycle the last burst leaves. A transfer's first burst comes
    4 cycles after its start."""

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
        ab, sh = self.ab, log2_exact(self.ab)
        page = 1 << (12 - sh)  # beats in 4 KiB
        beat_bits = ADDR_BITS - sh
        # the transfer as it arrives, registered (its client decided on it this cycle)
        given = {
            f: Signal.like(getattr(t, f), name=f"given_{f}")
            for f in ("start", "addr", "rows", "row_bytes", "stride", "span")
        }
        m.d.sync += [given[f].eq(getattr(t, f)) for f in given]
        # the transfer: the next row's address and how many rows are still to come
        addr = Signal(ADDR_BITS)
        rows = Signal.like(t.rows)
        stride = Signal(32)
        left_bits = 32 - sh + 1  # a row's beats: at most 2**32 bytes, one more for alignment
        # a row's beats are ceil((addr % ab + row_bytes) / ab): the row's beats from an aligned
        # start (`row_beats`), one more where the start's offset carries past the beat
        # (row_bytes' remainder + the offset >= ab); both counts and their compares with the
        # burst length are registers set as the transfer starts, so a new row's cut is a
        # 3-bit sum and compares with its to-4-KiB count (the 92.4 MHz route's worst path was
        # the new row's `(offset + row_bytes + ab - 1) >> sh` and its compares)
        row_beats = [Signal(left_bits, name=f"row_beats{k}") for k in range(2)]
        row_fits = [Signal(name=f"row_fits{k}") for k in range(2)]  # row_beats[k] <= burst_len
        row_rem = Signal(sh)  # (row_bytes + ab - 1) % ab
        # row_beats[k] >= a page's beats + 1: a row that long never ends within its first
        # page, so the new row's compares need only row_beats' low bits (short carry chains)
        row_long = [Signal(name=f"row_long{k}") for k in range(2)]
        g = given
        contiguous = g["stride"] == g["row_bytes"]  # rows back to back: one run

        def run(f):
            """f of the run's bytes (span where contiguous, else row_bytes), worked out for
            both side by side and picked after (the 92.2 MHz route's planner path was the
            equality compare's pick into the compares)"""
            return Mux(contiguous, f(g["span"]), f(g["row_bytes"]))

        # each count one adder from the run's bytes, each compare against a constant (no
        # adder before it: the first try, its compares after two adders, was a 12.7 ns path)
        rounded = Signal(33)  # the run's bytes + ab - 1
        m.d.comb += rounded.eq(run(lambda b: b + ab - 1))
        # the next row's address, and the current one's beats to its 4 KiB boundary and its
        # offset's carry, kept in registers as `addr` moves: a new row's cut is compares of
        # registers (the 85.9 MHz route's worst planner path ran `page - addr` and the carry's
        # sum into them, 10.7 ns)
        addr_next = Signal(ADDR_BITS)
        addr_to_4k, addr_carry = Signal(13 - sh), Signal()
        with m.If(g["start"]):
            m.d.sync += [
                addr_next.eq(g["addr"] + g["stride"]),
                addr_to_4k.eq(page - g["addr"][sh:12]),
                addr_carry.eq((rounded[:sh] + g["addr"][:sh]) >> sh),
            ]
        # whether rows are left to make, and whether just one: flip-flops kept with `rows`, so
        # the row queue's push (`make`) and a new row's `last` are no compare of the count (the
        # 100.2 MHz route's worst path ran `rows` through `== 1` and `!= 0` into the head's
        # enables, 10.0 ns)
        rows_left, rows_one = Signal(), Signal()
        empty = (g["rows"] == 0) | (g["row_bytes"] == 0)
        with m.If(g["start"]):
            m.d.sync += [
                addr.eq(g["addr"]),
                rows.eq(Mux(empty, 0, Mux(contiguous, 1, g["rows"]))),
                rows_left.eq(~empty),
                rows_one.eq(~empty & (contiguous | (g["rows"] == 1))),
                stride.eq(g["stride"]),
                row_beats[0].eq(rounded >> sh),
                row_beats[1].eq(run(lambda b: (b + 2 * ab - 1) >> sh)),
                # (run bytes + ab - 1) >> sh <= bl, and that + 1 <= bl, without the sums
                row_fits[0].eq(run(lambda b: b <= self.burst_len * ab)),
                row_fits[1].eq(run(lambda b: b <= (self.burst_len - 1) * ab)),
                row_rem.eq(rounded[:sh]),
                # (b + ab - 1) >> sh > page, and (b + 2ab - 1) >> sh > page
                row_long[0].eq(run(lambda b: b > page * ab)),
                row_long[1].eq(run(lambda b: b > (page - 1) * ab)),
            ]

        # rows, worked out ahead of their cutting into a queue of two: its count is a register,
        # so making the next row never waits on this cycle's burst handshake
        def row_record(name):
            return {
                "cur": Signal(beat_bits, name=f"{name}_cur"),
                "left": Signal(left_bits, name=f"{name}_left"),
                "to_4k": Signal(13 - sh, name=f"{name}_to_4k"),
                "last": Signal(name=f"{name}_last"),
                # its first burst's cut, worked out as the row is made (so taking a row copies
                # registers: no compare is shared between a new row and the one being cut,
                # with the burst handshake selecting its operands)
                "beats": Signal(BEATS_BITS, name=f"{name}_beats"),
                "ends_row": Signal(name=f"{name}_ends_row"),
                "ends_page": Signal(name=f"{name}_ends_page"),
            }

        def cut(n_left, n_to_4k, fits, long):
            """(beats, row ends, page ends) of a new row's first burst, with `n_left` beats in
            the row, `fits` = n_left <= burst_len and `long` = n_left > page (>= n_to_4k): the
            compares with n_to_4k (at most a page) take n_left's low bits alone (the 93.3 MHz
            route's planner paths ran the whole 30-bit count through them)."""
            low = n_left[: 14 - sh]  # up to 2 * page: holds any n_left that is not long
            ends_row = fits & ~long & (low <= n_to_4k)
            ends_page = (long | (n_to_4k <= low)) & (n_to_4k <= self.burst_len)
            n = Mux(ends_row, low, Mux(n_to_4k < self.burst_len, n_to_4k, self.burst_len))
            return n, ends_row, ends_page

        bl = self.burst_len

        def cut_after(n_left, n_to_4k, to_4k_bl, to_4k_page, page_ended):
            """cut(n_left - beats, next to_4k) of a burst that did not end its row: one that
            ended a page (beats = n_to_4k, the next page whole) or a full one (beats = bl).
            `to_4k_bl` and `to_4k_page` are registers holding n_to_4k + bl and + page."""
            if page_ended:
                ends_row = (n_left <= to_4k_bl) & (n_left <= to_4k_page)
                ends_page = (n_left >= to_4k_page) if page <= bl else Const(0)
                n = Mux(ends_row, n_left - n_to_4k, min(page, bl))
            else:
                ends_row = (n_left <= 2 * bl) & (n_left <= n_to_4k)
                ends_page = (n_to_4k <= n_left) & (n_to_4k <= 2 * bl)
                n = Mux(ends_row, n_left - bl, Mux(n_to_4k < 2 * bl, n_to_4k - bl, bl))
            return n, ends_row, ends_page

        head, tail = row_record("head"), row_record("tail")
        queued = Signal(range(3))
        new_left, new_to_4k = Signal(left_bits), Signal(13 - sh)
        carry = Signal()  # the row's offset in its first beat adds a beat
        m.d.comb += [
            carry.eq(addr_carry),
            new_left.eq(Mux(carry, row_beats[1], row_beats[0])),
            new_to_4k.eq(addr_to_4k),
        ]
        new = {"cur": addr >> sh, "left": new_left, "to_4k": new_to_4k, "last": rows_one}
        new_fits = Mux(carry, row_fits[1], row_fits[0])
        new_long = Mux(carry, row_long[1], row_long[0])
        new_cut = cut(new_left, new_to_4k, new_fits, new_long)
        new.update(zip(("beats", "ends_row", "ends_page"), new_cut))
        make = rows_left & (queued != 2) & ~g["start"]
        with m.If(make):
            m.d.sync += [
                addr.eq(addr_next),
                addr_next.eq(addr_next + stride),
                addr_to_4k.eq(page - addr_next[sh:12]),
                addr_carry.eq((row_rem + addr_next[:sh]) >> sh),
                rows.eq(rows - 1),
                rows_left.eq(~rows_one),
                rows_one.eq(rows == 2),
            ]
        # the row being cut into bursts; the next burst's length and whether it ends its row or a
        # 4 KiB page are worked out as its counts change, into registers
        cut_valid, cut_last = Signal(), Signal()
        cur, left = Signal(beat_bits), Signal(left_bits)
        to_4k = Signal(13 - sh)
        # to_4k + burst_len and to_4k + page, kept with to_4k (for cut_after)
        to_4k_bl, to_4k_page = Signal(15 - sh), Signal(15 - sh)
        beats = Signal(BEATS_BITS)
        row_ends, page_ends = Signal(), Signal()
        counts = (beats, row_ends, page_ends)

        m.d.comb += [
            out.payload.addr.eq(cur << sh),
            out.payload.beats.eq(beats),
            out.payload.last.eq(cut_last & row_ends),
            out.valid.eq(cut_valid),
        ]
        sent = out.valid & out.ready
        take = (queued != 0) & (~cut_valid | (sent & row_ends))
        with m.If(take):
            m.d.sync += [
                cut_valid.eq(1),
                cut_last.eq(head["last"]),
                cur.eq(head["cur"]),
                left.eq(head["left"]),
                to_4k.eq(head["to_4k"]),
                to_4k_bl.eq(head["to_4k"] + bl),
                to_4k_page.eq(head["to_4k"] + page),
                beats.eq(head["beats"]),
                row_ends.eq(head["ends_row"]),
                page_ends.eq(head["ends_page"]),
            ]
        with m.Elif(sent):
            with m.If(row_ends):
                m.d.sync += cut_valid.eq(0)
            m.d.sync += [
                cur.eq(cur + beats),
                left.eq(left - beats),
                to_4k.eq(Mux(page_ends, page, to_4k - beats)),
                to_4k_bl.eq(Mux(page_ends, page + bl, to_4k)),
                to_4k_page.eq(Mux(page_ends, 2 * page, to_4k - bl + page)),
            ]
            # the next burst's cut, from this burst's registers alone: a burst that leaves its
            # row unfinished either ended a page (then it was to_4k beats) or was full
            # (burst_len beats), so cut(left - beats, to_4k') is one of two sets of compares
            # of today's counts, side by side, and no subtraction feeds a compare
            after_page = cut_after(left, to_4k, to_4k_bl, to_4k_page, True)
            after_full = cut_after(left, to_4k, to_4k_bl, to_4k_page, False)
            m.d.sync += [
                reg.eq(Mux(page_ends, p, f)) for reg, p, f in zip(counts, after_page, after_full)
            ]
        # the queue of rows: `take` pops its head, `make` pushes behind it
        with m.If(take):
            m.d.sync += [head[f].eq(Mux(queued == 2, tail[f], new[f])) for f in head]
            with m.If(~make):
                m.d.sync += queued.eq(queued - 1)
        with m.Elif(make):
            with m.If(queued == 0):
                m.d.sync += [head[f].eq(new[f]) for f in head]
            with m.Else():
                m.d.sync += [tail[f].eq(new[f]) for f in tail]
            m.d.sync += queued.eq(queued + 1)
        with m.If(take & make & (queued == 2)):
            m.d.sync += [tail[f].eq(new[f]) for f in tail]
        m.d.comb += self.busy.eq(g["start"] | rows_left | (queued != 0) | cut_valid)
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
        m.submodules.fifo = fifo = FlaggedFIFO(self.cfg.axi_data_bits, self.fifo_beats)
        wiring.connect(m, wiring.flipped(self.transfer), plan.transfer)
        # the planner's bursts reach AR through a ReadyBuffer: the arbiter's grant never
        # reaches back into the planner's next-burst logic in the same cycle
        m.submodules.head = head = ReadyBuffer(_planned())
        wiring.connect(m, plan.bursts, head.i)
        ar, burst = self.read.ar, head.o.payload
        m.d.comb += [
            self.issuing.eq(plan.busy | head.o.valid),
            ar.valid.eq(head.o.valid),
            ar.payload.addr.eq(burst.addr),
            ar.payload.len.eq(burst.beats - 1),
            ar.payload.last.eq(burst.last),
            head.o.ready.eq(ar.ready),
        ]
        wiring.connect(m, wiring.flipped(self.read.r), fifo.w_stream)
        # the beats leave through a ReadyBuffer: the consumer's ready (a stage's element
        # stream, picked by the instruction's memory) never reaches the FIFO's level
        m.submodules.out = out = ReadyBuffer(self.cfg.axi_data_bits)
        wiring.connect(m, fifo.r_stream, out.i)
        wiring.connect(m, out.o, wiring.flipped(self.beats))
        return m


class SkidBuffer(wiring.Component):
    """A register slice with both directions registered: `o` comes from a register, and `i.ready`
    is one too (a second register catches what arrives while `o` is stalled). One cycle of
    latency, one transfer per cycle; a channel's handshake never crosses it combinationally."""

    def __init__(self, width: int):
        super().__init__({"i": In(stream.Signature(width)), "o": Out(stream.Signature(width))})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        # the payloads are data (the valid flags say when they mean something): no reset
        spare, spare_valid = Signal.like(i.payload, reset_less=True), Signal()
        payload = Signal.like(i.payload, reset_less=True)
        m.d.comb += [i.ready.eq(~spare_valid), o.payload.eq(payload)]
        with m.If(o.ready | ~o.valid):
            with m.If(spare_valid):
                m.d.sync += [payload.eq(spare), o.valid.eq(1), spare_valid.eq(0)]
            with m.Else():
                m.d.sync += [payload.eq(i.payload), o.valid.eq(i.valid)]
        with m.Elif(i.valid & ~spare_valid):
            m.d.sync += spare_valid.eq(1)
        with m.If(~spare_valid):  # an empty spare follows `i` (see ReadyBuffer)
            m.d.sync += spare.eq(i.payload)
        return m


class ReadyBuffer(wiring.Component):
    """A register on a channel's ready path only: `o` is `i` with no latency while it flows, and
    a spare register catches what `i` offered in a cycle `o` was stalled, so `i.ready` is a
    register and never waits on `o.ready` (the data path keeps its timing; the consumer's
    handshake stops here)."""

    def __init__(self, shape):
        super().__init__({"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        spare, spare_valid = Signal.like(i.payload, reset_less=True), Signal()  # data: no reset
        m.d.comb += [
            i.ready.eq(~spare_valid),
            o.valid.eq(spare_valid | i.valid),
            o.payload.eq(Mux(spare_valid, spare, i.payload)),
        ]
        with m.If(spare_valid & o.ready):
            m.d.sync += spare_valid.eq(0)
        with m.Elif(~spare_valid & i.valid & ~o.ready):
            m.d.sync += spare_valid.eq(1)
        # an empty spare follows `i` every cycle, so its enable is one flip-flop (~spare_valid)
        # and the consumer's ready reaches only spare_valid, not every bit of the payload
        with m.If(~spare_valid):
            m.d.sync += spare.eq(i.payload)
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
        # which client each burst in flight is for, in issue order; its head comes from a
        # register (not a LUT RAM's read), so R's routing into a client's FIFO starts from
        # flip-flops: a burst's data follows its address by the DRAM latency, never sooner
        # (a FlaggedFIFO, its ready a flip-flop and its level no carry chain after AR's grant,
        # then a SkidBuffer: OUTSTANDING + SKID entries in all, as the SyncFIFOBuffered before)
        # (staged: the grant's fire reaches one flip-flop, not the FIFO's flags and storage:
        # the 81.8 MHz route's worst path, 12.2 ns from the compute loader's planner)
        m.submodules.route_fifo = route_fifo = FlaggedFIFO(idw, OUTSTANDING, staged=True)
        m.submodules.route = route = SkidBuffer(idw)
        wiring.connect(m, route_fifo.r_stream, route.i)
        # the granted burst goes out through a skid buffer: AR comes from registers, and the
        # clients' handshake does not wait on the AXI slave's ready
        m.submodules.ar = ar = SkidBuffer(ADDR_BITS + LEN_BITS)
        m.d.comb += [
            self.araddr.eq(ar.o.payload[:ADDR_BITS]),
            self.arlen.eq(ar.o.payload[ADDR_BITS:]),
            self.arvalid.eq(ar.o.valid),
            ar.o.ready.eq(self.arready),
        ]
        # The grant is registered: a cycle picks the client (the lowest presenting a burst),
        # the next lets its bursts through, so a client's ready comes from flip-flops (the
        # grant, the AR skid's and the route FIFO's readies) and no client's valid reaches
        # another's ready (the 81.1 MHz route ran the compute loader's planner through the
        # pick into every client's ReadyBuffer, 12.1 ns). A transfer keeps the grant from its
        # first burst's acceptance to its last one's; the pick after it takes a cycle
        # (Timing.read_grant).
        owner = Signal(idw)
        granted = [Signal(name=f"granted_{k}") for k in range(self.n)]  # (owner == k), held
        mid = Signal()  # the owner's transfer is between its first and last burst
        chosen = Signal(idw)
        for k in reversed(range(self.n)):
            with m.If(self.clients[k].ar.valid):
                m.d.comb += chosen.eq(k)
        ar_valid = Signal()
        ar_last = Signal()
        for k, client in enumerate(self.clients):
            with m.If(owner == k):
                m.d.comb += [
                    ar.i.payload.eq(Cat(client.ar.payload.addr, client.ar.payload.len)),
                    ar_last.eq(client.ar.payload.last),
                ]
        offers = (g & c.ar.valid for g, c in zip(granted, self.clients, strict=True))
        m.d.comb += ar_valid.eq(Cat(*offers).any())
        room = Signal()
        m.d.comb += [
            room.eq(ar.i.ready & route_fifo.w_stream.ready),
            ar.i.valid.eq(ar_valid & route_fifo.w_stream.ready),
        ]
        fire = ar.i.valid & ar.i.ready
        for k, client in enumerate(self.clients):
            m.d.comb += client.ar.ready.eq(granted[k] & room)
        m.d.comb += [route_fifo.w_stream.payload.eq(owner), route_fifo.w_stream.valid.eq(fire)]
        with m.If(fire):
            with m.If(ar_last):  # the transfer's last burst: pick again next cycle
                m.d.sync += [mid.eq(0)] + [g.eq(0) for g in granted]
            with m.Else():
                m.d.sync += mid.eq(1)
        with m.Elif(~mid):  # between transfers: (re)pick among those presenting a burst
            m.d.sync += owner.eq(chosen)
            for k, g in enumerate(granted):
                lower = Cat(Const(0, 1), *(c.ar.valid for c in self.clients[:k]))
                m.d.sync += g.eq(self.clients[k].ar.valid & ~lower.any())
        # R: to the client at the head of the route FIFO
        head = route.o.payload
        for k, client in enumerate(self.clients):
            sel = route.o.valid & (head == k)
            m.d.comb += [client.r.valid.eq(self.rvalid & sel), client.r.payload.eq(self.rdata)]
            with m.If(sel):
                m.d.comb += self.rready.eq(client.r.ready)
        m.d.comb += route.o.ready.eq(self.rvalid & self.rready & self.rlast)
        return m


class ElementStream(wiring.Component):
    """Beats of `beat_bits` -> elements of `elem_bits`. Wider elements gather consecutive beats
    (LSB first); narrower ones are cut from a beat, starting each row at `row_offset` (the row's
    first element's index within its beat) and dropping what follows its `row_elems`.

    `decode` (wide elements only): a function of an element whose `tag_bits`-bit result rides
    above it in `elems.payload`, worked out as the element's last beat arrives and registered
    with it, so a consumer's decision on the element starts from flip-flops."""

    def __init__(
        self, beat_bits: int, elem_bits: int, row_bits: int = 16, decode=None, tag_bits: int = 0
    ):
        self.beat_bits, self.elem_bits = beat_bits, elem_bits
        if decode is not None and elem_bits < beat_bits:
            raise ValueError("decode needs elements at least a beat wide")
        self.decode, self.tag_bits = decode, tag_bits if decode is not None else 0
        super().__init__(
            {
                "beats": In(stream.Signature(beat_bits)),
                "row_start": In(1),  # pulse before a row's first element is taken
                "row_offset": In(8),
                "row_elems": In(row_bits),
                "elems": Out(stream.Signature(elem_bits + self.tag_bits)),
            }
        )

    def elaborate(self, platform):
        m = Module()
        beats, elems = self.beats, self.elems
        if self.elem_bits >= self.beat_bits:
            k = self.elem_bits // self.beat_bits
            parts = Signal(self.elem_bits, reset_less=True)  # data: only `count` says it is there
            tag = Signal(self.tag_bits, reset_less=True)
            count = Signal(range(k + 1))
            full = Signal()  # count == k, a flip-flop: the stream's handshakes start from it
            take = elems.valid & elems.ready
            m.d.comb += [
                elems.payload.eq(Cat(parts, tag)),
                elems.valid.eq(full),
                beats.ready.eq(~full | take),  # the next element starts as this one leaves
            ]
            arriving = Signal(self.elem_bits)
            m.d.comb += arriving.eq(
                (parts >> self.beat_bits) | (beats.payload << (self.elem_bits - self.beat_bits))
            )
            with m.If(beats.valid & beats.ready):
                m.d.sync += [
                    parts.eq(arriving),
                    count.eq(Mux(take, 1, count + 1)),
                    full.eq(Mux(take, k == 1, count == k - 1)),
                ]
                if self.decode is not None:  # right once the element's last beat is in
                    m.d.sync += tag.eq(self.decode(arriving))
            with m.Elif(take):
                m.d.sync += [count.eq(0), full.eq(0)]
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
