"""The per-layer error report of a quantized network against its float graph: for every int8
tensor, the SQNR (dB) and the largest absolute error of its dequantized values, over the same
inputs, worst layers first. The first place to look when int8 accuracy falls short."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.compiler.frontend.evaluate import evaluate
from tilecraft.compiler.frontend.ir import Graph
from tilecraft.runtime.executor import run_model
from tilecraft.runtime.model import CompiledModel


@dataclass(frozen=True)
class LayerError:
    tensor: str  # the float graph's name
    node: str  # the node that makes it
    sqnr_db: float
    max_abs_error: float
    max_abs_value: float
    scale: float


def float_name(tensor: str) -> str:
    return tensor[:-2] if tensor.endswith(":q") else tensor


def error_report(
    graph: Graph, model: CompiledModel, inputs: list[dict[str, np.ndarray]], device=None
) -> list[LayerError]:
    """Per int8 tensor made by a node, SQNR and max |error| over `inputs`, worst first."""
    producer = {o: n.name for n in graph.nodes for o in n.outputs}
    signal: dict[str, float] = {}
    noise: dict[str, float] = {}
    worst: dict[str, float] = {}
    top: dict[str, float] = {}
    for x in inputs:
        want = evaluate(graph, x, keep_all=True)
        got = run_model(model, x, device, keep=True).tensors
        for name, q in got.items():
            spec = model.tensor(name)
            ref = float_name(name)
            if spec.dtype != "int8" or ref not in producer or ref not in want:
                continue
            f = want[ref]
            err = (q.astype(np.float64) - spec.zero) * spec.scale - f.reshape(q.shape)
            signal[name] = signal.get(name, 0.0) + float((f**2).sum())
            noise[name] = noise.get(name, 0.0) + float((err**2).sum())
            worst[name] = max(worst.get(name, 0.0), float(np.abs(err).max()))
            top[name] = max(top.get(name, 0.0), float(np.abs(f).max()))
    rows = []
    for name in signal:
        sqnr = 10 * np.log10(signal[name] / noise[name]) if noise[name] > 0 else float("inf")
        ref = float_name(name)
        rows.append(
            LayerError(
                ref, producer[ref], float(sqnr), worst[name], top[name], model.tensor(name).scale
            )
        )
    return sorted(rows, key=lambda r: r.sqnr_db)


def format_report(rows: list[LayerError], limit: int | None = None) -> str:
    width = max([len(r.node) for r in rows] + [4])
    lines = [f"{'node':<{width}}  {'SQNR dB':>8} {'max |err|':>10} {'max |x|':>9} {'scale':>9}"]
    for r in rows[:limit]:
        lines.append(
            f"{r.node:<{width}}  {r.sqnr_db:>8.2f} {r.max_abs_error:>10.4g} "
            f"{r.max_abs_value:>9.4g} {r.scale:>9.3g}"
        )
    if limit is not None and len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more layers (better SQNR)")
    return "\n".join(lines)
