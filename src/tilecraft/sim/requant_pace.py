"""When a requantizing STORE's last beat is written: its unit's rows against the DRAM's pace.

The unit (hw/rtl/requant_store.py) reads each parameter set's three rows, then its data rows,
one every `passes` cycles (a row takes BATCH x BLOCK_OUT / requant_lanes passes through the
lanes), a set after the first `Timing.requant_set_gap` cycles later than that (its rows drain
into the lanes first); a row comes out `Timing.requant_latency` cycles after its last pass
enters the lanes (`passes` - 1 after its read), into the store's element FIFO, and the write
takes its beats from the FIFO a cycle later, one a cycle, each burst's first beat no sooner
than the DRAM serves it (`dram_latency` after its address was accepted, after the bursts
accepted before it) and `burst_gap` cycles after the burst before it. The unit reads a row
only while fewer than `Timing.requant_ahead` rows are read and not yet written (the FIFO's
room), so where the write waits for the DRAM the unit waits for the write. Element by
element: the model of a STORE that the unit, not the DRAM, may pace (short sets, lanes slower
than the bus, a late grant).
"""

from __future__ import annotations

from collections.abc import Generator

from tilecraft.hw.timing import Timing


def burst_ends(
    timing: Timing, shape: tuple[int, int, int, int], bursts: list[tuple[int, int]], reads_from: int
) -> Generator[int | None, int, None]:
    """The beats of a requantizing STORE of `shape` (elements, rows per parameter set, passes
    per row, beats per element) in `bursts`, its unit reading from cycle `reads_from`, a
    burst at a time: primed with next(), then sent each burst's earliest first beat in turn
    (the DRAM's: its acceptance plus the latency, after the bursts the DRAM serves before
    it), it answers with that burst's last beat. The DRAM port asks as it accepts each burst,
    so the bursts after a write the unit paces wait for its data, as on the RTL."""
    n, per_set, passes, beats = shape
    gap = timing.burst_gap
    ahead, set_gap, latency = timing.requant_ahead, timing.requant_set_gap, timing.requant_latency
    written = [0] * n  # each element's last beat
    read = reads_from + 3 - passes  # the set's three parameter rows first
    earliest = yield None
    t = earliest - 1  # the last beat so far
    burst, left = 0, bursts[0][0]
    for j in range(n):
        read += passes + (set_gap if j and j % per_set == 0 else 0)
        if j >= ahead and written[j - ahead] + 1 > read:
            read = written[j - ahead] + 1
        ready = read + latency + passes  # its first beat, from the FIFO
        if left >= beats:  # no burst starts within the element: its beats back to back
            t = (t + 1 if t + 1 > ready else ready) + beats - 1
            left -= beats
            written[j] = t
            continue
        for b in range(beats):
            beat = t + 1 if b or t + 1 > ready else ready
            if left == 0:  # a burst's first beat
                burst += 1
                left = bursts[burst][0]
                earliest = yield t  # the burst before ends; when may this one start
                beat = max(beat, t + 1 + gap, earliest)
            t = beat
            left -= 1
        written[j] = t
    yield t


def last_beat(
    timing: Timing,
    shape: tuple[int, int, int, int],
    bursts: list[tuple[int, int]],
    reads_from: int,
    firsts: tuple[int, ...],
) -> int:
    """The cycle of the last beat of a requantizing STORE (`burst_ends`), its bursts' data
    due no sooner than `firsts`."""
    ends = burst_ends(timing, shape, bursts, reads_from)
    next(ends)
    for first in firsts:
        last = ends.send(first)
    return last


def last_inp_write(timing: Timing, shape: tuple[int, int, int, int], reads_from: int) -> int:
    """The cycle a requantizing STORE into INP (`to_inp`) writes its last row: the unit reads
    as it does for DRAM (each set's three parameter rows, then a row every `passes` cycles, a
    set after the first `requant_set_gap` later), and each row goes into INP's write port
    `requant_latency` + `passes` cycles after its read (after its last pass, a cycle on), one a
    cycle, which never holds the unit."""
    n, per_set, passes, _ = shape
    sets = -(-n // per_set)
    last_read = reads_from + 3 - passes + n * passes + (sets - 1) * timing.requant_set_gap
    return last_read + timing.requant_latency + passes
