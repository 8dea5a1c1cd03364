"""The DRAM arena: tensors alive at the same time never share bytes, the peak is close to the
lower bound, and over the budget is an error naming the bytes."""

import numpy as np
import pytest
from network_models import tiny_resnet

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.arena import ALIGN, Interval, model_arena, plan_arena
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.errors import ModelError
from tilecraft.hw.config import preset


def _check(arena, intervals):
    for a in intervals:
        for b in intervals:
            if a.name < b.name and not (a.last < b.first or b.last < a.first):
                sa, sb = arena.offsets[a.name], arena.offsets[b.name]
                assert sa + a.size <= sb or sb + b.size <= sa, (a, b)
    assert arena.peak_bytes >= arena.lower_bound_bytes


@pytest.mark.parametrize("seed", range(20))
def test_random_lifetimes(seed):
    rng = np.random.default_rng(seed)
    intervals = []
    for k in range(30):
        first = int(rng.integers(0, 40))
        intervals.append(
            Interval(f"t{k}", int(rng.integers(1, 5000)), first, first + int(rng.integers(0, 6)))
        )
    arena = plan_arena(intervals)
    _check(arena, intervals)
    assert all(o % ALIGN == 0 for o in arena.offsets.values())
    assert arena.peak_bytes <= 1.5 * arena.lower_bound_bytes


def test_a_chain_reuses_two_buffers():
    chain = [Interval(f"t{k}", 1024, k, k + 1) for k in range(10)]
    arena = plan_arena(chain)
    assert arena.peak_bytes == arena.lower_bound_bytes == 2048


def test_over_budget_names_the_bytes():
    with pytest.raises(ModelError, match=r"needs 4,096 bytes.*the budget is 1,000 bytes"):
        plan_arena([Interval("a", 4096, 0, 1)], budget=1000)


def test_a_compiled_network_fits_at_the_lower_bound():
    graph = import_model(tiny_resnet())
    model = compile_network(graph, preset("default"), random_calibration(graph, 1)).model
    arena = model_arena(model)
    assert 0 < arena.lower_bound_bytes <= arena.peak_bytes <= 1.25 * arena.lower_bound_bytes
