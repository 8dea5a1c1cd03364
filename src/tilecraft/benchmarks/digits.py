"""The end-to-end flow a newcomer sees first (`make run`): the trained digits CNN from its ONNX
file, partitioned, calibrated on training images, quantized to int8, compiled, and run on the
simulator over the whole held-out split; float against int8 accuracy, the worst layers' error,
cycles and the modeled time per image."""

from __future__ import annotations

import time

import numpy as np

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.frontend.evaluate import evaluate
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.partition import accelerator_mac_share, partition
from tilecraft.compiler.quant.report import LayerError, error_report, format_report
from tilecraft.hw.config import HwConfig
from tilecraft.models.digits import ONNX_PATH, digits_split
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model

CALIBRATION_IMAGES = 256


def run(cfg: HwConfig, device: str = "sim", observer: str = "minmax") -> dict:
    x_train, _, x, y = digits_split()
    n = len(x)
    start = time.perf_counter()
    graph = import_model(ONNX_PATH, {"input": (n, 1, 8, 8)})
    placements = partition(graph)
    calibration = {"input": _batch(x_train, n)}
    comp = compile_network(graph, cfg, calibration, observer=observer)
    compile_seconds = time.perf_counter() - start
    float_logits = evaluate(graph, {"input": x})["logits"]
    start = time.perf_counter()
    result = run_model(comp.model, {"input": x}, get_device(device))
    run_seconds = time.perf_counter() - start
    int8_logits = result.outputs["logits"]
    errors = error_report(graph, comp.model, [{"input": x}])
    cycles = result.accelerator_cycles
    return {
        "model": ONNX_PATH.name,
        "config": cfg.tag,
        "device": device,
        "images": n,
        "float_accuracy": float((float_logits.argmax(1) == y).mean()),
        "int8_accuracy": float((int8_logits.argmax(1) == y).mean()),
        "accelerator_mac_share": accelerator_mac_share(placements),
        "accelerator_cycles": cycles,
        "cycles_per_image": cycles / n,
        "modeled_us_per_image": cycles / n / cfg.clock_mhz,
        "programs": len(comp.model.programs),
        "compile_seconds": compile_seconds,
        "run_seconds": run_seconds,
        "layers": [e.__dict__ for e in errors],
        "ok": bool(
            (int8_logits.argmax(1) == y).mean() >= (float_logits.argmax(1) == y).mean() - 0.01
        ),
    }


def _batch(x_train: np.ndarray, n: int) -> np.ndarray:
    """Calibration samples of the compiled batch size n, from the first training images."""
    count = max(1, CALIBRATION_IMAGES // n)
    reps = -(-count * n // len(x_train))
    pool = np.concatenate([x_train] * reps)[: count * n]
    return pool.reshape(count, n, 1, 8, 8)


def format_table(r: dict) -> str:
    lines = [
        f"{r['model']} on {r['device']} ({r['config']}): {r['images']} held-out images",
        f"  accuracy: float {r['float_accuracy']:.2%}, int8 {r['int8_accuracy']:.2%}",
        f"  accelerator MAC share {r['accelerator_mac_share']:.0%}, {r['programs']} programs, "
        f"{r['cycles_per_image']:,.0f} cycles per image = {r['modeled_us_per_image']:.1f} us "
        "modeled",
        f"  compile {r['compile_seconds']:.1f} s, run {r['run_seconds']:.1f} s",
        "  per-layer error against float (worst first):",
    ]
    rows = [LayerError(**e) for e in r["layers"]]
    lines += ["    " + line for line in format_report(rows).splitlines()]
    return "\n".join(lines)
