"""The digest of every accelerator program the benchmark networks compile to, as their suites
compile them: ResNet-18 and MobileNetV2 (PYNQ-Z1 preset, 2 random calibration inputs, seed
0), the digits CNN (default preset, its 256 calibration images, batch 360), and the digits CNN
quantized by onnxruntime (int8 and uint8). A change that must not move a figure (a refactor, a
new option off by default) shows the same digests before and after.

    .venv/bin/python scripts/program_hashes.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from tilecraft.boards import resolve_config as preset
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.models.digits import ONNX_PATH, digits_split, quantize_with_onnxruntime
from tilecraft.models.zoo import MODELS


def _digests(comp) -> dict:
    model = comp.model
    return {
        "programs": [p.digest for p in model.programs],
        "steps": [type(s).__name__ for s in model.steps],
    }


def networks() -> dict[str, dict]:
    out = {}
    for name in ("resnet18", "mobilenet_v2"):
        graph = import_model(MODELS[name](seed=0))
        comp = compile_network(graph, preset("pynq-z1"), random_calibration(graph, 2, seed=0))
        out[name] = _digests(comp)
    x_train, _, x, _ = digits_split()
    graph = import_model(ONNX_PATH, {"input": (len(x), 1, 8, 8)})
    from tilecraft.benchmarks.digits import CALIBRATION_IMAGES, _batch

    calibration = {"input": _batch(x_train, len(x))}
    assert CALIBRATION_IMAGES
    out["digits"] = _digests(compile_network(graph, preset("default"), calibration))
    with tempfile.TemporaryDirectory() as tmp:
        for activations in ("int8", "uint8"):
            path = quantize_with_onnxruntime(
                Path(tmp) / f"{activations}.onnx",
                x_train,
                symmetric=activations == "int8",
                activations=activations,
            )
            graph = import_model(path, {"input": (len(x), 1, 8, 8)})
            out[f"digits_onnxruntime_{activations}"] = _digests(
                compile_network(graph, preset("default"), None)
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the digests here")
    args = parser.parse_args()
    found = networks()
    for name, d in found.items():
        print(f"{name}: {len(d['programs'])} programs, {len(d['steps'])} steps")
        for digest in d["programs"]:
            print(f"  {digest}")
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
