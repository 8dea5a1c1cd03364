"""The cycle model's DRAM port, burst by burst, against the arbitration rules of the RTL
(hw/rtl/dma.py ReadArbiter, the store's AW channel, sim/rtl/axi_dram.v)."""

from __future__ import annotations

import dataclasses

from tilecraft.hw.config import preset
from tilecraft.hw.timing import Timing
from tilecraft.sim.dram_port import (
    COMPUTE_CLIENT,
    FETCH_CLIENT,
    LOAD_CLIENT,
    STORE_CLIENT,
    DramPort,
)

T = Timing.from_config(preset("1x8x8"))  # 8-byte beats, 16-beat bursts
L, GAP, G = T.dram_latency, T.burst_gap, T.read_grant


def _drain(port):
    """Accept every burst; (key, first beat, free) of each transfer as it completes."""
    done = []
    while port.next_time() is not None:
        d = port.step()
        if d:
            done.append((d.key, d.first, d.free))
    return done


def test_bursts_follow_the_planner():
    # rows back to back are one run, split at burst_len beats and at 4 KiB
    assert T.bursts(0, 4, 64, 64) == [(16, 1), (16, 1)]
    assert T.bursts(4096 - 16, 1, 64, 64) == [(2, 1), (6, 1)]
    # strided rows are runs of their own, each presented `row_delay` cycles after the previous
    # burst (the planner works a row out a cycle ahead)
    assert T.bursts(0, 3, 24, 100) == [(3, 1), (4, 1), (3, 1)]  # row 1 starts mid-beat
    slow = dataclasses.replace(T, row_delay=2)
    assert slow.bursts(0, 3, 24, 100) == [(3, 2), (4, 2), (3, 2)]
    assert T.bursts(0, 0, 24, 24) == []


def test_one_transfer_streams_its_bursts():
    port = DramPort(T)
    port.request("a", LOAD_CLIENT, [(8, 2), (8, 2)], at=10)
    # the arbiter's pick, then the bus (not the latency)
    assert _drain(port) == [("a", 10 + G + L, 10 + G + L + 2 * (8 + GAP))]


def test_a_store_burst_slips_into_a_read_transfers_row_gap():
    port = DramPort(T)
    port.request("acc", COMPUTE_CLIENT, [(8, 2), (8, 2)], at=0)  # rows: AR at G and G + 2
    port.request("store", STORE_CLIENT, [(1, 2)], at=G)  # AW: the first cycle without an AR
    done = dict((k, (first, free)) for k, first, free in _drain(port))
    assert done["store"][0] == G + L + 8 + GAP  # between the two rows' data
    assert done["acc"] == (G + L, done["store"][0] + 1 + GAP + 8 + GAP)


def test_a_read_transfer_owns_the_channel_until_its_last_burst():
    port = DramPort(T)
    port.request("load", LOAD_CLIENT, [(4, 2), (4, 2), (4, 2)], at=0)  # AR at G, G + 2, G + 4
    port.request("compute", COMPUTE_CLIENT, [(4, 2)], at=1)  # waits for the lock: AR at G + 6
    done = dict((k, (first, free)) for k, first, free in _drain(port))
    assert done["load"][0] == G + L
    assert done["compute"][0] == G + L + 3 * (4 + GAP)  # after all three of load's bursts


def test_ties_go_to_the_lower_client_and_reads_before_writes():
    port = DramPort(T)
    port.request("load", LOAD_CLIENT, [(2, 2)], at=3)
    port.request("store", STORE_CLIENT, [(2, 2)], at=3 + G)  # AW with the reads' AR
    port.request("fetch", FETCH_CLIENT, [(2, 2)], at=3)
    order = [k for k, _, _ in _drain(port)]
    # fetch wins the pick and its AR goes before the store's AW in the same cycle; the store
    # takes the cycle of the next pick, load the one after
    assert order == ["fetch", "store", "load"]


def test_the_pick_after_a_transfer_takes_a_cycle():
    """The arbiter's registered grant: a waiting transfer's first burst is picked the cycle
    after the owner's last burst and accepted the cycle after that."""
    port = DramPort(T)
    port.request("load", LOAD_CLIENT, [(1, 1)], at=0)  # AR at G
    port.request("fetch", FETCH_CLIENT, [(1, 1)], at=G)  # presented as load's AR goes
    port.step()
    assert port.next_time() == 2 * G + 1  # picked at G + 1, accepted a grant later
    port = DramPort(dataclasses.replace(T, read_grant=0))
    port.request("load", LOAD_CLIENT, [(1, 1)], at=0)
    port.request("fetch", FETCH_CLIENT, [(1, 1)], at=0)
    port.step()  # fetch (the lower client) at 0
    assert port.next_time() == 1  # with an unregistered pick: load in the next cycle


def test_a_slow_consumer_holds_the_data_bus_once_its_fifo_is_full():
    # 64 beats taken one every three cycles (narrow elements, one written a cycle): R carries
    # the first read_buffer beats at the bus's pace, the rest at the consumer's, and the next
    # transfer's first beat comes the cycle after its last one and the gap (the RTL's order:
    # sim/rtl/axi_dram.v starts a burst GAP idle cycles after the last beat, its beat a cycle on)
    C = T.read_buffer
    beats = 64
    assert beats > C
    port = DramPort(T)
    port.request("uop", COMPUTE_CLIENT, [(16, 1)] * 4, at=0, drain=3 * beats)
    port.request("fetch", FETCH_CLIENT, [(8, 1)], at=1)
    done = dict((k, (first, free)) for k, first, free in _drain(port))
    first = done["uop"][0]
    last = first + 3 * (beats - C)
    assert done["fetch"][0] == last + 1 + GAP
    # at the bus's pace (no drain) the fetch's data follows the four bursts and their gaps
    port = DramPort(T)
    port.request("uop", COMPUTE_CLIENT, [(16, 1)] * 4, at=0)
    port.request("fetch", FETCH_CLIENT, [(8, 1)], at=1)
    done = dict((k, (first, free)) for k, first, free in _drain(port))
    assert done["fetch"][0] == done["uop"][0] + 4 * (16 + GAP)


def test_a_paced_write_holds_the_data_bus_for_the_reads_accepted_after_it():
    # a requantizing STORE's burst whose data the unit gives one beat every 3 cycles (16 rows of
    # 3 passes, `burst_ends`): a read accepted after it gets its data only after the write's
    # last beat and the gap, as the RTL's DRAM serves bursts in acceptance order; without a
    # pace the write's beats are taken back to back
    from tilecraft.sim.requant_pace import burst_ends

    shape = (16, 16, 3, 1)  # elements, rows per set, passes per row, beats per element
    reads_from = 0
    paced = {}
    for pace in (True, False):
        port = DramPort(T)
        if pace:
            port.pace = lambda key: burst_ends(T, shape, [(16, 1)], reads_from)
        port.request("store", STORE_CLIENT, [(16, 1)], at=0)
        port.request("load", LOAD_CLIENT, [(4, 1)], at=1)
        paced[pace] = dict((k, (first, free)) for k, first, free in _drain(port))
    first = paced[True]["store"][0]
    assert first == L  # accepted at 0: the DRAM's latency
    # the unit reads the three parameter rows, then a row every 3 cycles; the last row's
    # element is ready requant_latency + 3 after its read (after its last pass, a cycle on),
    # well after the bus would take it
    last = reads_from + 3 - 3 + 3 * 16 + T.requant_latency + 3
    assert last > first + 15
    assert paced[True]["load"][0] == last + 1 + GAP
    assert paced[False]["load"][0] == first + 16 + GAP
    assert paced[True]["load"][0] > paced[False]["load"][0]


def test_a_full_dram_queue_lets_a_waiting_read_take_each_slot_as_it_frees():
    """axi_dram.v holds `dram_queue` bursts accepted and not yet served: a STORE of 40 bursts
    fills it, and a LOAD presented meanwhile takes each slot the queue frees before the
    STORE's last 8, so its data comes after the 32 queued writes and the STORE ends after it."""
    assert T.dram_queue == 32
    per = 16 + GAP  # a 16-beat burst and its gap
    later = 40  # the LOAD is presented after the 40 writes would all be up, a cycle each

    def run(timing):
        port = DramPort(timing)
        port.request("store", STORE_CLIENT, [(16, 1)] * 40, at=0)
        port.request("load", LOAD_CLIENT, [(16, 1)] * 5, at=later)
        return {k: (first, free) for k, first, free in _drain(port)}

    queued = run(T)
    assert later + G < L + 16  # but the queue is full until the first write's last beat
    assert queued["load"][0] == L + 32 * per  # the 33rd write waits for the slot, and loses it
    assert queued["store"] == (L, L + 45 * per)
    unbounded = run(dataclasses.replace(T, dram_queue=64))  # the writes' 40 accepted first
    assert unbounded["store"] == (L, L + 40 * per)
    assert unbounded["load"][0] == L + 40 * per
