"""A Python AXI4 read slave for amaranth.sim benches: a byte-array DRAM, bursts answered in
order after a fixed latency, with optional random gaps in RVALID."""

from __future__ import annotations

import random
from collections import deque

import numpy as np


class ReadSlave:
    def __init__(
        self, dram: np.ndarray, beat_bytes: int, latency: int = 4, seed: int = 0, stall: float = 0.0
    ):
        self.dram, self.ab, self.latency = dram, beat_bytes, latency
        self.rng, self.stall = random.Random(seed), stall
        self.pending = deque()  # (ready_cycle, addr, beats)
        self.bursts = []

    async def run(self, ctx, ar, r, cycles: int):
        """ar/r: dicts of signals (addr, len, valid, ready / data, last, valid, ready)."""
        cycle = 0
        beat = 0
        while cycle < cycles:
            ctx.set(ar["ready"], 1)
            got_ar = ctx.get(ar["valid"])
            if got_ar:
                addr, beats = ctx.get(ar["addr"]), ctx.get(ar["len"]) + 1
            if self.pending and self.pending[0][0] <= cycle and self.rng.random() >= self.stall:
                _, addr0, n = self.pending[0]
                start = addr0 + beat * self.ab
                word = int.from_bytes(bytes(self.dram[start : start + self.ab]), "little")
                ctx.set(r["data"], word)
                ctx.set(r["valid"], 1)
                if "last" in r:
                    ctx.set(r["last"], int(beat == n - 1))
                fire = ctx.get(r["ready"])
            else:
                ctx.set(r["valid"], 0)
                fire = False
            await ctx.tick()
            if got_ar:
                self.pending.append((cycle + self.latency, addr, beats))
                self.bursts.append((addr, beats))
            if fire:
                beat += 1
                if beat == self.pending[0][2]:
                    self.pending.popleft()
                    beat = 0
            cycle += 1
