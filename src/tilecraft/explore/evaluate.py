"""One design point: the network's modeled latency (compiled for the config, every accelerator
program on the cycle model) and the config's synthesis resources (or the cached figure). Runs
in a Dask worker: it takes and returns plain data, and a failure is returned, not raised."""

from __future__ import annotations

import time
from pathlib import Path

from tilecraft.errors import TilecraftError
from tilecraft.hw.config import HwConfig

FIGURES = ("lut", "ff", "dsp", "bram36", "uram")


def network_latency(
    cfg: HwConfig,
    model: str = "resnet18",
    seed: int = 0,
    trials: int = 0,
    records_dir: str | Path | None = None,
) -> dict:
    """Accelerator cycles and milliseconds of `model` (a zoo model, or "digits", the trained
    digits CNN) compiled for `cfg` (one random calibration sample: the zoo's weights are random
    too), and the layers the config leaves on the host (`host_layers`, their `host_macs`):
    their time is not in the figure, so points with different host layers do not run the same
    work. The compiler's heuristic schedules,
    or with `trials`, each distinct layer's schedule tuned on the cycle model (`trials`
    measurements each, XGBoost cost model) into `records_dir/<tag>-<digest>.jsonl`, which a
    later sweep resumes from."""
    from tilecraft.compiler.frontend import import_model
    from tilecraft.compiler.graph.network import build_model
    from tilecraft.compiler.partition import Place, partition
    from tilecraft.compiler.quant.calibrate import calibrate, random_calibration
    from tilecraft.compiler.quant.quantize import quantize
    from tilecraft.models.digits import ONNX_PATH
    from tilecraft.models.zoo import MODELS
    from tilecraft.runtime.model import AcceleratorStep
    from tilecraft.sim.simulator import model_report

    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
        raise TilecraftError(f"trials must be 0 (heuristic schedules) or more, not {trials!r}")
    start = time.perf_counter()
    if model == "digits":  # one image (its batch is dynamic)
        graph = import_model(ONNX_PATH, {"input": (1, 1, 8, 8)})
    else:
        graph = import_model(MODELS[model](seed=seed))
    ranges = calibrate(graph, random_calibration(graph, 1, seed=seed), "minmax")
    net = quantize(graph, ranges, cfg=cfg)
    out = {"schedules": "heuristic"}
    records = None
    if trials:
        tuning = time.perf_counter()
        records = _tuned(cfg, net, trials, Path(records_dir or "."))
        out = {
            "schedules": f"tuned ({trials} trials a layer)",
            "tune_seconds": time.perf_counter() - tuning,
        }
    compiled = build_model(cfg, net, records=records, jobs=1)  # the sweep is the parallel part
    steps = [s for s in compiled.steps if isinstance(s, AcceleratorStep)]
    cycles = sum(model_report(compiled.programs[s.program]).cycles for s in steps)
    host = [p for p in partition(graph, cfg) if p.place is Place.HOST]
    return out | {
        "accelerator_cycles": cycles,
        "latency_ms": cycles / (cfg.clock_mhz * 1e3),
        "host_layers": [p.node for p in host],
        "host_macs": sum(p.macs for p in host),
        "compile_seconds": time.perf_counter() - start,
    }


def _tuned(cfg: HwConfig, net, trials: int, folder: Path):
    """Each distinct layer of `net` tuned (resumed from the config's records); the records."""
    from tilecraft.compiler.tune.measure import CycleModel
    from tilecraft.compiler.tune.records import Records, tool_version
    from tilecraft.compiler.tune.task import network_tasks
    from tilecraft.compiler.tune.tuner import tune

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{cfg.tag}-{cfg.digest}.jsonl"
    meter = CycleModel()
    records = Records(path, cfg.digest, tool_version(meter.name))
    for _, task in network_tasks(cfg, net):
        left = trials - len(records.of(task.key))  # a resumed sweep measures only the rest
        if left > 0:
            tune(task, meter, left, records)
    return Records(path, cfg.digest, tool_version(meter.name))


def evaluate(
    name: str,
    config: dict,
    part: str,
    model: str,
    known: dict,
    workdir: str,
    trials: int = 0,
) -> dict:
    """A point as a dict: name, config tag and digest, the unit's lanes, the depthwise mode's
    window (0 without it), latency (heuristic schedules, or tuned with `trials`) and the layers
    left on the host (`network_latency`), its design (`hw.rtl.design_digest`) and resources
    (`synthesized`: False when they came from the cache), or `error`. `known` is the
    synthesis cache's word on it (`sweep.SynthCache.known`): its design where the cache
    remembers it from the same sources (else the config is elaborated to find it), and the
    part family's figures by design."""
    from tilecraft.boards.flows import resources

    cfg = HwConfig.from_dict(config)
    point = {
        "name": name,
        "config": cfg.tag,
        "digest": cfg.digest,
        "requant_lanes": cfg.requant_lanes,
        "depthwise_window": cfg.depthwise_window,
        "design": None,
        "error": None,
    }
    try:
        point.update(
            network_latency(cfg, model, trials=trials, records_dir=Path(workdir) / "records")
        )
        point["design"] = known["design"] or resources.design(cfg)
        cached = known["figures"].get(point["design"])
        if cached is None:
            r = resources.synthesize(cfg, part, workdir=Path(workdir) / f"{cfg.tag}-{cfg.digest}")
            cached = {k: getattr(r, k) for k in FIGURES} | {"synth_seconds": r.seconds}
            point["synthesized"] = True
        else:
            point["synthesized"] = False
        point.update(cached)
    except (TilecraftError, ValueError) as exc:  # ValueError: a config the RTL refuses
        point["error"] = f"{type(exc).__name__}: {exc}"
    return point
