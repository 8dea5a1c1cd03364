"""QONNX models (Brevitas/FINN exports): Quant nodes rewritten in their QDQ form. The reference
is QONNX's own definition of Quant written here in standard ONNX ops (Div, Clip, Round, Mul)
and run by onnxruntime: the rewritten model computes the same, and tilecraft runs it on the
simulator with the model's integers to the same int8 outputs."""

import numpy as np
import pytest

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.frontend.qonnx import expand_quant, has_quant_nodes, int_range
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.quantize import AccelLayer
from tilecraft.errors import ModelError, UnsupportedOperatorError
from tilecraft.hw.config import preset
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
helper, numpy_helper, TP = onnx.helper, onnx.numpy_helper, onnx.TensorProto
QONNX = "qonnx.custom_op.general"
BATCH = 32


def _quant(name, x, y, scale, bits, signed=1, narrow=0, zeropt=0.0, mode="ROUND"):
    """A Quant node and its constant inputs."""
    inits = [
        numpy_helper.from_array(np.asarray(scale, np.float32), f"{name}_s"),
        numpy_helper.from_array(np.asarray(zeropt, np.float32), f"{name}_z"),
        numpy_helper.from_array(np.asarray(float(bits), np.float32), f"{name}_b"),
    ]
    node = helper.make_node(
        "Quant",
        [x, f"{name}_s", f"{name}_z", f"{name}_b"],
        [y],
        name,
        domain=QONNX,
        signed=signed,
        narrow=narrow,
        rounding_mode=mode,
    )
    return node, inits


def _model(act_bits=4, act_signed=0, mode="ROUND", zeropt=0.0, act_scale=0.1037, weight_zeropt=0.0):
    """x -> Quant(int8) -> Conv(4-bit narrow per-channel weights, 32-bit bias) -> Relu ->
    Quant(unsigned 4-bit) -> Conv(8-bit weights) -> Quant(int8) -> GlobalAveragePool ->
    Flatten -> Quant(int8) -> Gemm(transB, 8-bit per-channel) -> Quant(int8)."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
    s1 = (np.abs(w1).reshape(8, -1).max(1) / 6.5).astype(np.float32).reshape(8, 1, 1, 1)
    b1 = rng.normal(0, 0.2, 8).astype(np.float32)
    w2 = rng.normal(0, 0.1, (16, 8, 3, 3)).astype(np.float32)
    w3 = rng.normal(0, 0.2, (10, 16)).astype(np.float32)
    s3 = np.linspace(0.00211, 0.00397, 10).astype(np.float32).reshape(10, 1)
    inits = [
        numpy_helper.from_array(v, k) for k, v in (("w1", w1), ("b1", b1), ("w2", w2), ("w3", w3))
    ]
    quants = [
        _quant("qx", "x", "xq", 0.0291, 8),
        _quant("qw1", "w1", "w1q", s1, 4, narrow=1),
        _quant("qb1", "b1", "b1q", 0.0291 * s1.reshape(8), 32),
        _quant("qa1", "r1", "a1", act_scale, act_bits, signed=act_signed, zeropt=zeropt, mode=mode),
        _quant("qw2", "w2", "w2q", 0.00153, 8, narrow=1, zeropt=weight_zeropt),
        _quant("qa2", "c2", "a2", 0.0517, 8),
        _quant("qf", "f", "fq", 0.0307, 8),
        _quant("qw3", "w3", "w3q", s3, 8),
        _quant("qy", "g", "y", 0.0213, 8),
    ]
    nodes = [
        quants[0][0],
        quants[1][0],
        quants[2][0],
        helper.make_node("Conv", ["xq", "w1q", "b1q"], ["c1"], "conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], "relu1"),
        quants[3][0],
        quants[4][0],
        helper.make_node("Conv", ["a1", "w2q"], ["c2"], "conv2", pads=[1, 1, 1, 1]),
        quants[5][0],
        helper.make_node("GlobalAveragePool", ["a2"], ["p"], "gap"),
        helper.make_node("Flatten", ["p"], ["f"], "flat"),
        quants[6][0],
        quants[7][0],
        helper.make_node("Gemm", ["fq", "w3q"], ["g"], "fc", transB=1),
        quants[8][0],
    ]
    for _, more in quants:
        inits += more
    graph = helper.make_graph(
        nodes,
        "qonnx",
        [helper.make_tensor_value_info("x", TP.FLOAT, [BATCH, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TP.FLOAT, [BATCH, 10])],
        inits,
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid(QONNX, 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _reference(model):
    """QONNX's Quant spelled in standard ops: (Round(clip(x / scale + zeropt, lo, hi)) -
    zeropt) * scale, Round rounding half to even."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    nodes = []
    for n in g.node:
        if n.op_type != "Quant":
            nodes.append(n)
            continue
        a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
        bits = int(numpy_helper.to_array(next(t for t in g.initializer if t.name == n.input[3])))
        lo, hi = int_range(bits, bool(a["signed"]), bool(a["narrow"]))
        g.initializer.extend(
            [
                numpy_helper.from_array(np.float32(lo), f"{n.name}_lo"),
                numpy_helper.from_array(np.float32(hi), f"{n.name}_hi"),
            ]
        )
        nodes += [
            helper.make_node("Div", [n.input[0], n.input[1]], [f"{n.name}_d"]),
            helper.make_node("Add", [f"{n.name}_d", n.input[2]], [f"{n.name}_plus"]),
            helper.make_node(
                "Clip", [f"{n.name}_plus", f"{n.name}_lo", f"{n.name}_hi"], [f"{n.name}_c"]
            ),
            helper.make_node("Round", [f"{n.name}_c"], [f"{n.name}_r"]),
            helper.make_node("Sub", [f"{n.name}_r", n.input[2]], [f"{n.name}_u"]),
            helper.make_node("Mul", [f"{n.name}_u", n.input[1]], [n.output[0]]),
        ]
    del g.node[:]
    g.node.extend(nodes)
    del out.opset_import[:]
    out.opset_import.extend([helper.make_opsetid("", 13)])
    return out


def _run(model, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as defined
    return ort.InferenceSession(model.SerializeToString(), so).run(None, {"x": x})[0]


def _input(seed=1):
    return np.random.default_rng(seed).uniform(-3, 3, (BATCH, 3, 8, 8)).astype(np.float32)


def test_the_rewritten_model_computes_what_qonnx_defines():
    model = _model()
    assert has_quant_nodes(model)
    expanded = expand_quant(model)
    assert not has_quant_nodes(expanded)
    assert [o.domain for o in expanded.opset_import] == [""]
    x = _input()
    want = _run(_reference(model), x)
    np.testing.assert_allclose(_run(expanded, x), want, rtol=1e-5, atol=1e-6)
    assert len(np.unique(np.rint(want / 0.0213))) > 5  # not a constant output


@pytest.mark.parametrize(
    "bits, signed, zeropt",
    [
        (4, 0, 0.0),  # unsigned 4-bit after the ReLU: fits int8 as it is
        (8, 0, 0.0),  # unsigned 8-bit: stored as uint8 less 128
        (8, 1, 9.0),  # int8 with a zero point
    ],
)
def test_tilecraft_runs_it_with_the_models_integers_to_the_same_int8_outputs(bits, signed, zeropt):
    model = _model(act_bits=bits, act_signed=signed, zeropt=zeropt, act_scale=0.1037 * 16 / 2**bits)
    graph = import_model(model)
    conv1 = graph.node("conv1")
    if bits == 4:  # Relu and the 4-bit range's Clip fused: 15 steps
        assert conv1.attrs.clip == pytest.approx((0.0, 15 * 0.1037))
    stored = zeropt - 128 * (not signed and bits == 8)
    assert graph.zero_points.get(conv1.output, 0) == stored
    assert graph.scales["y"] == pytest.approx(0.0213)
    comp = compile_network(graph, preset("default"), None)  # the model's own scales
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    layers = {la.name: la for la in comp.network.layers if isinstance(la, AccelLayer)}
    w1 = np.rint(np.clip(inits["w1"] / inits["qw1_s"], -7, 7))  # 4-bit narrow: QONNX's integers
    np.testing.assert_array_equal(layers["conv1"].weight, w1)
    assert np.abs(layers["conv1"].weight).max() <= 7
    w3 = np.rint(np.clip(inits["w3"] / inits["qw3_s"], -128, 127))
    np.testing.assert_array_equal(layers["fc"].weight, w3.T)
    x = _input()
    want = np.rint(_run(_reference(model), x) / 0.0213)
    ours = np.rint(run_model(comp.model, {"x": x}, get_device("sim")).outputs["y"] / 0.0213)
    steps = np.abs(ours - want)  # the reference runs in float32: a product near a half may
    assert steps.max() <= 1, steps.max()  # round either way there, and moves what follows
    assert (steps == 0).mean() >= 0.99, (steps == 0).mean()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"mode": "FLOOR"}, "node qa1: rounding_mode 'FLOOR' is not read"),
        ({"zeropt": 2.5}, r"node qa1: zero point \[2.5\] is not read"),
        (
            {"act_bits": 9},
            r"node qa1: activation 'r1' is quantized to \[0, 511\] with zero "
            r"point 0, which neither int8 nor uint8 holds",
        ),
        ({"weight_zeropt": 1.0}, "node qw2: weights with zero point 1 are not read"),
        ({"act_scale": [0.1] * 8}, "node qa1: activation 'r1' has 8 scales"),
    ],
)
def test_what_is_not_read_is_named(change, message):
    with pytest.raises(ModelError, match=message):
        import_model(_model(**change))


def test_other_qonnx_operators_are_reported_as_unsupported():
    model = _model()
    node = model.graph.node[-1]
    node.op_type = "BipolarQuant"
    with pytest.raises(UnsupportedOperatorError, match="BipolarQuant"):
        import_model(model)
