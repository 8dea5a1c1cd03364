"""The compiled-model artifact and the graph executor refuse what they cannot run."""

import numpy as np
import pytest

from tilecraft.errors import ArtifactError, DeviceError, ModelError
from tilecraft.hw.config import preset
from tilecraft.ops import host as H
from tilecraft.runtime.executor import run_model, steady_host_seconds
from tilecraft.runtime.model import CompiledModel, HostStep, TensorSpec


def _model(steps, tensors=None):
    tensors = tensors or (
        TensorSpec("x", (1, 4), "float32"),
        TensorSpec("q", (1, 4), "int8", 0.5),
        TensorSpec("y", (1, 4), "float32"),
    )
    return CompiledModel("m", preset("default"), ("x",), ("y",), tensors, tuple(steps))


def _host_only():
    return _model(
        [
            HostStep("q", H.Quantize(0.5), ("x",), "q"),
            HostStep("dq", H.Dequantize(0.5), ("q",), "y"),
        ]
    )


def test_a_host_only_model_runs_and_round_trips(tmp_path):
    model = _host_only()
    out = run_model(model, {"x": np.array([[0.2, 0.9, -70.0, 3.0]])}).outputs["y"]
    np.testing.assert_allclose(out, [[0.0, 1.0, -64.0, 3.0]])
    back = CompiledModel.load(model.save(tmp_path / "m.tcm"))
    assert back.steps == model.steps and back.tensors == model.tensors


def test_host_work_is_timed_again_from_a_kept_run():
    model = _host_only()
    x = {"x": np.array([[0.2, 0.9, -70.0, 3.0]])}
    assert 0 < steady_host_seconds(model, run_model(model, x, keep=True), repeats=2) < np.inf
    with pytest.raises(DeviceError, match="keep=True"):
        steady_host_seconds(model, run_model(model, x))


def test_steps_must_read_made_tensors():
    with pytest.raises(ModelError, match=r"step dq reads \['z'\] before any step makes them"):
        _model([HostStep("dq", H.Dequantize(0.5), ("z",), "y")])
    with pytest.raises(ModelError, match="needs constants"):
        _model([HostStep("q", H.Quantize(0.5), ("x",), "q", ("weight",))])


def test_inputs_are_checked():
    model = _host_only()
    with pytest.raises(DeviceError, match=r"expects float \[1, 4\]"):
        run_model(model, {"x": np.zeros((2, 4))})
    with pytest.raises(DeviceError, match=r"missing \['x'\]"):
        run_model(model, {})


def test_a_damaged_file_is_refused(tmp_path):
    path = _host_only().save(tmp_path / "m.tcm")
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(ArtifactError):
        CompiledModel.load(path)


def test_an_input_that_is_not_finite_is_refused():
    """NaN quantized to int8 is whatever the cast gives: the run would print confident
    classes of nothing."""
    for bad in (np.nan, np.inf):
        with pytest.raises(DeviceError, match="input 'x' holds 1 values that are NaN or infinite"):
            run_model(_host_only(), {"x": np.array([[0.2, bad, 1.0, 3.0]])})
