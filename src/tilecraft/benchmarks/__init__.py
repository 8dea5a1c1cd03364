"""The suites that produce the performance figures (README.md in this folder lists each figure,
its command and its last measured value). Each suite module has `run(cfg, **options) -> dict`
(the JSON) and `format_table(result) -> str`."""

from __future__ import annotations

import importlib
from types import ModuleType

SUITES = {
    "digits": "digits",
    "resnet18": "resnet18",
    "mobilenet-v2": "mobilenet_v2",
    "resnet18-layers": "resnet18_layers",
    "onnxruntime": "onnxruntime_check",
    "onnxruntime-resnet18": "onnxruntime_resnet18",
    "sim-speed": "sim_speed",
    "rtl-speed": "rtl_speed",
    "resources": "resources",
    "cpu-fallback": "cpu_fallback",
    "gpu-fallback": "gpu_fallback",
    "tuner": "tuner",
}


def suite(name: str) -> ModuleType:
    """The module of benchmark suite `name` (one of `SUITES`)."""
    from tilecraft.errors import TilecraftError

    if name not in SUITES:
        raise TilecraftError(f"unknown suite {name!r}; valid: {', '.join(SUITES)}")
    return importlib.import_module(f"{__name__}.{SUITES[name]}")
