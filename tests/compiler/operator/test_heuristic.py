"""The heuristic's ranking: every legal schedule, each with the estimate `estimate` gives it
alone (the per-tiling costs `rank` shares between loop orders and slot counts change no
figure), fastest first, ties in the space's order."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilecraft.compiler.mapping.blocks import map_conv2d, map_dense
from tilecraft.compiler.operator import schedule as S
from tilecraft.compiler.operator.heuristic import estimate, rank, slot_misses
from tilecraft.compiler.operator.lowering import SlotCache
from tilecraft.hw.config import preset
from tilecraft.hw.timing import Timing
from tilecraft.ops import Conv2d, ConvSchedule, Dense, Epilogue

LAYERS = [
    (
        "default",
        Conv2d(1, 64, 56, 56, 64, kernel=3, pad=1),
        Epilogue(bias=True, shift=8, relu=True),
    ),
    (
        "default",
        Conv2d(1, 64, 56, 56, 128, kernel=1, stride=2),
        Epilogue(bias=True, multiplier="channel", shift=17, residual=True),
    ),
    (
        "1x8x8",
        Conv2d(4, 3, 17, 13, 20, kernel=(3, 5), stride=(2, 1), pad=(1, 2)),
        Epilogue(multiplier="tensor", shift=9, relu=True),
    ),
]


@pytest.mark.parametrize("config, op, ep", LAYERS)
def test_rank_is_the_plain_estimate_of_every_legal_schedule_sorted(config, op, ep):
    cfg = preset(config)
    low = map_conv2d(cfg, op, ep, False)
    t = Timing.from_config(cfg)
    expected = [(s, estimate(cfg, low, s, t)) for s in S.space(cfg, low)]
    expected.sort(key=lambda pair: pair[1])
    ranked = rank(cfg, low)
    assert [(r.schedule, r.estimate) for r in ranked] == expected
    # the shared costs do separate tilings: the estimates are not all one figure
    assert len({r.estimate for r in ranked}) > len(ranked) // 10


def test_a_dense_layer_ranks_too():
    cfg = preset("default")
    low = map_dense(cfg, Dense(1, 512, 1000), Epilogue(bias=True, shift=8))
    ranked = rank(cfg, low)
    assert ranked and ranked == sorted(ranked, key=lambda r: r.estimate)


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 3),
    ic=st.integers(1, 70),
    oc=st.integers(1, 70),
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    pick=st.integers(0, 10**6),
)
def test_slot_misses_are_the_loads_the_lowering_s_slot_caches_make(n, ic, oc, h, w, pick):
    """The estimate's residency rule against the lowering's own caches walked through the
    lowering's own tile order: every legal schedule's window and weight-tile loads."""
    cfg = preset("2x16x16")
    low = map_conv2d(cfg, Conv2d(2 * n, ic * 4, h, w, oc * 4, kernel=3, pad=1), Epilogue(), False)
    legal = list(S.space(cfg, low))
    s = legal[pick % len(legal)]
    inp, wgt = SlotCache(s.slots), SlotCache(s.slots)
    misses = [0, 0]
    for tile in S.tiles(low, s):
        for ic0, _ in S.ranges(low.icb, s.tile_ic):
            misses[0] += not inp.get((tile.nb, ic0, tile.oh0, tile.toh, tile.ow0, tile.tow))[1]
            misses[1] += not wgt.get((tile.oc0, tile.toc, ic0))[1]
    assert slot_misses(low, s) == tuple(misses), s.describe()


def test_a_tile_s_stores_bound_the_store_stage_with_the_loads_beats():
    """ResNet-18's C4 (1x1, stride 2) with 28-row column tiles stores each channel block as 28
    rows of 16 bytes: four stores a tile keep the store stage (and the DRAM port it shares with
    the loads) busier than the core. The estimate sees it: 41,309 cycles on the cycle model."""
    cfg = preset("default")
    op = Conv2d(1, 64, 56, 56, 128, kernel=1, stride=2)
    low = map_conv2d(cfg, op, Epilogue(shift=8, relu=True), False)
    s = ConvSchedule(4, 4, 28, 1, "spatial_outer", True, 4)
    assert estimate(cfg, low, s, Timing.from_config(cfg)) > 0.95 * 41_309
