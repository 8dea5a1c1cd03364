"""A conv and the max pool that alone reads it, as one layer of a network: merged where the
epilogue never decreases, kept so only where its one program is faster than the two (or the
pool would run on the host), split again otherwise; the network stays bit-exact either way."""

import numpy as np
from network_models import tiny_resnet

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.graph.pooled import keep_faster
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.hw.config import preset
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model
from tilecraft.runtime.model import AcceleratorStep


class _Layer:
    def __init__(self, name):
        self.name = name


def _split(fused_cycles, alone_cycles, pool_cycles, pool_on_host=False, fused_fails=False):
    conv, pool, other = _Layer("c"), _Layer("p"), _Layer("x")
    pairs = {"c+p": (conv, pool)}
    layers = [_Layer("c+p"), other]
    programs = {"c+p": None if fused_fails else "fused", "c": "alone"}
    cycles = {"c+p": fused_cycles, "c": None}
    times = {"alone": alone_cycles, "pool": pool_cycles}
    pools, merged = {}, {"c+p": ("c", "p")}

    def pool_program(layer, moved):
        return None if pool_on_host else "pool"

    out = keep_faster(
        pairs, layers, programs, cycles, pools, pool_program, {}, merged, timer=times.__getitem__
    )
    return [x.name for x in out], programs, pools, merged


def test_the_pair_stays_one_layer_only_where_that_is_faster():
    names, programs, pools, merged = _split(100, 80, 30)
    assert names == ["c+p", "x"] and programs == {"c+p": "fused"} and merged
    names, programs, pools, merged = _split(120, 80, 30)
    assert names == ["c", "p", "x"] and programs == {"c": "alone"} and pools == {"p": "pool"}
    assert merged == {}
    names, *_ = _split(70, 80, 30, pool_on_host=True)  # apart, the host would run the pool
    assert names == ["c+p", "x"]
    names, programs, pools, _ = _split(90, 80, 30, pool_on_host=True)  # which costs no cycles
    assert names == ["c", "p", "x"] and pools == {"p": None}
    names, programs, pools, _ = _split(None, 80, 30, fused_fails=True, pool_on_host=True)
    assert names == ["c", "p", "x"] and pools == {"p": None}  # the host then runs the pool


def test_a_network_merges_its_first_conv_and_pool_where_faster_and_stays_bit_exact():
    graph = import_model(tiny_resnet(seed=3))
    data = random_calibration(graph, 2, seed=3)
    x = {"input": np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    apart = compile_network(graph, preset("default"), data, pools_on_accumulators=False)
    assert apart.merged == {}
    want = run_model(apart.model, x).outputs
    for name in ("default", "1x8x8"):
        comp = compile_network(graph, preset(name), data)
        assert comp.merged == {"conv_2+maxpool_9": ("conv_2", "maxpool_9")}  # fewer cycles
        (step,) = [s for s in comp.model.steps if isinstance(s, AcceleratorStep)]
        assert step.layers[0].computation.pool is not None  # the first layer takes the pool
        got = run_model(comp.model, x, get_device("sim")).outputs
        for k, v in want.items():
            np.testing.assert_array_equal(got[k], v)
