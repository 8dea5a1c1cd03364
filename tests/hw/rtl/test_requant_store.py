"""The requantizing STORE's stream (hw/rtl/requant_store.py) under Amaranth's simulator, its
fields given only with the start pulse (as the store stage gives them): every row requantized
with its own parameter set (the spec's `_requantized`, bit for bit, over four sets of a row
each and of several rows), and at the pace the cycle model gives it (sim/plan.py
`requant_data`): a row's passes through the lanes back to back within a set, and
`Timing.requant_set_gap` more cycles where a set ends (its rows drain into the lanes, then the
next set's three parameter rows are read)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.sim import Simulator

from tilecraft.hw.config import preset
from tilecraft.hw.isa.requant import pack_clip, pack_scale
from tilecraft.hw.rtl.requant_store import RequantStream
from tilecraft.hw.rtl.signatures import SRAM_READ_LATENCY
from tilecraft.hw.timing import Timing
from tilecraft.ops.requant import scale_fields
from tilecraft.sim.semantics import _requantized

PARAMS = 100  # the parameter sets' first row in the bank


def _bank(cfg, rng, sets: int) -> np.ndarray:
    """A bank's rows: random accumulators, then `sets` random parameter sets from PARAMS."""
    rows = np.zeros((PARAMS + 3 * sets, cfg.batch, cfg.block_out), np.int32)
    rows[:PARAMS] = rng.integers(-(1 << 20), 1 << 20, rows[:PARAMS].shape)
    bo = cfg.block_out
    for k in range(sets):  # channel c's parameters in lane c of the first batch row
        scale = scale_fields(rng.uniform(1, 2, bo) * 2.0 ** rng.integers(-16, -8, bo))
        lo = rng.integers(-128, -40, bo)
        at = PARAMS + 3 * k
        rows[at, 0] = rng.integers(-(1 << 19), 1 << 19, bo)
        rows[at + 1, 0] = pack_scale(scale.significand, scale.exponent)
        rows[at + 2, 0] = pack_clip(rng.integers(-40, 40, bo), lo, rng.integers(40, 128, bo))
    return rows


def _stream(cfg, bank: np.ndarray, base: int, total: int, per_set: int, room=None):
    """(the cycles the stream puts out a row, the rows as int8), the bank answering each read
    SRAM_READ_LATENCY cycles after its address; `room` (a bool per cycle, else always) is the
    store's room for another row."""
    dut = RequantStream(cfg)
    lanes = cfg.batch * cfg.block_out
    words = [
        sum((int(v) & 0xFFFFFFFF) << (32 * c) for c, v in enumerate(row.reshape(-1)))
        for row in bank
    ]
    cycles, rows = [], []

    async def bench(ctx):
        fields = [(dut.base, base), (dut.total, total), (dut.per_set, per_set)]
        fields.append((dut.param_base, PARAMS))
        ctx.set(dut.room, 1)
        for port, value in fields:
            ctx.set(port, value)
        ctx.set(dut.start, 1)
        await ctx.tick()
        for port, _ in fields:  # the store stage drives them with the pulse only
            ctx.set(port, 0)
        ctx.set(dut.start, 0)
        ctx.set(dut.go, 1)
        addrs = [0] * SRAM_READ_LATENCY
        for cycle in range(60 + 12 * total + (0 if room is None else len(room))):
            if room is not None:
                ctx.set(dut.room, room[cycle] if cycle < len(room) else 1)
            addrs.append(ctx.get(dut.acc.addr))
            ctx.set(dut.acc.data, words[addrs[-1 - SRAM_READ_LATENCY] % len(words)])
            if ctx.get(dut.out_valid):
                cycles.append(cycle)
                out = ctx.get(dut.out)
                rows.append([(out >> (8 * c)) & 0xFF for c in range(lanes)])
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return cycles, np.array(rows, np.uint8).view(np.int8)


@pytest.mark.parametrize("name", ["1x8x8", "default"])
@pytest.mark.parametrize("per_set", [1, 3])
def test_each_row_takes_its_own_sets_parameters(name, per_set):
    cfg = preset(name).replace(requant_lanes=8)
    bank = _bank(cfg, np.random.default_rng(per_set), sets=4)
    total, base = 4 * per_set, 7
    _, got = _stream(cfg, bank, base, total, per_set)
    machine = SimpleNamespace(config=cfg, acc=bank)
    want, _ = _requantized(machine, bank[base : base + total], PARAMS, per_set, 0)
    assert got.shape == (total, cfg.batch * cfg.block_out)
    assert np.array_equal(got, want.reshape(total, -1))


@pytest.mark.parametrize("name", ["1x8x8", "default"])
def test_the_stream_keeps_the_modeled_pace(name):
    cfg = preset(name).replace(requant_lanes=8)
    passes = cfg.batch * cfg.block_out // cfg.requant_lanes
    bank = _bank(cfg, np.random.default_rng(0), sets=3)
    cycles, _ = _stream(cfg, bank, 0, total=36, per_set=12)
    assert len(cycles) == 36
    gaps = [b - a for a, b in zip(cycles, cycles[1:])]
    boundaries = {11, 23}  # the gaps into each set's first row
    assert [g for i, g in enumerate(gaps) if i not in boundaries] == [passes] * 33
    assert [gaps[i] for i in sorted(boundaries)] == [passes + Timing.requant_set_gap] * 2


@pytest.mark.parametrize("name", ["1x8x8", "default"])
def test_a_store_without_room_holds_the_reads_and_loses_no_row(name):
    """The store's room dropping and coming back at random: the reads stop and go on, the row
    queue never overflows (its room is a flip-flop worked out a cycle ahead), and every row
    comes out once, in order, with its set's parameters."""
    cfg = preset(name).replace(requant_lanes=8)
    rng = np.random.default_rng(5)
    bank = _bank(cfg, rng, sets=4)
    room = [bool(r) for r in rng.random(400) < 0.4]
    total, per_set, base = 24, 6, 3
    cycles, got = _stream(cfg, bank, base, total, per_set, room)
    machine = SimpleNamespace(config=cfg, acc=bank)
    want, _ = _requantized(machine, bank[base : base + total], PARAMS, per_set, 0)
    assert len(cycles) == total
    assert np.array_equal(got, want.reshape(total, -1))


def test_the_model_knows_how_far_the_unit_may_run_ahead_of_the_write():
    from tilecraft.hw.rtl.stages import REQUANT_AHEAD

    assert Timing.requant_ahead == REQUANT_AHEAD  # the store's element FIFO
