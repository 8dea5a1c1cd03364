"""A check against a runtime we did not write: the digits CNN quantized by onnxruntime's own
quantizer (QDQ, per-channel, symmetric int8), compiled by tilecraft with the model's scales
and integers, run on the simulator over the held-out split, and compared with onnxruntime's
own int8 run of the same file: the fraction of int8 logits that are equal and the largest
difference in output steps, for the exact requantization (the default for such a model) and
for the fast one, with the cycles each costs; and the same model quantized with onnxruntime's
defaults (uint8 activations with zero points), exact requantization."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.hw.config import HwConfig
from tilecraft.models.digits import digits_split, quantize_with_onnxruntime
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model

GOAL_EQUAL = 0.99  # of int8 output elements, each within one step


def _quantized(x_train, x, tmp: str, **how):
    """(tilecraft's graph, onnxruntime's int8 logits) of the digits CNN quantized `how`."""
    import onnxruntime as ort

    path = quantize_with_onnxruntime(Path(tmp) / "digits_qdq.onnx", x_train, **how)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    theirs = ort.InferenceSession(str(path), options).run(None, {"input": x})[0]
    return import_model(path, {"input": (len(x), 1, 8, 8)}), theirs


def _compare(cfg, graph, theirs, x, y, device: str, exact: bool) -> dict:
    scale = graph.scales["logits"]
    start = time.perf_counter()
    comp = compile_network(graph, cfg, None, exact_requant=exact)
    seconds = time.perf_counter() - start
    result = run_model(comp.model, {"input": x}, get_device(device))
    ours = result.outputs["logits"]
    steps = np.abs(np.rint(ours / scale) - np.rint(theirs / scale))
    return {
        "equal_fraction": float((steps == 0).mean()),
        "max_steps": int(steps.max()),
        "accuracy": float((ours.argmax(1) == y).mean()),
        "cycles_per_image": result.accelerator_cycles / len(x),
        "compile_seconds": seconds,
    }


def run(cfg: HwConfig, device: str = "sim") -> dict:
    try:
        import onnxruntime  # noqa: F401
    except ImportError as e:  # pragma: no cover - part of the dev extra
        raise ImportError("this check needs onnxruntime: pip install onnxruntime") from e
    x_train, _, x, y = digits_split()
    with tempfile.TemporaryDirectory() as tmp:
        graph, theirs = _quantized(x_train, x, tmp)
        asym_graph, asym_theirs = _quantized(x_train, x, tmp, symmetric=False, activations="uint8")
    modes = {
        name: _compare(cfg, graph, theirs, x, y, device, exact)
        for name, exact in (("exact", True), ("fast", False))
    }
    exact = modes["exact"]
    asym = _compare(cfg, asym_graph, asym_theirs, x, y, device, True)
    asym["onnxruntime_accuracy"] = float((asym_theirs.argmax(1) == y).mean())
    asym["model"] = (
        "the same, quantized with onnxruntime's defaults (uint8 activations with zero points)"
    )
    return {
        "model": "digits_cnn.onnx quantized by onnxruntime (QDQ, per-channel, symmetric int8)",
        "config": cfg.tag,
        "device": device,
        "images": len(x),
        "onnxruntime_accuracy": float((theirs.argmax(1) == y).mean()),
        "onnxruntime_equal_fraction": exact["equal_fraction"],
        "onnxruntime_max_steps": exact["max_steps"],
        "modes": modes,
        "asymmetric": asym,
        "ok": all(m["equal_fraction"] >= GOAL_EQUAL and m["max_steps"] <= 1 for m in (exact, asym)),
    }


def format_table(r: dict) -> str:
    lines = [
        f"{r['model']}",
        f"  on {r['device']} ({r['config']}), {r['images']} held-out images; onnxruntime's "
        f"accuracy {r['onnxruntime_accuracy']:.2%}",
        f"  {'requant':<8} {'equal':>8} {'max steps':>10} {'accuracy':>9} {'cycles/image':>13}",
    ]
    for name, m in r["modes"].items():
        lines.append(
            f"  {name:<8} {m['equal_fraction']:>8.2%} {m['max_steps']:>10} "
            f"{m['accuracy']:>9.2%} {m['cycles_per_image']:>13,.0f}"
        )
    a = r["asymmetric"]
    lines += [
        f"{a['model']}; onnxruntime's accuracy {a['onnxruntime_accuracy']:.2%}",
        f"  {'exact':<8} {a['equal_fraction']:>8.2%} {a['max_steps']:>10} "
        f"{a['accuracy']:>9.2%} {a['cycles_per_image']:>13,.0f}",
    ]
    lines.append(
        f"  goal (both models): >= {GOAL_EQUAL:.0%} of int8 logits equal to "
        f"onnxruntime's, none more than 1 step apart: "
        f"{'met' if r['ok'] else 'NOT met'}"
    )
    return "\n".join(lines)
