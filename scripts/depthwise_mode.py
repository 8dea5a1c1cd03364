"""What the GEMM core's depthwise mode (docs/DEPTHWISE.md, option A) buys on the cycle model:
MobileNetV2 (the mobilenet-v2 suite's network, image and calibration) on the PYNQ-Z1 preset's
twin with the requantization unit, without and with the mode for 3x3 windows, in one run; and
with the mode's window as line buffers would fill it instead (one plane row a cycle, where the
mode reads each column's K rows in turn: `hw/timing.py` `depthwise_steps`), a what-if the cycle
model is patched for, to show what line buffers would buy.

Per config: the network's modeled and accelerator ms, bit-exactness against the integer
reference, the simulator's ratio, the DRAM bytes of its layers and the floor they set at the
bus's width (each layer's bytes at `axi_bytes` a cycle); per depthwise layer: its cycles,
utilization of the array and DRAM bytes. The mode has no RTL yet: these are the model's
figures for the hardware the compiler would target.

    .venv/bin/python scripts/depthwise_mode.py [--json FILE]
"""

import argparse
import json
import time
from contextlib import contextmanager
from pathlib import Path

import tilecraft.compiler.operator.tile_work as tile_work
import tilecraft.hw.timing as timing
from tilecraft.benchmarks import mobilenet_v2
from tilecraft.boards import resolve_config
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.partition import Reason, partition
from tilecraft.models.zoo import MODELS

DEFAULT_JSON = "src/tilecraft/benchmarks/data/depthwise_mode.json"


def _depthwise_layers() -> set[str]:
    """The network's layers that are depthwise convs on the accelerator."""
    graph = import_model(MODELS["mobilenet_v2"](seed=0))
    return {p.node for p in partition(graph) if p.reason == Reason.DEPTHWISE}


def _summary(result: dict, cfg, names: set[str]) -> dict:
    layers = result["layers"]
    dram = sum(x["dram_bytes"] for x in layers)
    depthwise = [x for x in layers if x["name"] in names]
    return {
        "config": result["config"],
        "modeled_latency_ms": result["modeled_latency_ms"],
        "accelerator_ms": result["accelerator_ms"],
        "bit_exact_vs_reference": result["bit_exact_vs_reference"],
        "sim_ratio": result["sim_ratio"],
        "layers_dram_bytes": dram,
        "dram_floor_ms": dram / cfg.axi_bytes / (cfg.clock_mhz * 1e3),
        "depthwise_cycles": sum(x["cycles"] for x in depthwise),
        "depthwise_layers": [
            {k: x[k] for k in ("name", "macs", "cycles", "utilization", "dram_bytes")}
            for x in depthwise
        ],
    }


def _line_buffer_steps(window: int, passes: int, row) -> int:
    """A window fed by line buffers: one plane row a cycle, an output's passes past the first
    holding the stream."""
    rows, cols = timing.depthwise_outputs(window, row)
    return row["in_rows"] * row["in_cols"] + (passes - 1) * rows * cols


@contextmanager
def _line_buffers():
    saved = timing.depthwise_steps
    timing.depthwise_steps = tile_work.depthwise_steps = _line_buffer_steps
    try:
        yield
    finally:
        timing.depthwise_steps = tile_work.depthwise_steps = saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=DEFAULT_JSON, help="write the figures here")
    args = parser.parse_args()
    unit = resolve_config(mobilenet_v2.PRESET).with_requant_unit()
    names = _depthwise_layers()
    mode = unit.with_depthwise_mode(3)
    out = {}
    for name, cfg, what_if in (
        ("unit", unit, None),
        ("unit_and_depthwise_mode", mode, None),
        ("unit_and_line_buffer_window", mode, _line_buffers),
    ):
        start = time.perf_counter()
        if what_if is None:
            out[name] = _summary(mobilenet_v2.run(cfg), cfg, names)
        else:
            with what_if():
                out[name] = _summary(mobilenet_v2.run(cfg), cfg, names)
        s = out[name]
        print(
            f"{name} ({cfg.tag}): {s['modeled_latency_ms']:.2f} ms (accelerator "
            f"{s['accelerator_ms']:.2f}), depthwise {s['depthwise_cycles']:,} cycles, DRAM "
            f"floor {s['dram_floor_ms']:.2f} ms, bit-exact {s['bit_exact_vs_reference']} "
            f"({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
