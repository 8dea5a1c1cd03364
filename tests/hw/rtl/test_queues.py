"""The command and token queues (hw/rtl/queues.py) under random backpressure: nothing lost,
duplicated or reordered, and exactly the depth HwConfig gives (the cycle model and the
verifier's deadlock check both count on it)."""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from tilecraft.hw.config import preset
from tilecraft.hw.rtl.queues import CMD_BITS, command_queue, token_queue

CFG = preset("1x8x8")


def _run(fifo, width: int, depth: int, seed: int, items: int = 300):
    rng = random.Random(seed)
    sent = [rng.getrandbits(width) for _ in range(items)]
    got: list[int] = []
    stats = {"max_level": 0, "full_seen": 0}

    async def bench(ctx):
        k = 0
        # a burst of writes with the reader stalled, then random traffic on both sides
        phase_fill = depth + 3
        for cycle in range(20 * items):
            write = k < items and (cycle < phase_fill or rng.random() < 0.6)
            read = cycle >= phase_fill and rng.random() < 0.5
            ctx.set(fifo.w_en, write)
            ctx.set(fifo.w_data, sent[k] if k < items else 0)
            ctx.set(fifo.r_en, read)
            w_rdy, r_rdy, r_data = ctx.get(fifo.w_rdy), ctx.get(fifo.r_rdy), ctx.get(fifo.r_data)
            level = ctx.get(fifo.level)
            assert level <= depth, f"seed {seed}: level {level} beyond depth {depth}"
            assert w_rdy == (level < depth), f"seed {seed}: w_rdy {w_rdy} at level {level}"
            stats["max_level"] = max(stats["max_level"], level)
            stats["full_seen"] += level == depth
            if write and w_rdy:
                k += 1
            if read and r_rdy:
                got.append(r_data)
            await ctx.tick()
            if len(got) == items:
                break

    sim = Simulator(fifo)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == sent, f"seed {seed}: {len(got)} of {items} items came out, or out of order"
    assert stats["max_level"] == depth and stats["full_seen"] > 0


@pytest.mark.parametrize("seed", range(3))
def test_command_queue_keeps_order_and_depth(seed):
    _run(command_queue(CFG), CMD_BITS, CFG.cmd_queue_depth, seed, items=CFG.cmd_queue_depth + 200)


@pytest.mark.parametrize("seed", range(3))
def test_token_queue_keeps_count_and_depth(seed):
    _run(token_queue(CFG), 1, CFG.dep_queue_depth, seed)
