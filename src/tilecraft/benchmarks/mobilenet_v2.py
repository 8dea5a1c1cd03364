"""mobilenet-v2: the whole MobileNetV2 (torchvision's architecture, seeded weights, 224x224) on
the PYNQ-Z1 preset, with the figures and JSON keys of `resnet18`. Its 17 depthwise convs run on
the GEMM core as diagonal weight blocks: the per-layer table shows what that costs."""

from __future__ import annotations

from tilecraft.benchmarks import resnet18 as whole_network
from tilecraft.hw.config import HwConfig

PRESET = whole_network.PRESET
format_table = whole_network.format_table


def run(cfg: HwConfig) -> dict:
    return whole_network.run(cfg, network="mobilenet_v2")
