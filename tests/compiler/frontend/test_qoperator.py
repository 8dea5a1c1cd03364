"""onnxruntime's QOperator nodes rewritten in their QDQ form: onnxruntime runs the rewritten
model to the same outputs, and tilecraft imports it."""

import numpy as np
import pytest

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.frontend.ir import OpType
from tilecraft.compiler.frontend.qoperator import expand_qoperators, has_qoperators
from tilecraft.errors import ModelError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
helper, numpy_helper, TP = onnx.helper, onnx.numpy_helper, onnx.TensorProto


def _init(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _model(channels_last=0):
    """x -> QuantizeLinear -> QLinearGlobalAveragePool -> Flatten -> QLinearMatMul (per-column
    weight scales) -> DequantizeLinear."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (6, 4), dtype=np.int8)
    inits = [
        _init("xs", np.float32(0.05)),
        _init("xz", np.int8(0)),
        _init("ps", np.float32(0.02)),
        _init("pz", np.int8(0)),
        _init("w", w),
        _init("ws", np.linspace(0.01, 0.02, 4).astype(np.float32)),
        _init("wz", np.zeros(4, np.int8)),
        _init("ys", np.float32(0.3)),
        _init("yz", np.int8(0)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], "q"),
        helper.make_node(
            "QLinearGlobalAveragePool",
            ["xq", "xs", "xz", "ps", "pz"],
            ["pq"],
            "gap",
            domain="com.microsoft",
            channels_last=channels_last,
        ),
        helper.make_node("Flatten", ["pq"], ["fq"], "flat"),
        helper.make_node(
            "QLinearMatMul", ["fq", "ps", "pz", "w", "ws", "wz", "ys", "yz"], ["yq"], "mm"
        ),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], "dq"),
    ]
    graph = helper.make_graph(
        nodes,
        "qop",
        [helper.make_tensor_value_info("x", TP.FLOAT, [2, 6, 3, 3])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [2, 4])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def test_the_rewritten_model_runs_to_the_same_outputs_in_onnxruntime():
    model = _model()
    assert has_qoperators(model)
    expanded = expand_qoperators(model)
    assert not has_qoperators(expanded)
    assert not any(n.domain == "com.microsoft" for n in expanded.graph.node)
    assert [o.domain for o in expanded.opset_import] == [""]
    x = np.random.default_rng(1).uniform(-4, 4, (2, 6, 3, 3)).astype(np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    run = [
        ort.InferenceSession(m.SerializeToString(), so).run(None, {"x": x})[0]
        for m in (model, expanded)
    ]
    np.testing.assert_array_equal(run[0], run[1])
    graph = import_model(model)
    assert [n.op for n in graph.nodes] == [OpType.GLOBALAVGPOOL, OpType.FLATTEN, OpType.DENSE]
    assert graph.scales["x"] == pytest.approx(0.05) and graph.scales["y"] == pytest.approx(0.3)


def test_a_channels_last_pool_is_named():
    with pytest.raises(ModelError, match="node gap: a channels-last QLinearGlobalAveragePool"):
        import_model(_model(channels_last=1))
