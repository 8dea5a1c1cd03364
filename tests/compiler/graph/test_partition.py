"""The partitioner: every MAC of ResNet-18 on the accelerator, host nodes with their reasons."""

import json

from tilecraft.cli import main
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.partition import (
    Place,
    Reason,
    accelerator_mac_share,
    partition,
    report,
)
from tilecraft.models.zoo import mobilenet_v2, resnet18


def test_resnet18_all_macs_on_the_accelerator():
    placements = partition(import_model(resnet18()))
    assert sum(p.macs for p in placements) == 1_814_073_344  # torchvision's 1.82 GMACs
    assert accelerator_mac_share(placements) == 1.0
    host = {p.node: p.reason for p in placements if p.place is Place.HOST}
    assert set(host.values()) == {Reason.VIEW}  # pooling runs on the ALU; flatten is a view


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


def test_a_padded_max_pool_over_signed_values_stays_on_the_host():
    from tilecraft.models.onnx_builder import Builder

    b = Builder("signed", 0)
    y = b.conv_bn("input", 3, 16, 3, act=None)  # no ReLU: values may be negative
    y = b.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    z = b.node("MaxPool", [b.conv_bn(y, 16, 16, 3, act=None)], kernel_shape=[2, 2], strides=[2, 2])
    placements = {p.node: p for p in partition(import_model(b.model("input", (1, 3, 8, 8), z,
                                                                     (1, 16, 2, 2))))}  # fmt: skip
    pools = [p for p in placements.values() if p.op == "MaxPool"]
    assert [p.reason for p in pools] == [Reason.POOL_SIGNED, Reason.POOL_ALU]  # padding decides
