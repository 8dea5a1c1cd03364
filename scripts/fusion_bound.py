"""How fast MobileNetV2 could run if each inverted residual block kept its expanded tensors on
chip (docs/DEPTHWISE.md): a bound worked out from the layers as compiled today, not a design
run on the cycle model.

The network (the mobilenet-v2 suite's, its calibration) is compiled on the PYNQ-Z1 preset's
twin with the requantization unit and the depthwise mode. A block (a conv, the depthwise conv
it feeds, the 1x1 projection after it) run as one pass moves only its input and residual, its
weights, parameter rows, instructions and micro-ops, and its output; its time is at least the
largest of those bytes at the bus's width a cycle, the GEMM core's cycles at full use (a
conv's MACs over the array's; a depthwise conv's cycles in the mode, counted two ways: as built,
its window filled a column at a time, `window` reads of INP a column (`hw.timing.depthwise_steps`),
and with a window that takes one pixel of BLOCK_OUT channels a cycle, as line buffers would),
and the requantization unit's (each of the block's tensors through it once, at `requant_lanes`
lanes, and at a unit of BLOCK_OUT lanes). The other layers count as compiled. Each layer's own
floor (its bytes or its cycles on the array as built, whichever is larger) is the bound without
the fusion.

    .venv/bin/python scripts/fusion_bound.py [--json FILE]
"""

import argparse
import json
from pathlib import Path

from tilecraft.boards import resolve_config
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.hw.timing import depthwise_steps
from tilecraft.models.zoo import MODELS
from tilecraft.sim.simulator import model_report

DEFAULT_JSON = "src/tilecraft/benchmarks/data/fusion_bound.json"


def _layers(cfg) -> list[dict]:
    graph = import_model(MODELS["mobilenet_v2"](seed=0))
    comp = compile_network(graph, cfg, random_calibration(graph, 2, seed=0))
    out = []
    for name, p in comp.layer_programs.items():
        report = model_report(p)
        dram = report.dram_bytes
        out.append(
            {
                "name": name,
                "op": p.computation.op,
                "cycles": report.cycles,
                "bytes": sum(dram.values()),
                "fixed": dram["insn"] + dram["uop"] + dram["wgt"] + dram["acc"],
                "inputs": sorted(b.nbytes for b in p.inputs),
                "output": sum(b.nbytes for b in p.outputs),
            }
        )
    return out


def _gemm_cycles(cfg, op, line_window: bool = False) -> float:
    """A layer's cycles on the array at full use; a depthwise conv's in the mode as built, or
    with `line_window` one output pixel of BLOCK_OUT channels a cycle (a pass each)."""
    if op.kind != "depthwise_conv2d":
        return getattr(op, "macs", 0) / (cfg.batch * cfg.block_in * cfg.block_out)
    blocks = -(-op.c // cfg.block_out)
    if line_window:
        return op.oh * op.ow * blocks * cfg.depthwise_passes
    plane = {
        "in_rows": op.h + 2 * op.pad[0],
        "in_cols": op.w + 2 * op.pad[1],
        "stride_y": op.stride[0],
        "stride_x": op.stride[1],
    }
    return depthwise_steps(cfg.depthwise_window, cfg.depthwise_passes, plane) * blocks


def _blocks(layers: list[dict]) -> list[list[dict]]:
    """The layers in runs: a conv, the depthwise conv it feeds and the conv after it (each
    tensor checked to be the next one's input), else a layer alone."""
    runs, i = [], 0
    while i < len(layers):
        kinds = [x["op"].kind for x in layers[i : i + 3]]
        if kinds == ["conv2d", "depthwise_conv2d", "conv2d"]:
            run = layers[i : i + 3]
            for a, b in zip(run, run[1:]):
                if a["output"] not in b["inputs"]:
                    raise AssertionError(f"{a['name']}'s output is not {b['name']}'s input")
            runs.append(run)
        else:
            runs.append(layers[i : i + 1])
        i += len(runs[-1])
    return runs


def _bound(cfg, run: list[dict]) -> dict:
    names = [x["name"] for x in run]
    now = sum(x["cycles"] for x in run)
    bus = cfg.axi_bytes
    floor = sum(max(x["bytes"] / bus, _gemm_cycles(cfg, x["op"])) for x in run)
    if len(run) == 1:  # as compiled
        return dict(
            layers=names,
            cycles=now,
            own_floors=floor,
            bound_by="as compiled",
            **{key: now for key in ("fused", "fused_line_window", "fused_line_window_wide")},
        )
    first, last = run[0], run[-1]
    residual = sum(last["inputs"]) - run[-2]["output"]
    moved = sum(first["inputs"]) + residual + sum(x["fixed"] for x in run) + last["output"]
    gemm = sum(_gemm_cycles(cfg, x["op"]) for x in run)
    line = sum(_gemm_cycles(cfg, x["op"], line_window=True) for x in run)
    row_bytes = cfg.batch * cfg.block_out * cfg.out_bits // 8
    rows = sum(x["output"] for x in run) / row_bytes  # each tensor through the unit once
    passes = -(-cfg.batch * cfg.block_out // cfg.requant_lanes)
    bounds = {"dram": moved / bus, "array": gemm, "unit": rows * passes}
    return {
        "layers": names,
        "cycles": now,
        "own_floors": floor,
        "fused_dram_bytes": moved,
        "fused_gemm_cycles": gemm,
        "fused_gemm_cycles_line_window": line,
        "fused_unit_rows": rows,
        "fused": max(bounds.values()),
        "bound_by": max(bounds, key=bounds.get),
        "fused_line_window": max(moved / bus, line, rows * passes),
        "fused_line_window_wide": max(moved / bus, line, rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=DEFAULT_JSON, help="write the figures here")
    args = parser.parse_args()
    cfg = resolve_config("pynq-z1").with_requant_unit().with_depthwise_mode(3)
    runs = [_bound(cfg, run) for run in _blocks(_layers(cfg))]
    ms = 1 / (cfg.clock_mhz * 1e3)
    columns = ("fused", "fused_line_window", "fused_line_window_wide")
    keys = {"as_compiled": "cycles", "own_floors": "own_floors"}  # the rest: the same names
    totals = {key: sum(r[keys.get(key, key)] for r in runs) * ms for key in (*keys, *columns)}
    lanes = cfg.batch * cfg.block_out
    print(
        f"{'layers':32s} {'cycles':>9s} {'floors':>9s} {'fused':>9s} {'bound by':>11s} "
        f"{'line win.':>9s} {'+' + str(lanes) + ' lanes':>9s}"
    )
    for r in runs:
        cells = [f"{r[k]:9,.0f}" for k in ("cycles", "own_floors", "fused")]
        cells += [f"{r['bound_by']:>11s}"] + [f"{r[k]:9,.0f}" for k in columns[1:]]
        print(f"{' '.join(r['layers']):32s} " + " ".join(cells))
    print(
        f"MobileNetV2 on {cfg.tag}: {totals['as_compiled']:.1f} ms as compiled, the layers' own "
        f"floors {totals['own_floors']:.1f} ms; the blocks fused {totals['fused']:.1f} ms with "
        f"the mode as built, {totals['fused_line_window']:.1f} ms with a window of one pixel a "
        f"cycle ({totals['fused_line_window_wide']:.1f} ms with it and a {lanes}-lane unit)"
    )
    out = {"config": cfg.tag, "ms": totals, "runs": runs}
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
