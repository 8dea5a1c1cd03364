"""The DMA's burst planner (hw/rtl/dma.py `BurstPlanner`) against a plain cut of each transfer:
every burst's address and length, at most `burst_len` beats and never across a 4 KiB page,
rows back to back as one run, under random backpressure; buses as narrow as 32 bits and as
wide as 1,024 (a page of 32 beats, shorter than the longest burst)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from amaranth.sim import Simulator

from tilecraft.hw.config import preset
from tilecraft.hw.rtl.dma import BurstPlanner


def cut(addr, rows, row_bytes, stride, ab, bl):
    """(byte address, beats) of every burst, as the AXI rules and the planner's doc cut them."""
    if rows == 0 or row_bytes == 0:
        return []
    if stride == row_bytes:  # rows back to back: one run
        rows, row_bytes = 1, rows * row_bytes
    page = 4096 // ab
    out = []
    for r in range(rows):
        start = addr + r * stride
        cur, end = start // ab, -(-(start + row_bytes) // ab)
        while cur < end:
            n = min(end - cur, bl, page - cur % page)
            out.append((cur * ab, n))
            cur += n
    return out


def transfers(rng, ab, bl, count):
    page = 4096
    for _ in range(count):
        row_bytes = rng.choice([ab, 3 * ab, bl * ab, bl * ab + ab, rng.randrange(1, 3 * page)])
        rows = rng.choice([1, 2, 3, rng.randrange(1, 9)])
        stride = rng.choice([row_bytes, row_bytes + rng.randrange(1, 3 * page)])
        addr = rng.choice([0, page - ab, page - bl * ab // 2, rng.randrange(0, 8 * page)])
        # mostly beat-aligned, else any byte: the first row's offset may add a beat too
        offset = rng.choice([0, 0, rng.randrange(ab)])
        yield addr - addr % ab + offset, rows, row_bytes, stride


@pytest.mark.parametrize(
    "axi_bits, burst_len", [(64, 16), (32, 1), (128, 256), (1024, 64), (64, 3)]
)
def test_bursts_match_the_cut_under_backpressure(axi_bits, burst_len):
    cfg = dataclasses.replace(preset("1x8x8"), axi_data_bits=axi_bits, burst_len=burst_len)
    dut = BurstPlanner(cfg)
    ab = axi_bits // 8
    rng = random.Random(axi_bits * 1000 + burst_len)
    cases = list(transfers(rng, ab, burst_len, 40))
    got: list[list] = []

    async def bench(ctx):
        for addr, rows, row_bytes, stride in cases:
            t = dut.transfer
            ctx.set(t.addr, addr)
            ctx.set(t.rows, rows)
            ctx.set(t.row_bytes, row_bytes)
            ctx.set(t.stride, stride)
            ctx.set(t.span, (rows - 1) * stride + row_bytes)
            ctx.set(t.start, 1)
            await ctx.tick()
            ctx.set(t.start, 0)
            bursts: list = []
            want = cut(addr, rows, row_bytes, stride, ab, burst_len)
            budget = 20 + 5 * sum(n + 2 for _, n in want)  # a stuck planner fails, not hangs
            for _ in range(budget):
                ready = rng.random() < 0.7
                ctx.set(dut.bursts.ready, ready)
                if ready and ctx.get(dut.bursts.valid):
                    p = dut.bursts.payload
                    bursts.append((ctx.get(p.addr), ctx.get(p.beats), ctx.get(p.last)))
                await ctx.tick()
                if not ctx.get(dut.busy):
                    break
            got.append(bursts)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for (addr, rows, row_bytes, stride), bursts in zip(cases, got):
        want = cut(addr, rows, row_bytes, stride, ab, burst_len)
        case = f"addr={addr} rows={rows} row_bytes={row_bytes} stride={stride}"
        assert [(a, n) for a, n, _ in bursts] == want, case
        assert [last for _, _, last in bursts] == [0] * (len(want) - 1) + [1], case
