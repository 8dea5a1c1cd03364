"""int8 quantization of whole networks: the compiled model on `sim` is bit-exact with the integer
reference on every tensor, and close to the float network."""

import numpy as np
import pytest
from network_models import tiny_resnet

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.frontend.evaluate import evaluate
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import calibrate, check_calibration, random_calibration
from tilecraft.compiler.quant.observers import Observer
from tilecraft.compiler.quant.quantize import AccelLayer, quantize
from tilecraft.errors import ModelError, UnsupportedOperatorError
from tilecraft.hw.config import preset
from tilecraft.ops import DepthwiseConv2d
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model


def _sqnr(ref, got):
    return 10 * np.log10((ref**2).sum() / max(((ref - got) ** 2).sum(), 1e-30))


@pytest.fixture(scope="module")
def compiled():
    graph = import_model(tiny_resnet(depthwise=True))
    return compile_network(graph, preset("1x8x8"), random_calibration(graph, 8, seed=1))


def test_sim_is_bit_exact_with_the_reference_on_every_tensor(compiled):
    x = np.random.default_rng(7).standard_normal((1, 3, 16, 16)).astype(np.float32)
    ref = run_model(compiled.model, {"input": x}, None, keep=True)
    sim = run_model(compiled.model, {"input": x}, get_device("sim"), keep=True)
    assert ref.tensors.keys() >= sim.tensors.keys()  # the reference also shows a chain's inside
    for name, got in sim.tensors.items():
        np.testing.assert_array_equal(got, ref.tensors[name], err_msg=name)
    assert sim.accelerator_cycles > 0
    places = {s.place for s in sim.steps}
    assert places == {"host", "accelerator"}


def test_int8_network_tracks_the_float_one(compiled):
    graph, net = compiled.graph, compiled.network
    rng = np.random.default_rng(11)
    for _ in range(3):
        x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
        want = evaluate(graph, {"input": x})[graph.outputs[0]]
        got = run_model(compiled.model, {"input": x}).outputs[graph.outputs[0]]
        assert _sqnr(want, got) > 18  # random weights, random calibration: ~25 dB here
    accel = [layer for layer in net.layers if isinstance(layer, AccelLayer)]
    assert len(accel) == 8 and sum(layer.residual is not None for layer in accel) == 2
    assert sum(isinstance(layer.op, DepthwiseConv2d) for layer in accel) == 1
    for layer in accel:  # residuals are at the output's scale, as the epilogue adds them
        if layer.residual:
            assert net.tensors[layer.residual].scale == net.tensors[layer.output].scale


def test_exact_requantization_is_bit_exact_on_sim():
    """(Its precision: ops/test_reference.py; its use: the onnxruntime check in test_qdq.py.)"""
    graph = import_model(tiny_resnet())
    calib = random_calibration(graph, 8, seed=1)
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    want = evaluate(graph, {"input": x})[graph.outputs[0]]
    comp = compile_network(graph, preset("1x8x8"), calib, exact_requant=True)
    accel = [lay for lay in comp.network.layers if isinstance(lay, AccelLayer)]
    assert all(lay.epilogue.acc_bounds and lay.epilogue.pre_shift for lay in accel)
    ref = run_model(comp.model, {"input": x}, None, keep=True)
    sim = run_model(comp.model, {"input": x}, get_device("sim"), keep=True)
    for name, got in sim.tensors.items():
        np.testing.assert_array_equal(got, ref.tensors[name], err_msg=name)
    assert _sqnr(want, sim.outputs[graph.outputs[0]]) > 18


def test_a_models_own_scales_must_agree_where_an_operator_shares_one():
    from tilecraft.compiler.frontend.ir import OpType
    from tilecraft.compiler.quant.calibrate import Ranges
    from tilecraft.compiler.quant.quantize import activation_scales

    graph = import_model(tiny_resnet())
    pool = next(n for n in graph.nodes if n.op is OpType.MAXPOOL)
    tensors = [*graph.inputs, *(o for n in graph.nodes for o in n.outputs)]
    thresholds = {t: 1.0 for t in tensors}
    thresholds[pool.output] = 2.0
    with pytest.raises(ModelError, match=f"tensors {pool.inputs[0]!r} .* and {pool.output!r}"):
        activation_scales(graph, Ranges(thresholds, Observer.MODEL, 0))


def test_compiled_model_round_trips(compiled, tmp_path):
    from tilecraft.runtime.model import CompiledModel

    path = compiled.model.save(tmp_path / "m.tcm")
    back = CompiledModel.load(path, preset("1x8x8"))
    x = np.ones((1, 3, 16, 16), np.float32)
    out = compiled.graph.outputs[0]
    np.testing.assert_array_equal(
        run_model(back, {"input": x}).outputs[out],
        run_model(compiled.model, {"input": x}).outputs[out],
    )
    with pytest.raises(Exception, match="compiled for config 1x8x8.*not 1x16x16"):
        CompiledModel.load(path, preset("default"))


@pytest.mark.slow
def test_observers_clip_outliers():
    graph = import_model(tiny_resnet())
    data = random_calibration(graph, 64, seed=2)
    data["input"][0, 0, 0, 0, 0] = 60.0  # one outlier in the input
    tops = {o: calibrate(graph, data, o).thresholds["input"] for o in Observer}
    assert tops[Observer.MINMAX] == pytest.approx(60.0)
    assert tops[Observer.PERCENTILE] < 10 and tops[Observer.ENTROPY] < 30


def test_calibration_data_is_checked():
    graph = import_model(tiny_resnet())
    assert check_calibration(graph, {"input": np.zeros((5, 3, 16, 16))}) == 5
    assert check_calibration(graph, {"input": np.zeros((1, 3, 16, 16))}) == 1
    with pytest.raises(ModelError, match=r"has shape \(5, 3, 8, 8\); expected \(1, 3, 16, 16\)"):
        check_calibration(graph, {"input": np.zeros((5, 3, 8, 8))})
    with pytest.raises(ModelError, match=r"missing \['input'\], unknown \['x'\]"):
        check_calibration(graph, {"x": np.zeros((1, 3, 16, 16))})
    with pytest.raises(ModelError, match="is <U1; expected numbers"):
        check_calibration(graph, {"input": np.full((1, 3, 16, 16), "a")})


def test_nodes_without_an_int8_kernel_are_all_reported():
    from tilecraft.compiler.frontend.ir import OpType

    graph = import_model(tiny_resnet())
    ranges = calibrate(graph, random_calibration(graph, 1))
    nodes = list(graph.nodes)
    soft = nodes[-1].with_(name="sm", op=OpType.SOFTMAX, inputs=nodes[-1].inputs[:1])
    graph = graph.replace(nodes=(*nodes[:-1], soft))
    with pytest.raises(UnsupportedOperatorError, match="(?s)1 node.*Softmax \\(node sm\\)"):
        quantize(graph, ranges)


def test_an_unknown_observer_is_named_with_the_valid_ones():
    graph = import_model(tiny_resnet())
    with pytest.raises(ModelError, match="unknown observer 'bogus'; valid: minmax, percentile"):
        calibrate(graph, random_calibration(graph, 1), "bogus")
