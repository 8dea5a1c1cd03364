"""The heuristic's ranking: every legal schedule, each with the estimate `estimate` gives it
alone (the per-tiling costs `rank` shares between loop orders and slot counts change no
figure), fastest first, ties in the space's order."""

import pytest

from tilecraft.compiler import schedule as S
from tilecraft.compiler.heuristic import estimate, rank
from tilecraft.compiler.mapping import map_conv2d, map_dense
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d, Dense, Epilogue
from tilecraft.sim.timing import Timing

LAYERS = [
    ("default", Conv2d(1, 64, 56, 56, 64, kernel=3, pad=1), Epilogue(bias=True, shift=8, relu=True)),
    ("default", Conv2d(1, 64, 56, 56, 128, kernel=1, stride=2),
     Epilogue(bias=True, multiplier="channel", shift=17, residual=True)),
    ("1x8x8", Conv2d(4, 3, 17, 13, 20, kernel=(3, 5), stride=(2, 1), pad=(1, 2)),
     Epilogue(multiplier="tensor", shift=9, relu=True)),
]  # fmt: skip


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
