"""resnet18 (and mobilenet-v2, `network=`): the whole network from its ONNX file (generated in
the repo: torchvision's architecture, seeded weights) on the PYNQ-Z1 preset (benchmarks/README.md).

Import, calibrate (random inputs: the weights are random too), quantize, compile, run one image
on the simulator (bit-exact with the integer reference, checked here) and report: modeled
accelerator time, host time (measured on this machine, warm: the input's quantization and
packing, the output's unpacking and dequantization, and any host step), the MAC share on the
accelerator, per-layer cycles, utilization and SQNR against float, the activation arena,
compile seconds, and the simulator's speed as a ratio to numpy int32 GEMMs with the same MACs:
the image run again, the semantics alone (the device replays its first run's order; three
runs in turn with the GEMMs, the fastest of each), and the first run, cycle model included.
The same run compiles the network for the config's twin with the requantization unit
(`with_unit`), so one record shows what the unit buys.
"""

from __future__ import annotations

import time

import numpy as np

from tilecraft.benchmarks.host_time import generated_kernels, host_times
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.arena import model_arena
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.partition import accelerator_mac_share, partition
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.compiler.quant.report import error_report
from tilecraft.hw.config import HwConfig
from tilecraft.models.zoo import MODELS
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model
from tilecraft.runtime.model import AcceleratorStep
from tilecraft.sim.simulator import model_report

PRESET = "pynq-z1"
REPEATS = 3  # the simulator's replay and the numpy GEMMs, in turns: the fastest of each
TITLES = {"resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2"}


def run(cfg: HwConfig, calibration: int = 2, seed: int = 0, network: str = "resnet18") -> dict:
    graph = import_model(MODELS[network](seed=seed))
    placements = partition(graph)
    macs = {p.node: p.macs for p in placements}
    data = random_calibration(graph, calibration, seed=seed)
    start = time.perf_counter()
    comp = compile_network(graph, cfg, data)
    total_compile = time.perf_counter() - start
    model = comp.model
    x = {
        "input": np.random.default_rng(seed + 1)
        .standard_normal((1, 3, 224, 224))
        .astype(np.float32)
    }
    device = get_device("sim")
    result = run_model(model, x, device, keep=True)  # timed: the cycle model runs too
    reference = run_model(model, x)
    timed_sim_seconds = _accelerator_seconds(result)
    # then the semantics alone (the device replays) against numpy, in turns, each the fastest
    rng = np.random.default_rng(seed)
    for name, parts in comp.merged.items():  # a conv and its pool, compiled as one layer
        macs[name] = sum(macs[part] for part in parts)
    gemm_layers = [p for name, p in comp.layer_programs.items() if macs[name]]
    replays, sim_seconds, numpy_seconds = [], float("inf"), float("inf")
    for _ in range(REPEATS):
        replays.append(run_model(model, x, device))
        sim_seconds = min(sim_seconds, _accelerator_seconds(replays[-1]))
        numpy_seconds = min(numpy_seconds, sum(_numpy_gemm_seconds(p, rng) for p in gemm_layers))
    bit_exact = all(
        np.array_equal(run.outputs[k], reference.outputs[k])
        for run in (result, *replays)
        for k in model.outputs
    )
    sqnr = {e.node: e.sqnr_db for e in error_report(graph, model, [x])}
    block = cfg.batch * cfg.block_in * cfg.block_out
    layers = []
    for name, program in comp.layer_programs.items():  # each layer alone, on the cycle model
        report = model_report(program)
        ideal = macs[name] / block
        layers.append(
            {
                "name": name,
                "macs": macs[name],
                "cycles": report.cycles,
                "ideal_cycles": ideal,
                "utilization": ideal / report.cycles if macs[name] else None,
                "dram_bytes": sum(report.dram_bytes.values()),
                "sqnr_db": sqnr.get(comp.merged.get(name, (name,))[-1]),
            }
        )
    cycles = result.accelerator_cycles
    programs = sum(isinstance(s, AcceleratorStep) for s in model.steps)
    accelerator_ms = cycles / (cfg.clock_mhz * 1e3)
    kernels = generated_kernels()
    host = host_times(model, result, kernels)
    arena = model_arena(model)
    return {
        "suite": network.replace("_", "-"),
        "network": TITLES[network],
        "config": cfg.tag,
        "accelerator_programs": programs,
        "chained_layers": sum(len(s.layers) for s in model.steps if isinstance(s, AcceleratorStep)),
        "modeled_latency_ms": accelerator_ms + host["host_ms_measured_here"],
        "accelerator_ms": accelerator_ms,
        **host,
        "accelerator_mac_share": accelerator_mac_share(placements),
        "mac_weighted_utilization": sum(r["ideal_cycles"] for r in layers) / cycles,
        "compile_seconds": comp.seconds["import"]
        + comp.seconds["quantize"]
        + comp.seconds["compile"],
        "calibration_seconds": comp.seconds["calibrate"],
        "total_compile_seconds": total_compile,
        "sim_seconds": sim_seconds,
        "timed_sim_seconds": timed_sim_seconds,
        "numpy_seconds": numpy_seconds,
        "sim_ratio": sim_seconds / numpy_seconds,
        "timed_sim_ratio": timed_sim_seconds / numpy_seconds,
        "arena_peak_bytes": arena.peak_bytes,
        "arena_lower_bound_bytes": arena.lower_bound_bytes,
        "dram_bytes": sum(r.dram_bytes or 0 for r in result.steps),
        "bit_exact_vs_reference": bit_exact,
        "output_sqnr_db": min(sqnr.values()) if sqnr else None,
        "layers": layers,
        "with_unit": _with_unit(graph, cfg, data, x, kernels),
        "ok": bit_exact,
    }


def _with_unit(graph, cfg: HwConfig, data, x: dict, kernels) -> dict | None:
    """The same network, calibration and image on `cfg`'s twin with the requantization unit
    (`HwConfig.with_requant_unit`), in the same run: what the unit buys. None when `cfg` has
    the unit already (the figures above are its own)."""
    if cfg.requant_lanes:
        return None
    unit = cfg.with_requant_unit()
    model = compile_network(graph, unit, data).model
    result = run_model(model, x, get_device("sim"), keep=True)
    reference = run_model(model, x)
    accelerator_ms = result.accelerator_cycles / (unit.clock_mhz * 1e3)
    host = host_times(model, result, kernels)
    return {
        "config": unit.tag,
        "modeled_latency_ms": accelerator_ms + host["host_ms_measured_here"],
        "accelerator_ms": accelerator_ms,
        "host_ms_measured_here": host["host_ms_measured_here"],
        "host_ms_numpy": host["host_ms_numpy"],
        "bit_exact_vs_reference": all(
            np.array_equal(result.outputs[k], reference.outputs[k]) for k in model.outputs
        ),
    }


def _accelerator_seconds(run) -> float:
    """A run's seconds on the accelerator's steps, their packing excluded."""
    return sum(r.seconds - r.pack_seconds for r in run.steps if r.place == "accelerator")


def _numpy_gemm_seconds(program, rng) -> float:
    """numpy int32 GEMM with the layer's MACs (im2col shape), timed alone."""
    op = program.computation.op
    batch = 1
    if op.kind == "conv2d":
        m, k, n = op.oh * op.ow * op.n, op.ic * op.kernel[0] * op.kernel[1], op.oc
    elif op.kind == "depthwise_conv2d":  # one (pixels, taps) @ (taps, 1) per channel
        batch, m, k, n = op.c, op.oh * op.ow * op.n, op.kernel[0] * op.kernel[1], 1
    else:
        m, k, n = op.m, op.k, op.n
    a = rng.integers(-128, 128, (batch, m, k)).astype(np.int32)
    b = rng.integers(-128, 128, (batch, k, n)).astype(np.int32)
    start = time.perf_counter()
    np.matmul(a, b)
    return time.perf_counter() - start


def format_table(r: dict) -> str:
    lines = [f"{'layer':10s} {'MACs':>12s} {'cycles':>10s} {'util':>6s} {'SQNR dB':>8s}"]
    for x in r["layers"]:
        sq = f"{x['sqnr_db']:8.2f}" if x["sqnr_db"] is not None else f"{'-':>8s}"
        util = f"{x['utilization']:6.3f}" if x["utilization"] is not None else f"{'-':>6s}"
        lines.append(f"{x['name']:10s} {x['macs']:12,d} {x['cycles']:10,d} {util} {sq}")
    lines += [
        f"{r.get('network', 'ResNet-18')} on {r['config']}: modeled "
        f"{r['modeled_latency_ms']:.1f} ms = accelerator {r['accelerator_ms']:.1f} ms + host "
        f"{r['host_ms_measured_here']:.2f} ms (measured here, warm, on the "
        f"{r.get('host_kernels', 'numpy')} host kernels: host steps and packing around the "
        f"{r['accelerator_programs']} programs; numpy's {r.get('host_ms_numpy', float('nan')):.2f}"
        f" ms; {r['chained_layers']} layers chained)",
        f"accelerator MAC share {r['accelerator_mac_share']:.0%}, MAC-weighted utilization "
        f"{r['mac_weighted_utilization']:.3f}, DRAM {r['dram_bytes'] / 1e6:.1f} MB",
        f"compile {r['compile_seconds']:.1f} s (+ calibration {r['calibration_seconds']:.1f} s), "
        f"sim ratio {r['sim_ratio']:.2f} (timed {r['timed_sim_ratio']:.2f}), "
        f"arena {r['arena_peak_bytes']:,} B (lower bound {r['arena_lower_bound_bytes']:,}), "
        f"bit-exact vs reference: "
        f"{r['bit_exact_vs_reference']}",
    ]
    u = r.get("with_unit")
    if u:
        lines.append(
            f"with the requantization unit ({u['config']}): modeled "
            f"{u['modeled_latency_ms']:.1f} ms = accelerator {u['accelerator_ms']:.1f} ms + host, "
            f"bit-exact vs reference: {u['bit_exact_vs_reference']}"
        )
    return "\n".join(lines)
