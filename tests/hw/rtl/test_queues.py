"""The command and token queues (hw/rtl/queues.py) under random backpressure: nothing lost,
duplicated or reordered, and exactly the depth HwConfig gives (the cycle model and the
verifier's deadlock check both count on it)."""

from __future__ import annotations

import random

import pytest
from amaranth.back import rtlil
from amaranth.sim import Simulator

from tilecraft.hw.config import preset
from tilecraft.hw.rtl.queues import (
    CMD_BITS,
    CommandQueue,
    FlaggedFIFO,
    TokenCounter,
    command_queue,
    token_queue,
)

CFG = preset("1x8x8")


def _simulate(dut, bench) -> None:
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


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

    _simulate(fifo, bench)
    assert got == sent, f"seed {seed}: {len(got)} of {items} items came out, or out of order"
    assert stats["max_level"] == depth and stats["full_seen"] > 0


@pytest.mark.parametrize("seed", range(3))
def test_command_queue_keeps_order_and_depth(seed):
    _run(command_queue(CFG), CMD_BITS, CFG.cmd_queue_depth, seed, items=CFG.cmd_queue_depth + 200)


@pytest.mark.parametrize("depth", [1, 3, 8])
def test_a_small_command_queue_keeps_order_and_depth(depth):
    """The shortest queues: one entry (the output register alone, no storage), a few."""
    _run(CommandQueue(width=12, depth=depth), 12, depth, seed=depth, items=60)


class _WatchedQueue(CommandQueue):
    """A CommandQueue whose storage's ports the test bench can read."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        storage = m.submodules.storage
        self.read_port, self.write_port = storage.read_ports[0], storage.write_ports[0]
        return m


@pytest.mark.parametrize(("seed", "depth"), [(0, 3), (1, 8), (2, 512)])
def test_no_read_of_the_command_queues_storage_meets_a_write_of_its_row(seed, depth):
    """What `no_rw_check` promises yosys (CommandQueue's docstring), watched under random
    traffic that fills and empties the queue: no cycle enables a read and a write of one row."""
    rng = random.Random(seed)
    q = _WatchedQueue(width=8, depth=depth)
    seen = {"meets": 0, "both": 0, "full": 0, "empty": 0}

    async def bench(ctx):
        r, w = q.read_port, q.write_port
        for cycle in range(30 * depth + 400):
            filling = (cycle // (4 * depth + 40)) % 2 == 0  # phases that fill, then drain
            ctx.set(q.w_en, rng.random() < (0.8 if filling else 0.2))
            ctx.set(q.w_data, rng.getrandbits(8))
            ctx.set(q.r_en, rng.random() < (0.2 if filling else 0.8))
            reading, writing = ctx.get(r.en), ctx.get(w.en)
            seen["both"] += reading and writing
            seen["meets"] += reading and writing and ctx.get(r.addr) == ctx.get(w.addr)
            seen["full"] += not ctx.get(q.w_rdy)
            seen["empty"] += not ctx.get(q.r_rdy)
            await ctx.tick()

    _simulate(q, bench)
    assert seen["meets"] == 0, f"{seen['meets']} cycles read and wrote one row"
    assert seen["both"] and seen["full"] and seen["empty"], seen  # the traffic reached them


def test_the_command_queues_storage_tells_yosys_no_read_meets_a_write():
    """The storage carries `no_rw_check` (CommandQueue's docstring says why no read meets a
    write of its row), so yosys maps the block RAM without its old-data emulation; a queue of
    one entry has no storage and elaborates too."""

    def netlist(q):
        return rtlil.convert(q, ports=[q.w_data, q.w_en, q.w_rdy, q.r_data, q.r_en, q.r_rdy])

    assert netlist(command_queue(CFG)).count("no_rw_check") == 1, "not on the storage"
    assert "no_rw_check" not in netlist(CommandQueue(width=8, depth=1))


def _run_stream(
    fifo,
    width: int,
    depth: int,
    seed: int,
    items: int = 200,
    data: bool = True,
    late_room: bool = False,
    staged: bool = False,
):
    """Random traffic on a queue with stream ports: what goes in comes out in order, once
    (`data`; else only the count matters); `w_stream.ready` is clear exactly when it holds
    `depth` items and `r_stream.valid` exactly when it is empty, as SyncFIFO's w_rdy and r_rdy
    are; the data is there the cycle it is. `late_room`: an item taken frees its place a cycle
    later (a TokenCounter), so `ready` counts the one taken the cycle before as held.
    `staged`: an item put shows a cycle later (FlaggedFIFO(staged=True)), but holds its place
    from the cycle it is put."""
    rng = random.Random(seed)
    sent = [rng.getrandbits(width) for _ in range(items)]
    got, held, took, put = [], 0, 0, 0
    seen = {"full": 0, "empty": 0}

    async def bench(ctx):
        nonlocal held, took, put
        k = 0
        for cycle in range(20 * items):
            write = k < items and rng.random() < 0.6
            read = rng.random() < (0.2 if cycle < 4 * depth + 20 else 0.5)  # it fills first
            ctx.set(fifo.w_stream.valid, write)
            ctx.set(fifo.w_stream.payload, sent[k] if k < items else 0)
            ctx.set(fifo.r_stream.ready, read)
            ready, valid = ctx.get(fifo.w_stream.ready), ctx.get(fifo.r_stream.valid)
            room = held + (took if late_room else 0) < depth
            shown = held - (put if staged else 0)
            assert ready == room and valid == (shown > 0), (cycle, held, ready, valid)
            seen["full"] += held == depth
            seen["empty"] += held == 0
            took = int(valid and read)
            put = int(write and ready)
            if valid and read:
                got.append(ctx.get(fifo.r_stream.payload) if data else 0)
                held -= 1
            if write and ready:
                k += 1
                held += 1
            await ctx.tick()
            if len(got) == items:
                return

    _simulate(fifo, bench)
    assert got == (sent if data else [0] * items), f"seed {seed}: {len(got)} of {items} came out"
    assert seen["full"] and seen["empty"]


@pytest.mark.parametrize(("seed", "depth"), [(0, None), (1, 1), (2, 3)])
def test_token_queue_keeps_count_and_depth(seed, depth):
    """A counter, not a FIFO: full at `depth` tokens (the config's, or any other, one
    included; a token taken frees its place a cycle later), empty at none (the cycle a last
    token is taken, not after), never more given than taken."""
    queue = token_queue(CFG) if depth is None else TokenCounter(depth)
    _run_stream(queue, 1, depth or CFG.dep_queue_depth, seed, data=False, late_room=True)


@pytest.mark.parametrize(("seed", "depth"), [(0, 4), (1, 2), (2, 8)])
def test_flagged_fifo_keeps_order_and_flags_its_level_as_syncfifo_does(seed, depth):
    """The read clients' beat queue (and the store's burst lengths)."""
    _run_stream(FlaggedFIFO(12, depth), 12, depth, seed)


@pytest.mark.parametrize(("seed", "depth"), [(0, 4), (1, 2), (2, 32)])
def test_a_staged_flagged_fifo_shows_a_put_a_cycle_later_and_never_overfills(seed, depth):
    """The read arbiter's route queue: a grant's put goes through a register first."""
    _run_stream(FlaggedFIFO(5, depth, staged=True), 5, depth, seed, staged=True)


@pytest.mark.parametrize(("seed", "depth", "places"), [(0, 8, 5), (1, 4, 4), (2, 2, 1)])
def test_a_counted_flagged_fifo_writes_on_valid_alone_and_keeps_order(seed, depth, places):
    """The requantization stream's row queue: its writer counts its own places (never more than
    `places` held, however many the storage has), so `ready` is 1 in every cycle and a put is
    `valid` alone; what goes in comes out in order, `valid` exactly while something is held."""
    fifo = FlaggedFIFO(9, depth, counted=True)
    rng = random.Random(seed)
    sent = [rng.getrandbits(9) for _ in range(200)]
    got, held, most = [], 0, 0

    async def bench(ctx):
        nonlocal held, most
        k = 0
        for cycle in range(4000):
            write = k < len(sent) and held < places and rng.random() < 0.7
            read = rng.random() < (0.2 if cycle < 40 else 0.5)
            ctx.set(fifo.w_stream.valid, write)
            ctx.set(fifo.w_stream.payload, sent[k] if write else 0)
            ctx.set(fifo.r_stream.ready, read)
            ready, valid = ctx.get(fifo.w_stream.ready), ctx.get(fifo.r_stream.valid)
            assert ready == 1 and valid == (held > 0), (cycle, held, ready, valid)
            if valid and read:
                got.append(ctx.get(fifo.r_stream.payload))
                held -= 1
            if write:
                k += 1
                held += 1
            most = max(most, held)
            await ctx.tick()
            if len(got) == len(sent):
                return

    _simulate(fifo, bench)
    assert got == sent, f"seed {seed}: {len(got)} of {len(sent)} came out, or out of order"
    assert most == places


def test_a_flagged_fifo_is_counted_or_staged_not_both():
    with pytest.raises(ValueError, match="staged=True with counted"):
        FlaggedFIFO(4, 4, staged=True, counted=True)
