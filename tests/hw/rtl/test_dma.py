"""The stream register slices of hw/rtl/dma.py under random backpressure: nothing lost,
duplicated or reordered; the SkidBuffer one cycle late with both directions registered, the
ReadyBuffer with no latency and only its ready registered."""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from tilecraft.hw.rtl.dma import ReadyBuffer, SkidBuffer

WIDTH = 12


def _run(dut, seed: int, items: int = 200):
    rng = random.Random(seed)
    sent = [rng.getrandbits(WIDTH) for _ in range(items)]
    got: list[int] = []
    coupled = []  # cycles where i.ready changed with o.ready

    async def bench(ctx):
        k = 0
        for cycle in range(20 * items):
            valid = k < items and rng.random() < 0.7
            take = rng.random() < 0.6
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload, sent[k] if k < items else 0)
            ctx.set(dut.o.ready, 0)
            ready_if_stalled = ctx.get(dut.i.ready)
            ctx.set(dut.o.ready, take)
            ready = ctx.get(dut.i.ready)
            if ready != ready_if_stalled:
                coupled.append(cycle)
            if ctx.get(dut.o.valid) and take:
                got.append(ctx.get(dut.o.payload))
            if valid and ready:
                k += 1
            await ctx.tick()
            if len(got) == items:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert got == sent, f"seed {seed}: {len(got)} of {items} items came out, or out of order"
    assert not coupled, f"i.ready followed o.ready within the cycle at {coupled[:5]}"


@pytest.mark.parametrize("cls", [SkidBuffer, ReadyBuffer])
@pytest.mark.parametrize("seed", range(3))
def test_stream_buffers_keep_order_under_backpressure(cls, seed):
    _run(cls(WIDTH), seed)


async def _first_out(ctx, dut) -> int:
    """Cycles from offering one item (the consumer always ready) to its leaving on `o`."""
    ctx.set(dut.o.ready, 1)
    ctx.set(dut.i.payload, 5)
    ctx.set(dut.i.valid, 1)
    for cycle in range(4):
        if ctx.get(dut.o.valid):
            assert ctx.get(dut.o.payload) == 5
            return cycle
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
    raise AssertionError("nothing came out")


@pytest.mark.parametrize("cls, latency", [(SkidBuffer, 1), (ReadyBuffer, 0)])
def test_stream_buffer_latency(cls, latency):
    dut = cls(WIDTH)
    out = {}

    async def bench(ctx):
        out["cycles"] = await _first_out(ctx, dut)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert out["cycles"] == latency
