"""A model quantized by onnxruntime (QDQ, per-channel, symmetric int8) runs through tilecraft
with its own scales and integers."""

import numpy as np
import pytest

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.frontend.ir import OpType
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.quantize import AccelLayer
from tilecraft.errors import ModelError
from tilecraft.hw.config import preset
from tilecraft.models.digits import ONNX_PATH, digits_split
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")


def _quantize(tmp_path, x_train, symmetric=True):
    q = quantization

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"input": x_train[i : i + 1]} for i in range(64)])

        def get_next(self):
            return next(self.batches, None)

    out = tmp_path / "qdq.onnx"
    q.quantize_static(str(ONNX_PATH), str(out), Reader(), quant_format=q.QuantFormat.QDQ,
                      per_channel=True, activation_type=q.QuantType.QInt8,
                      weight_type=q.QuantType.QInt8,
                      extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True})
    return out  # fmt: skip


def test_onnxruntime_qdq_model(tmp_path):
    from onnx import load, numpy_helper

    x_train, _, x, y = digits_split()
    path = _quantize(tmp_path, x_train)
    graph = import_model(path, {"input": (len(x), 1, 8, 8)})
    assert not any(n.op in (OpType.QUANTIZE, OpType.DEQUANTIZE) for n in graph.nodes)
    assert {"input", "a1", "a2", "pool", "a3", "gap", "logits"} <= set(graph.scales)
    comp = compile_network(graph, preset("default"), None)  # the model's scales, no calibration
    ints = {t.name: numpy_helper.to_array(t) for t in load(str(path)).graph.initializer}
    names = {"conv1": "w1", "conv2": "w2", "conv3": "w3", "fc": "wd"}
    for layer in comp.network.layers:
        if isinstance(layer, AccelLayer):  # the model's own int8 weights, exactly
            want = ints[names[layer.name] + "_quantized"]
            np.testing.assert_array_equal(layer.weight, want.T if layer.name == "fc" else want)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    theirs = ort.InferenceSession(str(path), so).run(None, {"input": x})[0]
    ours = run_model(comp.model, {"input": x}, get_device("sim")).outputs["logits"]
    acc_theirs, acc_ours = (theirs.argmax(1) == y).mean(), (ours.argmax(1) == y).mean()
    assert acc_ours >= acc_theirs - 0.01, (acc_theirs, acc_ours)


def test_asymmetric_activations_are_named(tmp_path):
    x_train, *_ = digits_split()
    path = _quantize(tmp_path, x_train, symmetric=False)
    with pytest.raises(ModelError, match="tensor 'input' is quantized with zero point"):
        import_model(path, {"input": (1, 1, 8, 8)})
