"""What a second register behind every scratchpad read would cost (SRAM_READ_LATENCY 2 -> 3, the
next timing step in benchmarks/TIMING.md), on the cycle model as a what-if: ResNet-18 and
MobileNetV2 compiled and run with the unit (the PYNQ-Z1 preset's twin), once as the model is
and once with every read a cycle later (the GEMM's and the ALU's drains, an instruction's first
micro-op read, the requantization unit's latency and its parameter rows' gap one cycle more
each), the compiler choosing its schedules under each. The RTL is not changed: the figure is
the register's price in cycles, before it is built.

    .venv/bin/python scripts/read_register.py [--json FILE]   (about a minute)
"""

import argparse
import contextlib
import dataclasses
import json

import numpy as np

from tilecraft.boards import resolve_config
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.hw import timing
from tilecraft.models.zoo import MODELS
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model

LATER = ("gemm_depth", "alu_depth", "insn_overhead", "requant_latency", "requant_set_gap")


@contextlib.contextmanager
def read_register():
    """`Timing.from_config` with each of LATER one cycle more."""
    made = timing.Timing.from_config

    def later(cfg, **overrides):
        t = made(cfg, **overrides)
        return dataclasses.replace(t, **{name: getattr(t, name) + 1 for name in LATER})

    timing.Timing.from_config = later
    try:
        yield
    finally:
        timing.Timing.from_config = made


def measure(network: str) -> dict:
    cfg = resolve_config("pynq-z1").with_requant_unit()
    graph = import_model(MODELS[network](seed=0))
    data = random_calibration(graph, 2, seed=0)
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    cycles = {}
    for name, patch in (("as built", contextlib.nullcontext), ("read register", read_register)):
        with patch():
            model = compile_network(graph, cfg, data).model
            cycles[name] = run_model(model, x, get_device("sim")).accelerator_cycles
    added = cycles["read register"] - cycles["as built"]
    return {
        "config": cfg.tag,
        "cycles": cycles,
        "ratio": cycles["read register"] / cycles["as built"],
        "added_ms": added / (cfg.clock_mhz * 1e3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    out = {network: measure(network) for network in ("resnet18", "mobilenet_v2")}
    for network, r in out.items():
        c = r["cycles"]
        print(
            f"{network} on {r['config']}: {c['as built']:,} -> {c['read register']:,} cycles "
            f"(x{r['ratio']:.5f}, +{r['added_ms']:.3f} ms)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
