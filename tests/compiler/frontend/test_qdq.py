"""A model quantized by onnxruntime (QDQ or QOperator form, per-channel, symmetric int8) runs
through tilecraft with its own scales and integers, and gives onnxruntime's own int8 outputs."""

import numpy as np
import pytest
from tiers import slow

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.frontend.ir import OpType
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.partition import Place, Reason, place
from tilecraft.compiler.quant.quantize import AccelLayer
from tilecraft.errors import ModelError
from tilecraft.hw.config import preset
from tilecraft.models.digits import digits_split, quantize_with_onnxruntime
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")


def _quantize(tmp_path, x_train, symmetric=True, form="qdq"):
    out = tmp_path / f"{form}.onnx"
    return quantize_with_onnxruntime(out, x_train, symmetric=symmetric, form=form)


@pytest.mark.parametrize("form", ["qdq", slow("qoperator", id="qoperator")])
def test_a_model_quantized_by_onnxruntime_gives_its_int8_outputs(tmp_path, form):
    from onnx import load, numpy_helper

    x_train, _, x, y = digits_split()
    path = _quantize(tmp_path, x_train, form=form)
    graph = import_model(path, {"input": (len(x), 1, 8, 8)})
    assert not any(n.op in (OpType.QUANTIZE, OpType.DEQUANTIZE) for n in graph.nodes)
    assert {"input", "a1", "a2", "pool", "a3", "gap", "logits"} <= set(graph.scales)
    # the model rounds conv3's output before the add: the Add stays, with the ReLU fused
    (add,) = [n for n in graph.nodes if n.op is OpType.ADD]
    assert add.inputs[1] == "pool" and add.attrs.clip == (0.0, float("inf"))
    assert place(graph, add) == (Place.ACCELERATOR, Reason.ADD_SCALED)
    comp = compile_network(graph, preset("default"), None)  # the model's scales, no calibration
    # the Add runs inside the convolutions' program (the fc reads the pool's rows in another
    # layout: a second program), nothing of it on the host
    steps = [s.name for s in comp.model.steps]
    assert len(comp.model.programs) == 2 and not any(n.startswith("add") for n in steps), steps
    ints = {t.name: numpy_helper.to_array(t) for t in load(str(path)).graph.initializer}
    keys = {"conv1": "1", "conv2": "2", "conv3": "3", "fc": "d"}
    for layer in comp.network.layers:
        if isinstance(layer, AccelLayer):  # the model's own int8 weights and int32 biases
            k = keys[layer.name.removesuffix("_quant")]
            want = ints[f"w{k}_quantized"]
            np.testing.assert_array_equal(layer.weight, want.T if k == "d" else want)
            np.testing.assert_array_equal(layer.bias, ints[f"b{k}_quantized"])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    theirs = ort.InferenceSession(str(path), so).run(None, {"input": x})[0]
    ours = run_model(comp.model, {"input": x}, get_device("sim")).outputs["logits"]
    acc_theirs, acc_ours = (theirs.argmax(1) == y).mean(), (ours.argmax(1) == y).mean()
    assert acc_ours >= acc_theirs - 0.01, (acc_theirs, acc_ours)
    # the int8 logits themselves: onnxruntime rounds in float32 (QLinearConv, QLinearAdd,
    # QGemm); tilecraft's exact requantization reproduces it on all but a few elements
    scale = graph.scales["logits"]
    steps = np.abs(np.rint(ours / scale) - np.rint(theirs / scale))
    assert steps.max() <= 1, steps.max()
    assert (steps == 0).mean() >= 0.99, (steps == 0).mean()


@pytest.mark.parametrize(
    "activations, form",
    [
        ("uint8", "qdq"),
        slow("int8", "qdq", id="int8-qdq"),
        slow("uint8", "qoperator", id="uint8-qoperator"),
    ],
)
def test_asymmetric_activations_give_onnxruntimes_outputs(tmp_path, activations, form):
    """onnxruntime's default: uint8 activations with zero points (stored less 128 in int8).
    The padding holds the input's zero point, the bias takes its part, the output's is added."""
    x_train, _, x, y = digits_split()
    path = quantize_with_onnxruntime(
        tmp_path / "asym.onnx", x_train, symmetric=False, activations=activations, form=form
    )
    graph = import_model(path, {"input": (len(x), 1, 8, 8)})
    assert len(graph.zero_points) >= 5, graph.zero_points
    comp = compile_network(graph, preset("default"), None)
    conv1 = next(la for la in comp.network.layers if la.name.startswith("conv1"))
    assert conv1.op.pad_value == graph.zero_points["input"] != 0
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    theirs = ort.InferenceSession(str(path), so).run(None, {"input": x})[0]
    ours = run_model(comp.model, {"input": x}, get_device("sim")).outputs["logits"]
    assert (ours.argmax(1) == y).mean() >= (theirs.argmax(1) == y).mean() - 0.01
    scale = graph.scales["logits"]
    steps = np.abs(np.rint(ours / scale) - np.rint(theirs / scale))
    assert steps.max() <= 1, steps.max()
    assert (steps == 0).mean() >= 0.99, (steps == 0).mean()


def test_per_channel_activation_scales_are_named(tmp_path):
    from onnx import helper, load, numpy_helper

    x_train, *_ = digits_split()
    model = load(str(quantize_with_onnxruntime(tmp_path / "q.onnx", x_train, images=4)))
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "a1")
    inits = {t.name: t for t in model.graph.initializer}
    for name, value in (
        (q.input[1], np.full(16, 0.05, np.float32)),
        (q.input[2], np.zeros(16, np.int8)),
    ):
        inits[name].CopyFrom(numpy_helper.from_array(value, name))
    q.attribute.append(helper.make_attribute("axis", 1))
    for dq in model.graph.node:  # its DequantizeLinear shares the scale: per channel too
        if dq.op_type == "DequantizeLinear" and dq.input[1] == q.input[1]:
            dq.attribute.append(helper.make_attribute("axis", 1))
    with pytest.raises(ModelError, match="tensor 'a1' is quantized with 16 scales"):
        import_model(model, {"input": (1, 1, 8, 8)})


def test_a_batchnorm_the_model_rounds_before_is_folded_with_a_warning(tmp_path):
    """onnxruntime quantizes an un-preprocessed model with a Q/DQ pair between each conv and
    its BatchNorm: folding the BatchNorm drops that rounding, and the import says so."""
    import onnx
    from onnxruntime import quantization as q

    from tilecraft.errors import ModelWarning
    from tilecraft.models.onnx_builder import Builder

    b = Builder("bn", 0)
    y = b.conv_bn("input", 3, 8, 3)
    model = b.model("input", (1, 3, 8, 8), y, (1, 8, 8, 8))
    src, out = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, str(src))
    data = iter(
        [
            {"input": np.random.default_rng(i).normal(size=(1, 3, 8, 8)).astype(np.float32)}
            for i in range(2)
        ]
    )

    class Reader(q.CalibrationDataReader):
        def get_next(self):
            return next(data, None)

    q.quantize_static(str(src), str(out), Reader(), quant_format=q.QuantFormat.QDQ)
    assert any(n.op_type == "BatchNormalization" for n in onnx.load(str(out)).graph.node)
    with pytest.warns(ModelWarning, match="1 BatchNormalization node.*quant_pre_process"):
        graph = import_model(out)
    assert not any(n.op is OpType.BATCHNORM for n in graph.nodes)


@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_the_evaluator_and_the_calibrator_round_where_the_model_rounds(tmp_path, activations):
    """The Q/DQ pairs absorb_qdq takes out of the graph stay in its meaning: every tensor the
    model quantizes is, in the float evaluator (and so in calibration), onnxruntime's
    DequantizeLinear output (its session unoptimized, each node as written), to float32
    rounding. With uint8 activations onnxruntime's quantizer drops the ReLUs (the range implies
    them): without the rounding, the evaluator would run the network without them."""
    import onnx
    from network_models import quantized_by_onnxruntime, small_cnn

    from tilecraft.compiler.frontend.evaluate import evaluate
    from tilecraft.compiler.quant.calibrate import calibrate

    path = quantized_by_onnxruntime(small_cnn(), tmp_path / "q.onnx", activations)
    model = onnx.load(str(path))
    graph = import_model(model)
    dq = {n.input[0]: n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    rounded = {
        q.input[0]: dq[q.output[0]]
        for q in model.graph.node
        if q.op_type == "QuantizeLinear" and q.input[0] in graph.scales
    }
    for name in rounded.values():
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, 1, None))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options)
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    theirs = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"input": x})))
    ours = evaluate(graph, {"input": x}, keep_all=True)
    ranges = calibrate(graph, {"input": x})
    rounded = {t: theirs_name for t, theirs_name in rounded.items() if t in ours}  # not fused
    assert len(rounded) >= 5, rounded
    for tensor, their_name in rounded.items():
        step = graph.scales[tensor]
        off = np.abs(ours[tensor] - theirs[their_name]) / step
        assert off.max() <= 2 + 1e-3 and np.mean(off < 0.5) >= 0.99, (tensor, off.max())
        top = float(np.abs(theirs[their_name]).max())
        assert abs(ranges.thresholds[tensor] - top) <= 2 * step, (tensor, top)
