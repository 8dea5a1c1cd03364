"""The one DRAM port, burst by burst, arbitrated as the RTL arbitrates it.

- Reads (fetch, the compute stage's loads, the load stage) share the AR channel
  (`hw/rtl/dma.py` ReadArbiter): one transfer at a time owns it from its first burst's acceptance to
  its last one's; among transfers waiting for it the lower client wins a tie (fetch, compute,
  load). The pick is registered: a first burst is accepted `Timing.read_grant` cycles after it
  is presented at the soonest, and after the cycle following the last transfer's last burst.
  Within a transfer the next burst is presented one cycle after the previous one is accepted
  (`Timing.bursts`, `Timing.row_delay` at a new row).
- The store's bursts go on AW and are accepted only in a cycle where no read is presented, so
  they wait for a gap between read bursts.
- The DRAM (`sim/rtl/axi_dram.v`) serves bursts in acceptance order: a burst's first beat comes
  `dram_latency` cycles after its acceptance, and no sooner than `burst_gap` idle cycles after
  the previous burst's last beat. It holds `Timing.dram_queue` bursts accepted and not yet
  served: past them the next address (a read first, as above) is accepted the cycle after the
  oldest one's last beat. So a long STORE that fills the queue lets a LOAD behind it take each
  slot as it frees, and waits for the LOAD's bursts before its own last ones.
- A write whose data comes later than the DRAM would take it (a requantizing STORE's unit,
  `requant_pace.py`) holds the data bus until its last beat. Where its pace is known as a
  burst is accepted (`pace`: the engine's, once the unit has its bank), the burst's last beat
  is worked out then, so the bursts accepted after it wait for it; otherwise the engine moves
  `data_free` past the write once it knows when its last beat is.
- A transfer whose consumer takes its beats slower than one a cycle (`drain` cycles for all of
  them: a LOAD of narrow elements, one written a cycle) holds R once its client's FIFO
  (`Timing.read_buffer` beats) is full, so the bursts after it get their data no sooner than
  its last beat is taken.

The engine registers a transfer when its instruction starts and learns when its data came once
its last burst is accepted. Acceptances are taken in time order, after every other event of the
same cycle, so a transfer registered in the meantime is never passed over.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from tilecraft.hw.timing import Timing

FETCH_CLIENT, COMPUTE_CLIENT, LOAD_CLIENT, STORE_CLIENT = 0, 1, 2, 3


@dataclass
class _Transfer:
    key: object
    client: int
    bursts: list[tuple[int, int]]  # (beats, cycles from the previous acceptance)
    at: int  # when its next burst is presented
    sent: int = 0  # bursts accepted so far
    first: int = 0  # cycle of its first data beat
    drain: int = 0  # cycles its consumer takes for all its beats (0: one a cycle)
    firsts: list[int] = field(default_factory=list)  # a write's bursts' earliest first beats
    pace: Generator[int | None, int, None] | None = None  # a paced write's `burst_ends`


@dataclass(frozen=True)
class Done:
    """A transfer whose bursts are all accepted: its first data beat, and the first cycle after
    its last beat and the gap that follows it."""

    key: object
    first: int
    free: int
    firsts: tuple[int, ...] = ()  # a write's bursts' earliest first beats (the DRAM's)


class DramPort:
    def __init__(self, timing: Timing):
        self.timing = timing
        self.waiting: list[_Transfer] = []  # read transfers not yet owning AR
        self.owner: _Transfer | None = None  # the read transfer owning AR
        self.writes: deque[_Transfer] = deque()
        # the last beats of the latest `dram_queue` bursts accepted, in order (served in order)
        self.queued: deque[int] = deque(maxlen=timing.dram_queue)
        self.soonest = 0  # the next address's first cycle: one a cycle (`_accepted`)
        self.read_end = -2  # the last read transfer's last acceptance (the pick follows it)
        self.data_free = 0  # earliest first beat of the next burst
        # a write's pace, asked as its first burst is accepted: key -> its `burst_ends`, or
        # None where it is not yet known
        self.pace: Callable[[object], Generator[int | None, int, None] | None] | None = None

    def request(
        self, key, client: int, bursts: list[tuple[int, int]], at: int, drain: int = 0
    ) -> None:
        """Transfer `key` presents its first burst at cycle `at`; `drain`: the cycles its
        consumer takes for its beats, where that is more than one a beat."""
        if not bursts:
            raise ValueError(f"transfer {key!r} has no bursts")
        tr = _Transfer(key, client, bursts, at, drain=drain)
        (self.writes if client == STORE_CLIENT else self.waiting).append(tr)

    def _accepted(self, c: int, last: int) -> None:
        """A burst accepted at cycle c, its last beat at `last`: the next address comes a cycle
        later, and once the queue is full, the cycle after its oldest burst's last beat."""
        q = self.queued
        q.append(last)
        self.soonest = max(c + 1, q[0] + 1) if len(q) == q.maxlen else c + 1

    def _next_read(self) -> tuple[int, _Transfer] | None:
        soonest = self.soonest
        if self.owner:
            return max(self.owner.at, soonest), self.owner
        best = None
        picked = self.read_end + 1  # the first cycle the arbiter picks again
        for tr in self.waiting:
            c = max(max(tr.at, picked) + self.timing.read_grant, soonest)
            if best is None or (c, tr.client) < (best[0], best[1].client):
                best = (c, tr)
        return best

    def next_time(self) -> int | None:
        """Cycle of the next burst acceptance, or None while nothing is presented."""
        times = []
        read = self._next_read()
        if read:
            times.append(read[0])
        if self.writes:
            times.append(max(self.writes[0].at, self.soonest))
        return min(times) if times else None

    def advance(self, limit: float) -> Done | None:
        """Accept every burst due before cycle `limit`, stopping at the first that completes a
        transfer (returned). While one read transfer owns AR and no write waits, its bursts go
        back to back without the arbitration (the same acceptances, faster)."""
        while True:
            tr = self.owner
            if tr is not None and not self.writes:
                lat, gap = self.timing.dram_latency, self.timing.burst_gap
                bursts, n = tr.bursts, len(tr.bursts)
                q, full = self.queued, self.queued.maxlen
                while True:
                    c = tr.at if tr.at > self.soonest else self.soonest
                    if c >= limit:
                        return None
                    first = c + lat if c + lat > self.data_free else self.data_free
                    last = first + bursts[tr.sent][0] - 1
                    self.data_free = last + 1 + gap
                    q.append(last)  # `_accepted`, inline: the hot loop
                    self.soonest = c + 1 if len(q) < full or q[0] < c else q[0] + 1
                    if tr.sent == 0:
                        tr.first = first
                    tr.sent += 1
                    if tr.sent == n:
                        self.owner = None
                        self.read_end = c
                        self._held(tr)
                        return Done(tr.key, tr.first, self.data_free)
                    tr.at = c + bursts[tr.sent][1]
            t = self.next_time()
            if t is None or t >= limit:
                return None
            done = self.step()
            if done is not None:
                return done

    def step(self) -> Done | None:
        """Accept the next burst; a transfer whose last burst this was is returned."""
        read = self._next_read()
        write_at = max(self.writes[0].at, self.soonest) if self.writes else None
        if read and (write_at is None or read[0] <= write_at):  # reads first in a cycle
            c, tr = read
            if tr is not self.owner:
                self.waiting.remove(tr)
                self.owner = tr
        else:
            c, tr = write_at, self.writes[0]
        beats = tr.bursts[tr.sent][0]
        first = max(c + self.timing.dram_latency, self.data_free)
        last = first + beats - 1
        if tr.client == STORE_CLIENT:
            tr.firsts.append(first)
            if tr.sent == 0 and self.pace is not None:
                tr.pace = self.pace(tr.key)
                if tr.pace is not None:
                    next(tr.pace)
            if tr.pace is not None:
                last = tr.pace.send(first)
        self.data_free = last + 1 + self.timing.burst_gap
        self._accepted(c, last)
        if tr.sent == 0:
            tr.first = first
        tr.sent += 1
        if tr.sent < len(tr.bursts):
            tr.at = c + tr.bursts[tr.sent][1]
            return None
        if tr is self.owner:
            self.owner = None
            self.read_end = c
            self._held(tr)
            return Done(tr.key, tr.first, self.data_free)
        self.writes.popleft()
        return Done(tr.key, tr.first, self.data_free, tuple(tr.firsts))

    def _held(self, tr: _Transfer) -> None:
        """A read transfer's last burst is in: where its consumer is slower than the data bus,
        R carries its last beat only once the consumer has taken all but `read_buffer` of
        them, and the next burst's data follows that."""
        if not tr.drain:  # one a cycle: as fast as the data
            return
        beats = sum(b for b, _ in tr.bursts)
        over = beats - self.timing.read_buffer
        if tr.drain <= beats or over <= 0:
            return
        last = tr.first + -(-over * tr.drain // beats)  # the consumer's pace, over the FIFO
        self.data_free = max(self.data_free, last + 1 + self.timing.burst_gap)
