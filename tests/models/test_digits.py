"""The trained digits CNN: real accuracy, kept through int8 on the accelerator."""

import numpy as np
import pytest

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.frontend.evaluate import evaluate
from tilecraft.compiler.graph.network import compile_network
from tilecraft.hw.config import preset
from tilecraft.models.digits import ONNX_PATH, digits_split
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model


@pytest.fixture(scope="module")
def split():
    return digits_split()


def test_the_committed_model_is_accurate_in_float(split):
    ort = pytest.importorskip("onnxruntime")
    _, _, x, y = split
    logits = ort.InferenceSession(str(ONNX_PATH)).run(None, {"input": x})[0]
    assert (logits.argmax(1) == y).mean() >= 0.98


@pytest.mark.slow
def test_int8_on_sim_is_within_one_point_of_float(split):
    x_train, _, x, y = split
    n = len(x)  # the whole held-out split as one batch
    graph = import_model(ONNX_PATH, {"input": (n, 1, 8, 8)})
    calibration = {"input": x_train[None, :n]}  # one sample: a batch of n training images
    model = compile_network(graph, preset("default"), calibration).model
    # conv, conv, max pool, conv + residual, global average pool in one program; the fc reads
    # its 360 rows in another layout than the pool stores them: a second program
    assert len(model.programs) == 2
    float_acc = (evaluate(graph, {"input": x})["logits"].argmax(1) == y).mean()
    run = run_model(model, {"input": x}, get_device("sim"))
    int8_acc = (run.outputs["logits"].argmax(1) == y).mean()
    assert float_acc >= 0.98
    assert int8_acc >= float_acc - 0.01, (float_acc, int8_acc)
    reference = run_model(model, {"input": x}).outputs["logits"]
    np.testing.assert_array_equal(run.outputs["logits"], reference)
