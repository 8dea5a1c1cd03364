"""Float networks on the host's float32 kernels: the same outputs as onnxruntime on the
original model (within 1e-5 of the largest output), every node on a kernel where one exists,
and the nodes without one (a grouped conv) run in numpy and named."""

import numpy as np
import pytest
from network_models import tiny_resnet

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.llvm.float_graph import FloatGraph
from tilecraft.errors import ModelError
from tilecraft.models.onnx_builder import Builder

ort = pytest.importorskip("onnxruntime")


def _onnxruntime(model, x):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), options,
                             providers=["CPUExecutionProvider"])  # fmt: skip
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


@pytest.mark.parametrize("make, shape, numpy_ops", [
    (lambda: tiny_resnet(seed=2, depthwise=True), (1, 3, 16, 16), 0),
    (_grouped_with_softmax, (2, 3, 12, 12), 1),
])  # fmt: skip
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
