"""Graphs that once broke the whole-network flow (found in review): each now compiles and runs
bit-exact on sim, or stays on the host with a reason."""

import numpy as np
import pytest

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.hw.config import preset
from tilecraft.models.onnx_builder import Builder
from tilecraft.ops import GlobalAvgPool2d
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model


def _check(model, shape):
    graph = import_model(model)
    comp = compile_network(
        graph, preset("default"), random_calibration(graph, 2, seed=1), measure=1
    )
    x = {"input": np.random.default_rng(9).standard_normal(shape).astype(np.float32)}
    out = graph.outputs[0]
    sim = run_model(comp.model, x, get_device("sim")).outputs[out]
    np.testing.assert_array_equal(sim, run_model(comp.model, x).outputs[out])
    return comp, sim


def test_one_input_read_in_two_layouts():
    """A 3x1 and a 1x3 conv of the same input (both folded, each its own packing)."""
    b = Builder("factorised", 0)
    wa = b.const("w", b.rng.normal(0, 0.5, (16, 3, 3, 1)).astype(np.float32))
    wb = b.const("w", b.rng.normal(0, 0.5, (16, 3, 1, 3)).astype(np.float32))
    a = b.node("Relu", [b.node("Conv", ["input", wa], kernel_shape=[3, 1], pads=[1, 0, 1, 0])])
    c = b.node("Conv", ["input", wb], kernel_shape=[1, 3], pads=[0, 1, 0, 1])
    y = b.node("Relu", [b.node("Add", [a, c])])
    _check(b.model("input", (1, 3, 8, 8), y, (1, 16, 8, 8)), (1, 3, 8, 8))


def test_a_pooled_shortcut_listed_after_the_conv():
    b = Builder("shortcut", 0)
    x = b.conv_bn("input", 3, 16, 3)
    conv = b.conv(x, 16, 16, 3)
    pool = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    y = b.node("Relu", [b.node("Add", [conv, pool])])
    _check(b.model("input", (1, 3, 8, 8), y, (1, 16, 8, 8)), (1, 3, 8, 8))


def test_a_flattened_pool_added_on_the_host_keeps_its_shape():
    b = Builder("view", 0)
    x = b.conv_bn("input", 3, 16, 3)
    flat = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    y = b.node("Add", [flat, b.dense(flat, 16, 16)])
    comp, out = _check(b.model("input", (1, 3, 8, 8), y, (1, 16)), (1, 3, 8, 8))
    assert out.shape == (1, 16)


def test_a_pool_too_large_for_the_scratchpads_runs_on_the_host():
    from tilecraft.compiler.quant.quantize import PoolLayer
    from tilecraft.runtime.model import HostStep

    b = Builder("big", 0)
    y = b.node(
        "MaxPool",
        [b.conv_bn("input", 3, 16, 3)],
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
    )  # 3 rows of 402: more than an input slot
    graph = import_model(b.model("input", (1, 3, 20, 400), y, (1, 16, 10, 200)))
    data = random_calibration(graph, 1)
    comp = compile_network(graph, preset("default"), data, measure=1, pools_on_accumulators=False)
    assert any(isinstance(layer, PoolLayer) for layer in comp.network.layers)
    assert any(isinstance(s, HostStep) and s.op.kind == "maxpool" for s in comp.model.steps)
    # taken on the conv's accumulators instead, in tiles of the columns: on the accelerator
    fused = compile_network(graph, preset("default"), data, measure=1)
    assert not any(isinstance(s, HostStep) and s.op.kind == "maxpool" for s in fused.model.steps)
    x = {"input": np.random.default_rng(3).standard_normal((1, 3, 20, 400)).astype(np.float32)}
    ours = run_model(fused.model, x, get_device("sim")).outputs[y]
    np.testing.assert_array_equal(ours, run_model(comp.model, x).outputs[y])


def test_chained_identities_and_a_row_bias():
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    bias = numpy_helper.from_array(np.ones((1, 3), np.float32), "b")
    nodes = [
        helper.make_node("Identity", ["x"], ["y"]),
        helper.make_node("Identity", ["y"], ["z"]),
        helper.make_node("Gemm", ["z", "w", "b"], ["o"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, [2, 3])],
        [w, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    g = import_model(model)
    assert [n.op.value for n in g.nodes] == ["Dense"]


@pytest.mark.parametrize(
    "op",
    [
        GlobalAvgPool2d(2, 24, 5, 7, 3001, 15, 4, -9, pre_shift=3, weight=5),
        GlobalAvgPool2d(2, 24, 5, 7, 1, 0, 4, -9, scale=0.0119),
    ],
    ids=["fixed-point", "float32"],
)
def test_a_pool_moved_to_the_host_keeps_its_integers(op):
    """A global average pool the accelerator cannot take runs on the host with its zero
    points, its GEMM weight, both shifts, or its float32 scale: the reference's result."""
    from tilecraft.compiler.graph.network import _host_pool
    from tilecraft.compiler.quant.quantize import PoolLayer
    from tilecraft.ops import host as H
    from tilecraft.ops import reference as R

    host = _host_pool(PoolLayer("gap", op, "x", "y"))
    x = np.random.default_rng(3).integers(-128, 128, op.input_shape).astype(np.int8)
    want = R.global_avgpool2d(op, x)
    assert np.array_equal(H.run(host.op, [x], {}), want)
    assert len(np.unique(want)) > 10
