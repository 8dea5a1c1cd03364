"""ResNet-18 and MobileNetV2 quantized by onnxruntime (its `quant_pre_process`, which folds
BatchNorm, then `quantize_static`: QDQ, per-channel weights, 4 random calibration images), for
int8 and for onnxruntime's default uint8 activations with zero points: compiled by tilecraft
with the model's own scales, integers and Adds (PYNQ-Z1 preset, or --config's: with a
requantization unit, onnxruntime's own float32 requantization), run on the simulator on one
image and compared with onnxruntime's int8 run, logits and every quantized tensor. It shows
what the digits check cannot: how the two runtimes' rounding apart on near-halves compounds
with depth. `float_convs` counts the convs onnxruntime's optimized graph leaves in float32
(docs/ONNXRUNTIME_ARITHMETIC.md): no integer datapath reproduces those bit for bit."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.hw.config import HwConfig
from tilecraft.models.onnxruntime_quant import quantize_with_onnxruntime
from tilecraft.models.zoo import mobilenet_v2, resnet18
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model

PRESET = "pynq-z1"
CALIBRATION = 4


NETWORKS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}


def _quantized(tmp: Path, activations: str, rng, network: str = "resnet18") -> Path:
    samples = [
        {"input": rng.normal(0, 1, (1, 3, 224, 224)).astype(np.float32)} for _ in range(CALIBRATION)
    ]
    model = NETWORKS[network](seed=0)
    return quantize_with_onnxruntime(
        model, tmp / f"{network}_{activations}.onnx", samples, activations=activations
    )


def _float_convs(path: Path) -> tuple[int, int]:
    """(convs onnxruntime's optimized CPU graph runs in float32, all its convs)."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    with tempfile.TemporaryDirectory() as tmp:
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.log_severity_level = 3  # its note on hardware-specific layouts
        ort.InferenceSession(str(path), options)
        ops = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]
    return ops.count("Conv"), ops.count("Conv") + ops.count("QLinearConv")


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
    floats, convs = _float_convs(path)
    out = {
        "float_convs": floats,
        "convs": convs,
        "programs": len(comp.model.programs),
        "modeled_latency_ms": result.accelerator_cycles / (cfg.clock_mhz * 1e3),
        "compile_seconds": seconds,
        "equal_fraction": float((steps == 0).mean()),
        "max_steps": int(steps.max()),
        "layer_equal_fraction": equal,
    }
    if cfg.requant_lanes:  # every rounding onnxruntime's: the Adds on the host as QLinearAdd
        exact = compile_network(graph, cfg, None, exact_requant="onnxruntime").model
        run = run_model(exact, {"input": x}, get_device("sim"))
        mine = run.outputs[graph.outputs[0]]
        off = np.abs(np.rint(mine / scale) - np.rint(logits / scale))
        out["onnxruntime_exact"] = {
            "programs": len(exact.programs),
            "modeled_accelerator_ms": run.accelerator_cycles / (cfg.clock_mhz * 1e3),
            "equal_fraction": float((off == 0).mean()),
            "max_steps": int(off.max()),
        }
    return out


def run(cfg: HwConfig, device: str = "sim") -> dict:
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (1, 3, 224, 224)).astype(np.float32)
    variants = {}
    with tempfile.TemporaryDirectory() as tmp:
        for network in NETWORKS:
            for activations, shift in (("int8", 0), ("uint8", 128)):
                path = _quantized(Path(tmp), activations, np.random.default_rng(1), network)
                name = activations if network == "resnet18" else f"{network} {activations}"
                variants[name] = _compare(cfg, path, x, shift)
    return {
        "model": "ResNet-18 and MobileNetV2 quantized by onnxruntime (QDQ, per-channel, "
        "pre-processed)",
        "config": cfg.tag,
        "device": device,
        "variants": variants,
    }


def format_table(r: dict) -> str:
    lines = [
        f"{r['model']}, on {r['device']} ({r['config']}), one image",
        f"  {'variant':<20} {'programs':>8} {'modeled ms':>11} {'compile s':>10} "
        f"{'logits equal':>13} {'max steps':>10} {'float convs':>12}  tensors equal (first "
        f"conv, median, worst)",
    ]
    exact = []
    for name, v in r["variants"].items():
        e = v.get("onnxruntime_exact")
        if e:
            exact.append(
                f"  {name:<20} {e['programs']:>8} {e['modeled_accelerator_ms']:>11.1f} "
                f"{e['equal_fraction']:>13.1%} {e['max_steps']:>10}"
            )
        eq = list(v["layer_equal_fraction"].values())
        spread = f"{eq[0]:.5f}, {float(np.median(eq)):.4f}, {min(eq):.4f}" if eq else "-"
        floats = f"{v['float_convs']} of {v['convs']}"
        lines.append(
            f"  {name:<20} {v['programs']:>8} {v['modeled_latency_ms']:>11.1f} "
            f"{v['compile_seconds']:>10.1f} {v['equal_fraction']:>13.1%} "
            f"{v['max_steps']:>10} {floats:>12}  {spread}"
        )
    if exact:
        lines.append(
            "  with --requant onnxruntime (the Adds on the host as QLinearAdd): "
            "programs, accelerator ms, logits equal, max steps"
        )
        lines += exact
    return "\n".join(lines)
