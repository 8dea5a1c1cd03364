"""The AXI4-Lite register file: every register from hw/regs.py, under random handshake delays."""

import random

from amaranth.sim import Simulator

from tilecraft.hw import regs
from tilecraft.hw.config import preset
from tilecraft.hw.rtl.regfile import RegisterFile


def _p(dut, name):
    return getattr(dut.bus, name)


async def axi_write(ctx, dut, addr, value, rng):
    """AW and W with independent random delays, then B after a random delay."""
    delay = {"aw": rng.randint(0, 3), "w": rng.randint(0, 3)}
    done = {"aw": False, "w": False}
    ctx.set(_p(dut, "awaddr"), addr)
    ctx.set(_p(dut, "wdata"), value)
    cycle = 0
    while not all(done.values()):
        fire = {}
        for ch in ("aw", "w"):
            ctx.set(_p(dut, ch + "valid"), int(not done[ch] and cycle >= delay[ch]))
            fire[ch] = ctx.get(_p(dut, ch + "valid")) and ctx.get(_p(dut, ch + "ready"))
        await ctx.tick()
        for ch in ("aw", "w"):
            done[ch] |= bool(fire[ch])
        cycle += 1
        assert cycle < 50, "write address/data never accepted"
    ctx.set(_p(dut, "awvalid"), 0)
    ctx.set(_p(dut, "wvalid"), 0)
    await _response(ctx, dut, "b", rng)


async def _response(ctx, dut, ch, rng):
    for _ in range(rng.randint(0, 3)):
        await ctx.tick()
    ctx.set(_p(dut, ch + "ready"), 1)
    for _ in range(50):
        fired = ctx.get(_p(dut, ch + "valid"))
        value = ctx.get(_p(dut, "rdata")) if ch == "r" else None
        await ctx.tick()
        if fired:
            ctx.set(_p(dut, ch + "ready"), 0)
            return value
    raise AssertionError(f"no {ch.upper()} response")


async def axi_read(ctx, dut, addr, rng):
    ctx.set(_p(dut, "araddr"), addr)
    ctx.set(_p(dut, "arvalid"), 1)
    for _ in range(50):
        fired = ctx.get(_p(dut, "arready"))
        await ctx.tick()
        if fired:
            break
    ctx.set(_p(dut, "arvalid"), 0)
    return await _response(ctx, dut, "r", rng)


def test_every_register_reads_writes_and_starts():
    cfg = preset("default")
    dut = RegisterFile(cfg)
    rng = random.Random(0)
    o = regs.OFFSETS

    async def bench(ctx):
        ctx.set(dut.cycles, 0x1234_5678_9ABC_DEF0)
        ctx.set(dut.error_code, int(regs.ErrorCode.DRAM_RANGE))
        ctx.set(dut.error_index, 77)
        ctx.set(dut.done, 1)
        ctx.set(dut.error, 1)
        written = {}
        for r in regs.REGISTERS:
            if r.access == "rw":
                value = rng.getrandbits(32) & (1 if r.name == "IRQ_ENABLE" else 0xFFFFFFFF)
                await axi_write(ctx, dut, r.offset, value, rng)
                written[r.name] = value
        for name, value in written.items():
            assert await axi_read(ctx, dut, o[name], rng) == value, name
        assert ctx.get(dut.dram_base) == written["DRAM_BASE_LO"] | written["DRAM_BASE_HI"] << 32
        assert await axi_read(ctx, dut, o["CYCLES_HI"], rng) == 0x12345678
        assert await axi_read(ctx, dut, o["CYCLES_LO"], rng) == 0x9ABCDEF0
        assert await axi_read(ctx, dut, o["STATUS"], rng) == regs.DONE | regs.ERROR
        assert await axi_read(ctx, dut, o["ERROR_CODE"], rng) == regs.ErrorCode.DRAM_RANGE
        assert await axi_read(ctx, dut, o["ERROR_INDEX"], rng) == 77
        assert await axi_read(ctx, dut, o["MAGIC"], rng) == regs.MAGIC
        lo = await axi_read(ctx, dut, o["ID_LO"], rng)
        hi = await axi_read(ctx, dut, o["ID_HI"], rng)
        assert regs.digest_of(lo, hi) == cfg.digest
        assert await axi_read(ctx, dut, 0x3C, rng) == 0  # unmapped
        # START is a one-cycle pulse
        pulses = 0
        await axi_write(ctx, dut, o["CONTROL"], regs.START, rng)
        for _ in range(5):
            pulses += ctx.get(dut.start)
            await ctx.tick()
        assert pulses <= 1

    seen = []

    async def watch(ctx):
        async for _ in ctx.tick():
            if ctx.get(dut.start):
                seen.append(1)

    finished = []

    async def main(ctx):
        await bench(ctx)
        finished.append(True)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(main)
    sim.add_testbench(watch, background=True)
    sim.run_until(1e-4)  # 10,000 cycles: far more than needed, so a hang fails instead
    assert finished and seen == [1]
