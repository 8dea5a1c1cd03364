"""sim/requant_pace.py against the plain statement of its rule, beat by beat: the model of a
requantizing STORE's beats takes an element's beats at once where no burst starts within
them, and must give every burst's end as the per-beat walk does."""

from __future__ import annotations

import dataclasses
import random

from tilecraft.hw.config import preset
from tilecraft.hw.timing import Timing
from tilecraft.sim.requant_pace import burst_ends, last_beat


def _per_beat(timing: Timing, shape, bursts, reads_from: int):
    """The rule as the module's docstring states it, one beat at a time."""
    n, per_set, passes, beats = shape
    written = [0] * n
    read = reads_from + 3 - passes
    earliest = yield None
    t, burst, left = earliest - 1, 0, bursts[0][0]
    for j in range(n):
        read += passes + (timing.requant_set_gap if j and j % per_set == 0 else 0)
        if j >= timing.requant_ahead:
            read = max(read, written[j - timing.requant_ahead] + 1)
        ready = read + timing.requant_latency + passes
        for b in range(beats):
            beat = t + 1 if b else max(t + 1, ready)
            if left == 0:
                burst += 1
                left = bursts[burst][0]
                earliest = yield t
                beat = max(beat, t + 1 + timing.burst_gap, earliest)
            t, left = beat, left - 1
        written[j] = t
    yield t


def _ends(generator, firsts):
    next(generator)
    return [generator.send(first) for first in firsts]


def test_every_burst_ends_where_the_per_beat_walk_says():
    base = Timing.from_config(preset("default").replace(requant_lanes=8))
    rnd = random.Random(0)
    for case in range(800):
        timing = dataclasses.replace(
            base,
            requant_ahead=rnd.randint(1, 12),
            requant_set_gap=rnd.randint(0, 5),
            requant_latency=rnd.randint(1, 20),
            burst_gap=rnd.randint(0, 2),
        )
        n = rnd.randint(1, 60)
        shape = (n, rnd.randint(1, n), rnd.randint(1, 4), rnd.randint(1, 4))
        total, bursts = n * shape[3], []
        while total:  # bursts that split elements anywhere
            bursts.append((min(total, rnd.randint(1, 16)), 1))
            total -= bursts[-1][0]
        reads_from, first, firsts = rnd.randint(0, 50), rnd.randint(0, 60), []
        for _ in bursts:  # the DRAM's earliest first beats, late or early against the unit
            first += rnd.randint(0, 40)
            firsts.append(first)
        want = _ends(_per_beat(timing, shape, bursts, reads_from), firsts)
        assert _ends(burst_ends(timing, shape, bursts, reads_from), firsts) == want, case
        assert last_beat(timing, shape, bursts, reads_from, tuple(firsts)) == want[-1]
