"""ResNet-18 quantized by onnxruntime (its `quant_pre_process`, which folds BatchNorm, then
`quantize_static`: QDQ, per-channel weights, 4 random calibration images), for int8 and for
onnxruntime's default uint8 activations with zero points: compiled by tilecraft with the
model's own scales, integers and Adds (PYNQ-Z1 preset), run on the simulator on one image and
compared with onnxruntime's int8 run, logits and every quantized tensor. It shows what the
digits check cannot: how the two runtimes' rounding apart on near-halves compounds with depth
(tilecraft rounds the exact product within 2**-14 of a step, onnxruntime its float32 one)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.hw.config import HwConfig
from tilecraft.models.onnxruntime_quant import quantize_with_onnxruntime
from tilecraft.models.zoo import resnet18
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model

PRESET = "pynq-z1"
CALIBRATION = 4


def _quantized(tmp: Path, activations: str, rng) -> Path:
    samples = [
        {"input": rng.normal(0, 1, (1, 3, 224, 224)).astype(np.float32)} for _ in range(CALIBRATION)
    ]
    return quantize_with_onnxruntime(
        resnet18(seed=0), tmp / f"r18_{activations}.onnx", samples, activations=activations
    )


def _tensors(path: Path, x: np.ndarray, unsigned: bool):
    """onnxruntime's logits and the int8 (or uint8) value of every quantized tensor, by the
    float tensor's name."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    names = [n.output[0] for n in model.graph.node if n.op_type == "QuantizeLinear"]
    elem = onnx.TensorProto.UINT8 if unsigned else onnx.TensorProto.INT8
    for name in names:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, elem, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options)
    values = session.run(None, {"input": x})
    out = dict(zip([o.name for o in session.get_outputs()], values))
    return values[0], {n.removesuffix("_QuantizeLinear_Output"): out[n] for n in names}


def _compare(cfg: HwConfig, path: Path, x: np.ndarray, shift: int) -> dict:
    logits, theirs = _tensors(path, x, unsigned=shift != 0)
    graph = import_model(str(path))
    start = time.perf_counter()
    comp = compile_network(graph, cfg, None)
    seconds = time.perf_counter() - start
    result = run_model(comp.model, {"input": x}, get_device("sim"))
    ours = result.outputs[graph.outputs[0]]
    scale = graph.scales[graph.outputs[0]]
    steps = np.abs(np.rint(ours / scale) - np.rint(logits / scale))
    layers = run_model(comp.model, {"input": x}, None, keep=True).tensors  # the reference
    equal = {}
    for name, want in theirs.items():
        got = layers.get(name)
        if got is not None and got.dtype == np.int8 and got.size == want.size:
            equal[name] = float((got.astype(int).reshape(want.shape) + shift == want).mean())
    return {
        "programs": len(comp.model.programs),
        "modeled_latency_ms": result.accelerator_cycles / (cfg.clock_mhz * 1e3),
        "compile_seconds": seconds,
        "equal_fraction": float((steps == 0).mean()),
        "max_steps": int(steps.max()),
        "layer_equal_fraction": equal,
    }


def run(cfg: HwConfig, device: str = "sim") -> dict:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (1, 3, 224, 224)).astype(np.float32)
    variants = {}
    with tempfile.TemporaryDirectory() as tmp:
        for activations, shift in (("int8", 0), ("uint8", 128)):
            path = _quantized(Path(tmp), activations, np.random.default_rng(1))
            variants[activations] = _compare(cfg, path, x, shift)
    return {
        "model": "ResNet-18 quantized by onnxruntime (QDQ, per-channel, pre-processed)",
        "config": cfg.tag,
        "device": device,
        "variants": variants,
    }


def format_table(r: dict) -> str:
    lines = [
        f"{r['model']}, on {r['device']} ({r['config']}), one image",
        f"  {'activations':<12} {'programs':>8} {'modeled ms':>11} {'compile s':>10} "
        f"{'logits equal':>13} {'max steps':>10}  tensors equal (first conv, median, "
        f"worst)",
    ]
    for name, v in r["variants"].items():
        eq = list(v["layer_equal_fraction"].values())
        spread = f"{eq[0]:.5f}, {float(np.median(eq)):.4f}, {min(eq):.4f}" if eq else "-"
        lines.append(
            f"  {name:<12} {v['programs']:>8} {v['modeled_latency_ms']:>11.1f} "
            f"{v['compile_seconds']:>10.1f} {v['equal_fraction']:>13.1%} "
            f"{v['max_steps']:>10}  {spread}"
        )
    return "\n".join(lines)
