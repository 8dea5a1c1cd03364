"""sim-speed: functional simulation of the ResNet-18 conv layers vs numpy.matmul (BENCHMARKS.md).

Until the conv2d compiler lands, each layer runs as its im2col GEMM (M = OH*OW, K = IC*KH*KW
padded to BLOCK_IN, N = OC) through the blocked-GEMM program: the same MACs as the layer. The
baseline is numpy.matmul of int32 matrices of the layer's true (unpadded) shape, same process.
"""

from __future__ import annotations

import time

import numpy as np

from tilecraft.benchmarks.workloads import resnet18_layers
from tilecraft.compiler.blocked_gemm import blocked_gemm, pack_a, pack_b
from tilecraft.hw.config import HwConfig
from tilecraft.runtime import get_device


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
    for layer in layers:
        m, k, n = gemm_shape(layer)
        m_pad = -(-m // cfg.batch) * cfg.batch
        k_pad = -(-k // cfg.block_in) * cfg.block_in
        n_pad = -(-n // cfg.block_out) * cfg.block_out
        a = np.zeros((m_pad, k_pad), np.int8)
        w = np.zeros((k_pad, n_pad), np.int8)
        a[:m, :k] = rng.integers(-128, 128, (m, k))
        w[:k, :n] = rng.integers(-128, 128, (k, n))
        program = blocked_gemm(cfg, m_pad, k_pad, n_pad)
        inputs = {"a": pack_a(cfg, a), "b": pack_b(cfg, w)}
        t0 = time.perf_counter()
        result = device.run(program, inputs)
        sim_s = time.perf_counter() - t0
        a32, w32 = a[:m, :k].astype(np.int32), w[:k, :n].astype(np.int32)
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
        "workload": "ResNet-18 C1-C11 as im2col GEMMs through the blocked-GEMM program",
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
