"""cpu-fallback: the generated host kernels against numpy and onnxruntime, one thread each,
same process (benchmarks/README.md). Cases: the 3x3 64->64 conv at 56x56 and ResNet-18's 1x1
downsampling conv (float32 and int8), dense 512->1000, ResNet-18's max pool and global average
pool, the NCHW <-> blocked layout transforms, and float ResNet-18 and MobileNetV2 whole. Each
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


NETWORKS = ("resnet18", "mobilenet_v2")


def _network(jit, name: str, repeats: int) -> dict:
    """A zoo network in float on the kernels (`FloatGraph`), against onnxruntime on the ONNX
    model and the numpy evaluator (float64, one run: it takes seconds)."""
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
    return {
        "name": f"{name}_network",
        "dtype": "float32",
        "ours_ms": _best(repeats, net.run, x),
        "numpy_ms": numpy_ms,
        "onnxruntime_ms": _best(repeats, ort, x) if ort else None,
        "build_ms": build * 1e3,
        "matches_numpy": cpu_cases._close(ours, want),
        "macs": 0,
        "numpy_nodes": net.numpy_nodes,
    }


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
            kernel = jit.kernel(made.spec)
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
        arm = cpu_cases.arm_builds(specs, tmp, emulate)
    if limits is not None:
        limits.unregister()
    for r in rows:
        r["vs_numpy"] = r["ours_ms"] / r["numpy_ms"]
        r["vs_onnxruntime"] = r["ours_ms"] / r["onnxruntime_ms"] if r["onnxruntime_ms"] else None
    convs = [r for r in rows if r["name"].startswith("conv")]
    nets = [r for r in rows if r["name"].endswith("_network")]
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
