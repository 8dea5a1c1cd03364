"""Float networks on the host's float32 kernels: the same outputs as onnxruntime on the
original model (within 1e-5 of the largest output), every node on a kernel where one exists,
and the nodes without one (a grouped conv) run in numpy and named. A model quantized by
onnxruntime runs fake-quantized, as its QuantizeLinear/DequantizeLinear nodes say."""

import numpy as np
import pytest
from network_models import quantized_by_onnxruntime, small_cnn, tiny_resnet

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.llvm.float_graph import FloatGraph
from tilecraft.errors import ModelError
from tilecraft.models.onnx_builder import Builder
from tilecraft.models.zoo import mobilenet_v2, resnet18

ort = pytest.importorskip("onnxruntime")


def _onnxruntime(model, x):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _grouped_with_softmax():
    b = Builder("grouped", 3)
    y = b.conv_bn("input", 3, 8, 3)
    y = b.conv(y, 8, 8, 3, groups=2)  # neither dense nor depthwise: numpy
    y = b.conv_bn(y, 8, 8, 3, groups=8, act="relu6")  # depthwise with ReLU6
    y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.node("AveragePool", [y], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    y = b.node("Flatten", [b.node("GlobalAveragePool", [y])], axis=1)
    y = b.node("Softmax", [b.dense(y, 8, 5)], axis=-1)
    return b.model("input", (2, 3, 12, 12), y, (2, 5))


@pytest.mark.parametrize(
    "make, shape, numpy_ops",
    [
        (lambda: tiny_resnet(seed=2, depthwise=True), (1, 3, 16, 16), 0),
        (_grouped_with_softmax, (2, 3, 12, 12), 1),
    ],
)
def test_float_network_matches_onnxruntime(jit, make, shape, numpy_ops):
    model = make()
    graph = import_model(model)
    fg = FloatGraph(graph, jit)
    assert len(fg.numpy_nodes) == numpy_ops, fg.numpy_nodes
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = fg.run({"input": x})[graph.outputs[0]]
    want = _onnxruntime(model, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_bad_inputs_are_named(jit):
    fg = FloatGraph(import_model(tiny_resnet()), jit)
    with pytest.raises(ModelError, match=r"input 'input' has shape \(1, 3, 8, 8\)"):
        fg.run({"input": np.zeros((1, 3, 8, 8), np.float32)})
    with pytest.raises(ModelError, match="input 'input' is missing"):
        fg.run({})


def _unoptimized_onnxruntime(path, x):
    """onnxruntime with its graph optimizations off: each QuantizeLinear/DequantizeLinear runs
    as written (with them on it fuses the pairs into int8 kernels: another computation)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _check_fake_quantized(jit, model, path, activations, form="qdq"):
    """The float path of a model quantized by onnxruntime against its unoptimized session:
    the same top-1, and the logits equal but where a float32 sum landed on the other side of
    a rounding boundary than onnxruntime's (one step there, at most 2 after it compounds)."""
    import onnx

    q = quantized_by_onnxruntime(model, path, activations, form=form)
    if activations == "uint8" and form == "qdq":  # the quantizer dropped every ReLU: implied
        assert not any(n.op_type == "Relu" for n in onnx.load(str(q)).graph.node)
    graph = import_model(str(q))
    fg = FloatGraph(graph, jit)
    assert fg.fake_quantized == len(graph.scales) > 0
    x = np.random.default_rng(7).standard_normal(graph.shape("input")).astype(np.float32)
    want = _unoptimized_onnxruntime(q, x)
    got = fg.run({"input": x})[graph.outputs[0]]
    step = graph.scales[graph.outputs[0]]
    assert got.argmax() == want.argmax()
    off = np.abs(got - want) / step
    assert off.max() <= 2 + 1e-3 and np.mean(off < 0.5) >= 0.9, (off.max(), np.mean(off < 0.5))


@pytest.mark.parametrize("form", ["qdq", "qoperator"])
@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_a_quantized_model_runs_as_its_quantization_nodes_say(jit, tmp_path, activations, form):
    """QOperator's QLinearConv rounds where the QDQ form's pairs do: the same check."""
    _check_fake_quantized(jit, small_cnn(), tmp_path / "q.onnx", activations, form)


@pytest.mark.slow
@pytest.mark.parametrize("activations", ["int8", "uint8"])
@pytest.mark.parametrize("make", [resnet18, mobilenet_v2])
def test_zoo_networks_quantized_by_onnxruntime_run_as_onnxruntime(jit, tmp_path, make, activations):
    _check_fake_quantized(jit, make(size=64), tmp_path / "q.onnx", activations)
