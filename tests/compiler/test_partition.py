"""The partitioner: every MAC of ResNet-18 on the accelerator, host nodes with their reasons."""

import json

import numpy as np
import pytest
from network_models import quantized_by_onnxruntime, small_cnn, tiny_resnet
from tiers import slow

from tilecraft.cli import main
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.partition import (
    Place,
    Reason,
    accelerator_mac_share,
    partition,
    report,
)
from tilecraft.models.onnx_builder import Builder
from tilecraft.models.zoo import mobilenet_v2, resnet18


def test_resnet18_all_macs_on_the_accelerator():
    placements = partition(import_model(resnet18()))
    assert sum(p.macs for p in placements) == 1_814_073_344  # torchvision's 1.82 GMACs
    assert accelerator_mac_share(placements) == 1.0
    host = {p.node: p.reason for p in placements if p.place is Place.HOST}
    assert not host, host  # pooling runs on the ALU; the (N, 512, 1, 1) flatten moves nothing
    assert [p.reason for p in placements if p.op == "Flatten"] == [Reason.FLATTEN_VIEW]


def test_mobilenet_depthwise_goes_to_the_accelerator():
    placements = partition(import_model(mobilenet_v2()))
    depthwise = [p for p in placements if p.reason is Reason.DEPTHWISE]
    assert len(depthwise) == 17 and all(p.place is Place.ACCELERATOR for p in depthwise)
    assert accelerator_mac_share(placements) == 1.0  # the depthwise convs: ~7% of the MACs
    assert "accelerator MAC share 100.00%" in report(placements)


def test_cli_partition(tmp_path, capsys):
    model = tmp_path / "r.onnx"
    assert main(["models", "write", "resnet18", "-o", str(model)]) == 0
    out = tmp_path / "p.json"
    assert main(["partition", str(model), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "accelerator MAC share 100.00%" in text
    data = json.loads(out.read_text())
    assert data["accelerator_mac_share"] == 1.0 and len(data["nodes"]) == 24
    assert main(["partition", str(tmp_path / "none.onnx")]) == 1
    assert "is not a file" in capsys.readouterr().err


def test_a_padded_max_pool_over_signed_values_runs_on_the_accelerator_padding_with_128():
    """Its LOADs pad with -128 (ONNX's -inf): bit-exact with the host kernel's -inf padding."""
    from tilecraft.compiler.graph.network import compile_network
    from tilecraft.compiler.quant.calibrate import random_calibration
    from tilecraft.hw.config import preset
    from tilecraft.models.onnx_builder import Builder
    from tilecraft.ops import host as host_ops
    from tilecraft.runtime import get_device
    from tilecraft.runtime.executor import NumpyKernels, run_model

    b = Builder("signed", 0)
    y = b.conv_bn("input", 3, 16, 3, act=None)  # no ReLU: values may be negative
    pooled = b.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    z = b.node("MaxPool", [b.conv_bn(pooled, 16, 16, 3, act=None)], kernel_shape=[2, 2],
               strides=[2, 2])  # fmt: skip
    graph = import_model(b.model("input", (1, 3, 8, 8), z, (1, 16, 2, 2)))
    pools = [p for p in partition(graph) if p.op == "MaxPool"]
    assert [p.reason for p in pools] == [Reason.POOL_ALU, Reason.POOL_ALU]
    comp = compile_network(
        graph,
        preset("default"),
        random_calibration(graph, 2, seed=0),
        chain=False,
        pools_on_accumulators=False,
    )  # each layer alone: the pool's input is kept
    x = {"input": np.random.default_rng(1).normal(0, 1, (1, 3, 8, 8)).astype(np.float32)}
    run = run_model(comp.model, x, get_device("sim"), keep=True)
    (first,) = [la for la in comp.network.layers if la.name == pools[0].node]
    assert first.op.pad_value == -128
    want = NumpyKernels().run(
        host_ops.MaxPool((3, 3), (2, 2), (1, 1, 1, 1)), [run.tensors[first.input]], {}
    )
    assert (run.tensors[first.input] < 0).any()  # signed values under the padding
    np.testing.assert_array_equal(run.tensors[first.output], want)


def _built(comp) -> dict[str, Place]:
    """Where each node of the compiled graph ended: in an accelerator program, or a host step
    (a node with no layer of its own moved nothing: a flatten read in place)."""
    from tilecraft.runtime.model import HostStep

    host = {s.name for s in comp.model.steps if isinstance(s, HostStep)}
    return {n.name: Place.HOST if n.name in host else Place.ACCELERATOR for n in comp.graph.nodes}


@pytest.mark.parametrize("config", ["default", "1x16x8"])
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(small_cnn, id="small_cnn"),
        pytest.param(lambda: tiny_resnet(depthwise=True), id="tiny_resnet"),
        slow(lambda: mobilenet_v2(size=32), id="mobilenet_v2"),
    ],
)
def test_partition_and_compile_place_every_node_alike(make, config):
    """One placement: what `tilecraft partition --config C` reports is what compile builds."""
    from tilecraft.compiler.graph.network import compile_network
    from tilecraft.compiler.quant.calibrate import random_calibration
    from tilecraft.hw.config import preset

    graph = import_model(make())
    cfg = preset(config)
    comp = compile_network(graph, cfg, random_calibration(graph, 1, seed=0))
    reported = {p.node: p.place for p in partition(graph, cfg)}
    assert reported == _built(comp)


def test_a_flatten_into_a_dense_layer_keeps_the_network_one_program(tmp_path):
    """A CNN whose classifier reads a whole (N, 32, 8, 8) map, quantized by onnxruntime: the
    dense layer reads the map in the blocked layout, its weights in that order, so the network
    is one program, bit-exact with the integer reference and onnxruntime's int8 logits."""
    from tilecraft.compiler.graph.network import compile_network
    from tilecraft.hw.config import preset
    from tilecraft.runtime import get_device
    from tilecraft.runtime.executor import run_model

    ort = pytest.importorskip("onnxruntime")
    path = quantized_by_onnxruntime(small_cnn(), tmp_path / "q.onnx", "int8")
    graph = import_model(str(path))
    (flatten,) = [p for p in partition(graph) if p.op == "Flatten"]
    assert (flatten.place, flatten.reason) == (Place.ACCELERATOR, Reason.FLATTEN_ABSORBED)
    comp = compile_network(graph, preset("default"), None)
    assert len(comp.model.programs) == 1
    assert [type(s).__name__ for s in comp.model.steps] == [
        "HostStep",
        "AcceleratorStep",
        "HostStep",
    ]  # quantize, dequantize
    dense = next(la for la in comp.network.layers if la.name.startswith("gemm"))
    assert dense.op.kernel == (8, 8) and dense.op.output_shape == (1, 10, 1, 1)
    x = np.random.default_rng(0).normal(0, 1, (1, 3, 32, 32)).astype(np.float32)
    ours = run_model(comp.model, {"input": x}, get_device("sim")).outputs[graph.outputs[0]]
    want = run_model(comp.model, {"input": x}, None).outputs[graph.outputs[0]]
    assert ours.shape == (1, 10)
    np.testing.assert_array_equal(ours, want)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    theirs = ort.InferenceSession(str(path), options).run(None, {"input": x})[0]
    step = graph.scales[graph.outputs[0]]
    assert np.abs(np.rint(ours / step) - np.rint(theirs / step)).max() <= 1  # see test_qdq


def test_a_flatten_read_on_the_host_is_the_hosts():
    b = Builder("flat_out", 0)
    y = b.node("Flatten", [b.conv_bn("input", 3, 16, 3)], axis=1)
    graph = import_model(b.model("input", (1, 3, 4, 4), y, (1, 256)))
    (flatten,) = [p for p in partition(graph) if p.op == "Flatten"]
    assert (flatten.place, flatten.reason) == (Place.HOST, Reason.FLATTEN_HOST)
