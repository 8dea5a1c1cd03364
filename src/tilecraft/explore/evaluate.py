"""One design point: the network's modeled latency (compiled for the config, every accelerator
program on the cycle model) and the config's synthesis resources (or the cached figure). Runs
in a Dask worker: it takes and returns plain data, and a failure is returned, not raised."""

from __future__ import annotations

import time
from pathlib import Path

from tilecraft.errors import TilecraftError
from tilecraft.hw.config import HwConfig

FIGURES = ("lut", "ff", "dsp", "bram36", "uram")


def network_latency(cfg: HwConfig, model: str = "resnet18", seed: int = 0) -> dict:
    """Accelerator cycles and milliseconds of `model` compiled for `cfg` (heuristic schedules;
    one random calibration sample: the zoo's weights are random too)."""
    from tilecraft.compiler.frontend import import_model
    from tilecraft.compiler.graph.network import compile_network
    from tilecraft.compiler.quant.calibrate import random_calibration
    from tilecraft.models.zoo import MODELS
    from tilecraft.runtime.model import AcceleratorStep
    from tilecraft.sim.simulator import model_report

    start = time.perf_counter()
    graph = import_model(MODELS[model](seed=seed))
    comp = compile_network(graph, cfg, random_calibration(graph, 1, seed=seed))
    steps = [s for s in comp.model.steps if isinstance(s, AcceleratorStep)]
    cycles = sum(model_report(comp.model.programs[s.program]).cycles for s in steps)
    return {
        "accelerator_cycles": cycles,
        "latency_ms": cycles / (cfg.clock_mhz * 1e3),
        "compile_seconds": time.perf_counter() - start,
    }


def evaluate(name: str, config: dict, part: str, model: str, cached: dict | None,
             workdir: str) -> dict:  # fmt: skip
    """A point as a dict: name, config tag and digest, latency, resources (`synthesized`: False
    when they came from the cache), or `error`."""
    from tilecraft.boards.flows.resources import synthesize

    cfg = HwConfig.from_dict(config)
    point = {"name": name, "config": cfg.tag, "digest": cfg.digest, "error": None}
    try:
        point.update(network_latency(cfg, model))
        if cached is None:
            r = synthesize(cfg, part, workdir=Path(workdir) / f"{cfg.tag}-{cfg.digest}")
            cached = {k: getattr(r, k) for k in FIGURES} | {"synth_seconds": r.seconds}
            point["synthesized"] = True
        else:
            point["synthesized"] = False
        point.update(cached)
    except (TilecraftError, ValueError) as exc:  # ValueError: a config the RTL refuses
        point["error"] = f"{type(exc).__name__}: {exc}"
    return point
