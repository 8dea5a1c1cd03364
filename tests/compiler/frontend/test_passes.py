"""The passes keep a network's meaning (checked against onnxruntime on the original model) and
leave it in the normalised form: BatchNorm folded, Dense, residual and activation fused."""

import numpy as np
import pytest

from tilecraft.compiler.frontend import load_onnx, normalise
from tilecraft.compiler.frontend.evaluate import evaluate
from tilecraft.compiler.frontend.ir import OpType
from tilecraft.compiler.frontend.passes import PASSES
from tilecraft.models.zoo import mobilenet_v2, resnet18

ort = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("build", [resnet18, mobilenet_v2], ids=["resnet18", "mobilenet_v2"])
def test_normalised_graph_computes_what_onnxruntime_does(build):
    model = build(seed=3, size=64)
    x = np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    g = normalise(load_onnx(model))
    got = evaluate(g, {"input": x})[g.outputs[0]]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_resnet18_normal_form():
    g = normalise(load_onnx(resnet18(size=64)))
    ops = [n.op for n in g.nodes]
    assert OpType.BATCHNORM not in ops and OpType.RELU not in ops and OpType.ADD not in ops
    assert ops.count(OpType.CONV) == 20 and ops.count(OpType.DENSE) == 1
    convs = [n for n in g.nodes if n.op is OpType.CONV]
    assert sum(c.attrs.residual for c in convs) == 8
    # every conv with a residual also carries the block's final ReLU
    assert all(c.attrs.clip == (0.0, float("inf")) for c in convs if c.attrs.residual)
    # a downsample block adds its 1x1 shortcut in the 3x3 conv (the larger GEMM, under which
    # the residual's epilogue hides), which the graph moves after the shortcut
    assert [c.attrs.kernel for c in convs if c.attrs.residual] == [(3, 3)] * 8
    order = {n.name: i for i, n in enumerate(g.nodes)}
    producer = g.producer()
    for c in convs:
        if c.attrs.residual and producer[c.inputs[3]].op is OpType.CONV:
            assert order[producer[c.inputs[3]].name] < order[c.name]
    dense = g.nodes[-1]
    assert g.shape(dense.inputs[1]) == (512, 1000)


def test_mobilenet_relu6_and_residuals():
    g = normalise(load_onnx(mobilenet_v2(size=64)))
    convs = [n for n in g.nodes if n.op is OpType.CONV]
    assert len(convs) == 52
    assert sum(c.attrs.clip == (0.0, 6.0) for c in convs) == 35
    assert sum(c.attrs.residual for c in convs) == 10
    assert sum(c.attrs.groups > 1 for c in convs) == 17


def test_passes_are_named_and_ordered():
    names = [n for n, _ in PASSES]
    assert (
        names.index("fold-batchnorm")
        < names.index("fuse-residual")
        < names.index("fuse-activation")
    )
