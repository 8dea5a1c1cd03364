"""The public workloads the benchmarks use (data/: ResNet-18's conv layers C1-C11, shipped
with the package)."""

from __future__ import annotations

import json
from importlib import resources


def resnet18_layers() -> list[dict]:
    """The 11 distinct conv2d layers of ResNet-18 (C1-C11), batch 1, NCHW."""
    text = resources.files(__package__).joinpath("data/resnet18_conv_layers.json").read_text()
    return json.loads(text)["layers"]


def layer_op(layer: dict):
    """A workload layer as the compiler's Conv2d (batch 1)."""
    from tilecraft.ops import Conv2d

    return Conv2d(
        1,
        layer["IC"],
        layer["H"],
        layer["W"],
        layer["OC"],
        kernel=layer["K"],
        stride=layer["S"],
        pad=layer["P"],
    )
