"""ONNX import: shapes, constants, and every bad input named before anything is built."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tilecraft.compiler.frontend import load_onnx
from tilecraft.compiler.frontend.ir import ConvAttrs, OpType
from tilecraft.errors import ModelError, UnsupportedOperatorError
from tilecraft.models.zoo import resnet18


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _conv_model(batch="N", opset=17):
    w = onnx.numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 4, 4])
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="c", kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1], strides=[2, 2])  # fmt: skip
    return _model([conv], [x], [y], [w], opset)


def test_resnet18_shapes_and_attributes():
    g = load_onnx(resnet18(size=64))
    assert g.inputs == ("input",) and g.shape(g.outputs[0]) == (1, 1000)
    first = g.nodes[0]
    assert first.op is OpType.CONV
    assert first.attrs == ConvAttrs(kernel=(7, 7), stride=(2, 2), pads=(3, 3, 3, 3))
    assert g.shape(first.output) == (1, 64, 32, 32)
    assert sum(n.op is OpType.BATCHNORM for n in g.nodes) == 20


def test_dynamic_dimension_needs_a_shape():
    with pytest.raises(ModelError, match=r"input 'x' has a dynamic dimension 'N' \(axis 0;") as e:
        load_onnx(_conv_model())
    assert "its shape: N,3,8,8); give its shape: --input-shape x=1,3,8,8" in str(e.value)
    g = load_onnx(_conv_model(), {"x": (2, 3, 8, 8)})
    assert g.shape("y") == (2, 4, 4, 4)
    with pytest.raises(ModelError, match=r"names \['z'\], not inputs"):
        load_onnx(_conv_model(), {"z": (1, 3, 8, 8)})
    with pytest.raises(
        ModelError, match=r"fixed dimension 3 at axis 1, not 5 \(its shape: N,3,8,8"
    ):
        load_onnx(_conv_model(), {"x": (1, 5, 8, 8)})


def test_old_opset_is_refused():
    with pytest.raises(ModelError, match="opset 11; tilecraft reads opset 13 and later"):
        load_onnx(_conv_model(batch=1, opset=11))


def test_unsupported_operators_are_all_reported_at_once():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["a"], name="s1"),
        helper.make_node("Relu", ["a"], ["b"], name="r"),
        helper.make_node("Tanh", ["b"], ["y"], name="t1"),
    ]
    with pytest.raises(UnsupportedOperatorError, match="2 unsupported") as info:
        load_onnx(_model(nodes, [x], [y]))
    assert info.value.nodes == [("Sigmoid", "s1", False), ("Tanh", "t1", False)]
    assert "Tanh (node t1): no accelerator mapping, no CPU kernel" in str(info.value)


def test_malformed_and_truncated_files(tmp_path):
    good = tmp_path / "m.onnx"
    good.write_bytes(resnet18(size=32).SerializeToString())
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 3])
    with pytest.raises(ModelError, match="cut.onnx"):
        load_onnx(cut)
    with pytest.raises(ModelError, match="is not a file"):
        load_onnx(tmp_path / "missing.onnx")
    assert load_onnx(good).shape("input") == (1, 3, 32, 32)
