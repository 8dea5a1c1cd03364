"""ResNet-18 and MobileNetV2 quantized by onnxruntime (its `quant_pre_process`, which folds
BatchNorm, then `quantize_static`: QDQ, per-channel weights, 4 random calibration images), for
int8 and for onnxruntime's default uint8 activations with zero points: compiled by tilecraft
with the model's own scales, integers and Adds (PYNQ-Z1 preset, or --config's), run on the
simulator on one image and compared with onnxruntime's int8 run, logits and every quantized
tensor. It shows what the digits check cannot: how the two runtimes' rounding apart on
near-halves compounds with depth. The same run compiles each variant for the config's twin
with the requantization unit (`HwConfig.with_requant_unit`; the config itself when it has one):
as it is, and with `--requant onnxruntime` (onnxruntime's own float32 requantization, the Adds
on the host as QLinearAdd), whose logits and every tensor are compared again. `float_convs`
counts the convs onnxruntime's optimized graph leaves in float32
(docs/ONNXRUNTIME_ARITHMETIC.md): no integer datapath reproduces those bit for bit."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from tilecraft.benchmarks.host_time import generated_kernels, host_times
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


def _equal_tensors(layers: dict, theirs: dict, shift: int) -> dict[str, float]:
    """Each quantized tensor's share of elements equal to onnxruntime's, by name, from the
    integer reference's tensors `layers` (a run that kept every tensor)."""
    equal = {}
    for name, want in theirs.items():
        got = layers.get(name)
        if got is not None and got.dtype == np.int8 and got.size == want.size:
            equal[name] = float((got.astype(int).reshape(want.shape) + shift == want).mean())
    return equal


def _reference(model, x: np.ndarray):
    """The integer reference's run of `model` on `x`, every tensor kept."""
    return run_model(model, {"input": x}, None, keep=True)


def _run(model, x: np.ndarray, logits: np.ndarray, scale: float, clock_mhz: float) -> tuple:
    """(the simulator's run, its logits' steps from onnxruntime's, its times: the modeled
    latency, the accelerator's part at `clock_mhz` and the host's, warm, measured here on
    the generated host kernels, and on numpy: `benchmarks.host_time`)."""
    run = run_model(model, {"input": x}, get_device("sim"), keep=True)
    ours = run.outputs[model.outputs[0]]
    accelerator_ms = run.accelerator_cycles / (clock_mhz * 1e3)
    host = host_times(model, run, generated_kernels())
    times = {
        "modeled_latency_ms": accelerator_ms + host["host_ms_measured_here"],
        "accelerator_ms": accelerator_ms,
        "host_ms_measured_here": host["host_ms_measured_here"],
        "host_ms_numpy": host["host_ms_numpy"],
    }
    return run, np.abs(np.rint(ours / scale) - np.rint(logits / scale)), times


def _compare(cfg: HwConfig, unit: HwConfig, path: Path, x: np.ndarray, shift: int) -> dict:
    """One variant on `cfg` (its figures), and on `unit` (a config with the requantization
    unit; `cfg` itself when it has one): the same compile's time and logits there, and the
    compile with `--requant onnxruntime` (every rounding onnxruntime's, the Adds on the host
    as QLinearAdd), its logits and every tensor against onnxruntime's."""
    logits, theirs = _tensors(path, x, unsigned=shift != 0)
    graph = import_model(str(path))
    scale = graph.scales[graph.outputs[0]]
    start = time.perf_counter()
    comp = compile_network(graph, cfg, None)
    seconds = time.perf_counter() - start
    _, steps, times = _run(comp.model, x, logits, scale, cfg.clock_mhz)
    floats, convs = _float_convs(path)
    out = {
        "float_convs": floats,
        "convs": convs,
        "programs": len(comp.model.programs),
        **times,
        "compile_seconds": seconds,
        "equal_fraction": float((steps == 0).mean()),
        "max_steps": int(steps.max()),
        "layer_equal_fraction": _equal_tensors(_reference(comp.model, x).tensors, theirs, shift),
    }
    if unit is not cfg:
        model = compile_network(graph, unit, None).model
        _, steps, times = _run(model, x, logits, scale, unit.clock_mhz)
        out["with_unit"] = {
            **times,
            "equal_fraction": float((steps == 0).mean()),
            "max_steps": int(steps.max()),
        }
    exact = compile_network(graph, unit, None, exact_requant="onnxruntime").model
    sim, off, times = _run(exact, x, logits, scale, unit.clock_mhz)
    reference = _reference(exact, x)  # one run: its tensors, and its output for the simulator's
    equal = _equal_tensors(reference.tensors, theirs, shift)
    out["onnxruntime_exact"] = {
        "programs": len(exact.programs),
        "modeled_latency_ms": times["modeled_latency_ms"],
        "modeled_accelerator_ms": times["accelerator_ms"],
        "host_ms_measured_here": times["host_ms_measured_here"],
        "equal_fraction": float((off == 0).mean()),
        "max_steps": int(off.max()),
        "simulator_matches_reference": bool(
            np.array_equal(sim.outputs[exact.outputs[0]], reference.outputs[exact.outputs[0]])
        ),
        "tensors_compared": len(equal),
        "tensors_equal": sum(v == 1.0 for v in equal.values()),
        "worst_tensor_equal_fraction": min(equal.values(), default=None),
    }
    return out


def run(cfg: HwConfig, device: str = "sim") -> dict:
    """Every variant on `cfg` and on its twin with the requantization unit (`cfg` itself when
    it has one), in one run."""
    unit = cfg if cfg.requant_lanes else cfg.with_requant_unit()
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (1, 3, 224, 224)).astype(np.float32)
    variants = {}
    with tempfile.TemporaryDirectory() as tmp:
        for network in NETWORKS:
            for activations, shift in (("int8", 0), ("uint8", 128)):
                path = _quantized(Path(tmp), activations, np.random.default_rng(1), network)
                name = activations if network == "resnet18" else f"{network} {activations}"
                variants[name] = _compare(cfg, unit, path, x, shift)
    return {
        "model": "ResNet-18 and MobileNetV2 quantized by onnxruntime (QDQ, per-channel, "
        "pre-processed)",
        "config": cfg.tag,
        "unit_config": unit.tag,
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
        e, u = v["onnxruntime_exact"], v.get("with_unit", {})
        unit_ms = f"{u['modeled_latency_ms']:.1f}" if u else "-"
        exact.append(
            f"  {name:<20} {unit_ms:>8} {e['programs']:>9} {e['modeled_latency_ms']:>11.1f} "
            f"{e['modeled_accelerator_ms']:>15.1f} {e['equal_fraction']:>13.1%} "
            f"{e['max_steps']:>10} {e['tensors_equal']:>6} of {e['tensors_compared']}"
        )
        eq = list(v["layer_equal_fraction"].values())
        spread = f"{eq[0]:.5f}, {float(np.median(eq)):.4f}, {min(eq):.4f}" if eq else "-"
        floats = f"{v['float_convs']} of {v['convs']}"
        lines.append(
            f"  {name:<20} {v['programs']:>8} {v['modeled_latency_ms']:>11.1f} "
            f"{v['compile_seconds']:>10.1f} {v['equal_fraction']:>13.1%} "
            f"{v['max_steps']:>10} {floats:>12}  {spread}"
        )
    lines += [
        f"  on {r['unit_config']} (the requantization unit): modeled ms; then with --requant "
        "onnxruntime (the Adds on the host as QLinearAdd)",
        f"  {'variant':<20} {'ms':>8} {'programs':>9} {'modeled ms':>11} {'accelerator ms':>15} "
        f"{'logits equal':>13} {'max steps':>10}  tensors equal",
        *exact,
    ]
    return "\n".join(lines)
