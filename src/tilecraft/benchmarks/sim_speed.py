"""sim-speed: functional simulation of the ResNet-18 conv layers vs numpy.matmul (see
benchmarks/README.md).

Each layer is compiled by the conv2d compiler (default schedule; compile time not counted) and
run on the behavioral simulator with random int8 data. The baseline is numpy.matmul of int32
matrices of the layer's im2col shape (M = OH*OW, K = IC*KH*KW, N = OC: the same MACs), same
process.
"""

from __future__ import annotations

import time

import numpy as np

from tilecraft.benchmarks.workloads import layer_op, resnet18_layers
from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.hw.config import HwConfig
from tilecraft.ops import Epilogue
from tilecraft.progress import track
from tilecraft.runtime import get_device
from tilecraft.runtime.layout import pack_inputs


def gemm_shape(layer: dict) -> tuple[int, int, int]:
    oh = (layer["H"] + 2 * layer["P"] - layer["K"]) // layer["S"] + 1
    ow = (layer["W"] + 2 * layer["P"] - layer["K"]) // layer["S"] + 1
    return oh * ow, layer["IC"] * layer["K"] * layer["K"], layer["OC"]


def run(cfg: HwConfig | None = None, layers: list[dict] | None = None, seed: int = 0) -> dict:
    cfg = cfg or HwConfig()
    layers = layers or resnet18_layers()
    rng = np.random.default_rng(seed)
    device = get_device("sim")
    rows, sim_total, np_total = [], 0.0, 0.0
    for layer in track(layers, "sim-speed"):
        op = layer_op(layer)
        w = rng.integers(-128, 128, op.weight_shape, dtype=np.int8)
        x = rng.integers(-128, 128, op.input_shape, dtype=np.int8)
        program = conv2d(cfg, op, Epilogue(shift=8, relu=True), weight=w)
        inputs = pack_inputs(program, {"input": x})
        t0 = time.perf_counter()
        result = device.run(program, inputs)
        sim_s = time.perf_counter() - t0
        m, k, n = gemm_shape(layer)
        a32 = rng.integers(-128, 128, (m, k)).astype(np.int32)
        w32 = rng.integers(-128, 128, (k, n)).astype(np.int32)
        t0 = time.perf_counter()
        np.matmul(a32, w32)
        np_s = time.perf_counter() - t0
        sim_total += sim_s
        np_total += np_s
        rows.append(
            {
                "name": layer["name"],
                "gemm": [m, k, n],
                "macs": m * k * n,
                "instructions": result.report.instructions,
                "sim_seconds": sim_s,
                "numpy_seconds": np_s,
                "ratio": sim_s / np_s,
            }
        )
    return {
        "suite": "sim-speed",
        "config": cfg.tag,
        "workload": "ResNet-18 C1-C11 compiled by the conv2d compiler",
        "layers": rows,
        "sim_seconds": sim_total,
        "numpy_seconds": np_total,
        "ratio": sim_total / np_total,
    }


def format_table(result: dict) -> str:
    lines = [f"{'layer':6s} {'M x K x N':>18s} {'insns':>7s} {'sim s':>8s} {'numpy s':>8s} ratio"]
    for r in result["layers"]:
        shape = "x".join(str(d) for d in r["gemm"])
        lines.append(
            f"{r['name']:6s} {shape:>18s} {r['instructions']:7d} {r['sim_seconds']:8.3f} "
            f"{r['numpy_seconds']:8.3f} {r['ratio']:.2f}"
        )
    lines.append(
        f"{'total':6s} {'':>18s} {'':>7s} {result['sim_seconds']:8.3f} "
        f"{result['numpy_seconds']:8.3f} {result['ratio']:.2f}  (goal <= 2)"
    )
    return "\n".join(lines)
