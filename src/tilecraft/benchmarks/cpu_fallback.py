"""cpu-fallback: the generated host kernels against numpy and onnxruntime, one thread each,
same process (benchmarks/README.md). Cases: the 3x3 64->64 conv at 56x56 and ResNet-18's 1x1
downsampling conv (float32 and int8), dense 512->1000, ResNet-18's max pool and global average
pool, the NCHW <-> blocked layout transforms, float ResNet-18 and MobileNetV2 whole, and the
same networks quantized by onnxruntime run whole on the `cpu` device (`QUANTIZED`). Each
time is the best of `repeats` warm runs; every result is checked against numpy's (int8
bit-exact, float32 within 1e-5 relative). On an AVX-512 host the convs are also timed as an
AVX2-only CPU would run them (x86-64-v3 code; numpy and onnxruntime keep AVX-512).

numpy's int8 baseline is the fastest exact one: im2col and a float64 BLAS product (exact for
these sums), then the integer epilogue. onnxruntime runs QLinearConv/QLinearMatMul for int8.

The ARM builds (Cortex-A9 for PYNQ-Z1/Z2, Cortex-A53 for the UltraScale+ boards) are timed, and
a smaller conv and the dense layer are run under emulation to count instructions per MAC:
ARM time itself cannot be measured here."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass

import numpy as np

from tilecraft.benchmarks import cpu_cases
from tilecraft.compiler.llvm.jit import Jit
from tilecraft.compiler.llvm.kernels.dot_conv import for_target
from tilecraft.compiler.llvm.targets import X86_64
from tilecraft.hw.config import HwConfig
from tilecraft.progress import track

PRESET = "default"  # unused: the host kernels do not depend on the accelerator's config


@dataclass
class Timing:
    ours_ms: float
    numpy_ms: float
    onnxruntime_ms: float | None


def _best(repeats: int, fn, *args) -> float:
    fn(*args)  # warm
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def _best_pair(repeats: int, ours, theirs) -> tuple[float, float]:
    """The best of `repeats` runs of each, ms, taken in turn (ours, theirs, ours, ...): a
    machine whose speed drifts over seconds moves both alike, not one of them."""
    ours(), theirs()  # warm
    best = [float("inf"), float("inf")]
    for _ in range(repeats):
        for k, fn in enumerate((ours, theirs)):
            start = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - start)
    return best[0] * 1e3, best[1] * 1e3


NETWORKS = ("resnet18", "mobilenet_v2")


def _network(jit, name: str, repeats: int) -> dict:
    """A zoo network in float on the kernels (`FloatGraph`), against onnxruntime on the ONNX
    model (each timed in turn with ours, `_best_pair`) and the numpy evaluator (float64, one
    run: it takes seconds)."""
    from tilecraft.benchmarks.cpu_onnx import session
    from tilecraft.compiler.frontend import import_model
    from tilecraft.compiler.frontend.evaluate import evaluate
    from tilecraft.compiler.llvm.float_graph import FloatGraph
    from tilecraft.models.zoo import MODELS

    model = MODELS[name](seed=0)
    graph = import_model(model)
    x = {
        graph.inputs[0]: np.random.default_rng(0)
        .standard_normal(graph.shape(graph.inputs[0]))
        .astype(np.float32)
    }
    start = time.perf_counter()
    net = FloatGraph(graph, jit)
    build = time.perf_counter() - start
    ours = net.run(x)[graph.outputs[0]]
    start = time.perf_counter()
    want = evaluate(graph, x)[graph.outputs[0]]
    numpy_ms = (time.perf_counter() - start) * 1e3
    ort = session(model)
    if ort:
        ours_ms, ort_ms = _best_pair(repeats, lambda: net.run(x), lambda: ort(x))
    else:
        ours_ms, ort_ms = _best(repeats, net.run, x), None
    return {
        "name": f"{name}_network",
        "dtype": "float32",
        "ours_ms": ours_ms,
        "numpy_ms": numpy_ms,
        "onnxruntime_ms": ort_ms,
        "build_ms": build * 1e3,
        "matches_numpy": cpu_cases._close(ours, want),
        "macs": 0,
        "numpy_nodes": net.numpy_nodes,
    }


QUANTIZED = (("resnet18", "int8"), ("resnet18", "uint8"), ("mobilenet_v2", "int8"))
CALIBRATION = 4  # random images onnxruntime's quantizer calibrates on

# The PYNQ-Z1/Z2's host, for an estimate of its time (no Cortex-A9 is at hand to measure):
# the instructions per MAC of its own int8 conv kernel counted under emulation, times a
# network's MACs, at this clock and rate.
A9 = {
    "clock_mhz": 650,
    "clock_source": "PYNQ-Z1 reference manual (Digilent): 650 MHz dual-core Cortex-A9",
    "instructions_per_cycle": 1.0,
    "ipc_source": (
        "assumed: one instruction a cycle on one core; likely optimistic, since the A9's "
        "NEON unit works 64 bits a cycle, so an operation on 128-bit q registers takes two "
        "(Cortex-A9 NEON Media Processing Engine TRM, ARM DDI 0409, instruction timing), and "
        "a load that misses the caches stalls it"
    ),
    "kernel": "conv3x3_64to64_14x14_int8",
    "weights_source": (
        "the conv's weights in [-127, 127], as the symmetric quantizers that make the "
        "networks' weights give them (tilecraft's, onnxruntime's): the kernel adds two words' "
        "products in 16 bits; a weight of -128 would take the single words (0.45 instructions "
        "per MAC)"
    ),
}


def _quantized_network(jit, name: str, activations: str, repeats: int, tmp: str) -> dict:
    """A zoo network quantized by onnxruntime (QDQ, per-channel weights; int8 or uint8
    activations), compiled by tilecraft and run whole on the `cpu` device (its accelerator
    steps and host steps on the kernels), against onnxruntime's session on the same file (each
    timed in turn with ours, `_best_pair`) and the numpy reference (`ops.reference`, one
    run); ours must match the reference bit for bit. `first_run_s`: the first run, every
    kernel JIT-compiled (an empty kernel cache)."""
    from pathlib import Path

    import onnxruntime as ort

    from tilecraft.compiler.frontend import import_model
    from tilecraft.compiler.graph.network import compile_network
    from tilecraft.compiler.llvm.compute import JitCompute
    from tilecraft.compiler.llvm.host import LlvmKernels
    from tilecraft.hw.config import preset
    from tilecraft.models.onnxruntime_quant import quantize_with_onnxruntime
    from tilecraft.models.zoo import MODELS
    from tilecraft.runtime.cpu import CpuDevice
    from tilecraft.runtime.executor import run_model

    rng = np.random.default_rng(1)
    model = MODELS[name](seed=0)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feed = model.graph.input[0].name
    samples = [{feed: rng.standard_normal(shape).astype(np.float32)} for _ in range(CALIBRATION)]
    path = quantize_with_onnxruntime(
        model, Path(tmp) / f"{name}_{activations}.onnx", samples, activations=activations
    )
    graph = import_model(str(path))
    compiled = compile_network(graph, preset(PRESET), None).model
    x = {feed: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    device, host = CpuDevice(JitCompute(jit)), LlvmKernels(jit)
    start = time.perf_counter()
    ours = run_model(compiled, x, device, host=host).outputs
    first = time.perf_counter() - start
    start = time.perf_counter()
    want = run_model(compiled, x, None).outputs
    numpy_ms = (time.perf_counter() - start) * 1e3
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    ours_ms, onnxruntime_ms = _best_pair(
        repeats, lambda: run_model(compiled, x, device, host=host), lambda: session.run(None, x)
    )
    return {
        "name": f"{name}_network",
        "dtype": activations,
        "ours_ms": ours_ms,
        "numpy_ms": numpy_ms,
        "onnxruntime_ms": onnxruntime_ms,
        "first_run_s": first,
        "matches_numpy": all(np.array_equal(ours[k], want[k]) for k in want),
        "macs": _macs(compiled),
    }


def _macs(compiled) -> int:
    """The multiply-accumulates of a compiled model's convs and dense layers."""
    from tilecraft.ops import operators as O

    kinds = (O.Conv2d, O.DepthwiseConv2d, O.Dense)
    return sum(c.op.macs for c in compiled.computations() if isinstance(c.op, kinds))


def a9_estimate(rows: list[dict], arm: list[dict]) -> dict | None:
    """The quantized networks' estimated time on a PYNQ-Z1's Cortex-A9 (`A9`: its int8 conv
    kernel's emulated instructions per MAC x the network's MACs, at its clock and rate)."""
    counted = [
        e["instructions_per_mac"]
        for a in arm
        if a["target"] == "armv7"
        for e in a.get("emulated", [])
        if e["name"] == A9["kernel"]
    ]
    if not counted:
        return None
    per_second = A9["clock_mhz"] * 1e6 * A9["instructions_per_cycle"]
    networks = {
        f"{r['name']} ({r['dtype']})": {
            "macs": r["macs"],
            "estimate_ms": counted[0] * r["macs"] / per_second * 1e3,
        }
        for r in rows
        if r["name"].endswith("_network") and r["dtype"] != "float32" and r["macs"]
    }
    return {**A9, "instructions_per_mac": counted[0], "networks": networks}


def run(
    cfg: HwConfig | None = None, repeats: int = 7, emulate: bool = True, networks: bool = True
) -> dict:
    from tilecraft.compiler.llvm.cache import KernelCache

    limits = _one_thread()
    with tempfile.TemporaryDirectory(prefix="tilecraft-bench-") as tmp:
        jit = Jit(KernelCache(tmp))
        avx2 = Jit(KernelCache(tmp), target=X86_64) if jit.target.vector_width > 8 else None
        rows, specs = [], []
        for case in track(cpu_cases.CASES, "cpu-fallback cases"):
            made = case.make(np.random.default_rng(0))
            start = time.perf_counter()
            kernel = jit.kernel(for_target(made.spec, jit.target))  # what the cpu device runs
            build = time.perf_counter() - start
            ours = kernel(*made.inputs)
            ok = made.check(ours, made.numpy(*made.inputs))
            ort = made.onnxruntime()
            rows.append(
                {
                    "name": case.name,
                    "dtype": case.dtype,
                    "ours_ms": _best(repeats, kernel, *made.inputs),
                    "numpy_ms": _best(repeats, made.numpy, *made.inputs),
                    "onnxruntime_ms": _best(repeats, ort) if ort else None,
                    "build_ms": build * 1e3,
                    "matches_numpy": ok,
                    "macs": made.macs,
                }
            )
            if avx2 is not None and case.name.startswith("conv"):  # what an AVX2 CPU runs
                narrow = avx2.kernel(made.spec)
                rows[-1]["matches_numpy"] &= made.check(
                    narrow(*made.inputs), made.numpy(*made.inputs)
                )
                rows[-1]["ours_avx2_ms"] = _best(repeats, narrow, *made.inputs)
            specs.append(made.spec)
        if networks:
            rows += [
                _network(jit, name, max(1, repeats // 2))
                for name in track(NETWORKS, "cpu-fallback networks")
            ]
            rows += [  # 2 x repeats pairs: a run is ~10 ms, and its spread is ~10%
                _quantized_network(Jit(KernelCache(f"{tmp}/{name}_{acts}")), name, acts,
                                   2 * repeats, tmp)
                for name, acts in track(QUANTIZED, "cpu-fallback int8 networks")
            ]  # fmt: skip
        arm = cpu_cases.arm_builds(specs, tmp, emulate)
    if limits is not None:
        limits.unregister()
    for r in rows:
        r["vs_numpy"] = r["ours_ms"] / r["numpy_ms"]
        r["vs_onnxruntime"] = r["ours_ms"] / r["onnxruntime_ms"] if r["onnxruntime_ms"] else None
    convs = [r for r in rows if r["name"].startswith("conv")]
    nets = [r for r in rows if r["name"].endswith("_network")]
    quantized = [r for r in nets if r["dtype"] != "float32"]
    return {
        "suite": "cpu-fallback",
        "host_cpu": jit.target.cpu,
        "vector_width": jit.target.vector_width,
        "threads": 1,
        "cases": rows,
        "conv_max_vs_numpy": max(r["vs_numpy"] for r in convs),
        "conv_max_vs_onnxruntime": max(
            r["vs_onnxruntime"] for r in convs if r["vs_onnxruntime"] is not None
        ),
        "network_max_vs_onnxruntime": max(
            (r["vs_onnxruntime"] for r in nets if r["vs_onnxruntime"]), default=None
        ),
        "int8_network_max_vs_onnxruntime": max(
            (r["vs_onnxruntime"] for r in quantized), default=None
        ),
        "int8_network_first_run_s": max((r["first_run_s"] for r in quantized), default=None),
        "a9_estimate": a9_estimate(rows, arm),
        "arm": arm,
        "ok": all(r["matches_numpy"] for r in rows) and all(a.get("ok", True) for a in arm),
    }


def _one_thread():
    """numpy's BLAS limited to one thread for the run (threadpoolctl, if installed)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    return threadpool_limits(1)


def format_table(r: dict) -> str:
    lines = [
        f"{'case':28s} {'dtype':8s} {'ours ms':>9s} {'numpy ms':>9s} {'ORT ms':>8s} "
        f"{'/numpy':>7s} {'/ORT':>6s}"
    ]
    for c in r["cases"]:
        ort = f"{c['onnxruntime_ms']:8.3f}" if c["onnxruntime_ms"] else f"{'-':>8s}"
        vs_ort = f"{c['vs_onnxruntime']:6.2f}" if c["vs_onnxruntime"] else f"{'-':>6s}"
        flag = "" if c["matches_numpy"] else "  MISMATCH"
        flag += f"  (AVX2 code: {c['ours_avx2_ms']:.3f} ms)" if "ours_avx2_ms" in c else ""
        lines.append(
            f"{c['name']:28s} {c['dtype']:8s} {c['ours_ms']:9.3f} {c['numpy_ms']:9.3f} "
            f"{ort} {c['vs_numpy']:7.2f} {vs_ort}{flag}"
        )
    lines.append(
        f"host {r['host_cpu']} ({r['vector_width']} fp32 lanes), one thread; convs at "
        f"most {r['conv_max_vs_numpy']:.2f}x numpy and "
        f"{r['conv_max_vs_onnxruntime']:.2f}x onnxruntime"
    )
    for a in r["arm"]:
        if "error" in a:
            lines.append(f"{a['target']}: {a['error']}")
            continue
        counts = ", ".join(
            f"{e['name']} {e['instructions']:,} instructions ({e['instructions_per_mac']:.2f}/MAC)"
            for e in a["emulated"]
        )
        lines.append(
            f"{a['target']} ({a['cpu']}): {a['kernels']} kernels built in "
            f"{a['compile_seconds']:.2f} s + linked in {a['link_seconds']:.2f} s, "
            f"{a['bytes']:,} B" + (f"; under emulation: {counts}" if counts else "")
        )
    return "\n".join(lines)
