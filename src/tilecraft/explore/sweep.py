"""The sweep: every config's point evaluated as a task on Dask (a LocalCluster by default, or a
scheduler's workers), synthesis figures cached by design (the Verilog synthesized) and part
family in a JSON file (a sweep that is stopped and run again synthesizes only what it has not;
an edit that leaves a config's Verilog as it was, nothing), then fits and fronts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tilecraft.boards import board, board_names
from tilecraft.boards.fit import PARTS, family
from tilecraft.errors import ConfigError, TilecraftError
from tilecraft.explore.evaluate import FIGURES, evaluate
from tilecraft.explore.pareto import fronts
from tilecraft.explore.space import sweep_configs
from tilecraft.files import write_atomic
from tilecraft.jobs import dask_client
from tilecraft.progress import track


class SynthCache:
    """Synthesis figures by design and part family (`figures`, keyed `design/family`: the
    design is `hw.rtl.design_digest` of the Verilog synthesized), and each config's design by
    the sources it was elaborated from (`designs`, keyed `config digest/sources`:
    `hw.rtl.elaboration_digest`), so an edit that leaves a config's Verilog as it was costs one
    elaboration and no synthesis; in one JSON file, rewritten atomically per entry (top-level
    keys it does not know are kept)."""

    def __init__(self, path: str | Path):
        from tilecraft.hw.rtl import elaboration_digest

        self.sources = elaboration_digest()
        self.path = Path(path)
        try:
            self.data = json.loads(self.path.read_text()) if self.path.exists() else {}
            for part in ("designs", "figures"):
                if not isinstance(self.data.setdefault(part, {}), dict):
                    raise ValueError(f"its {part!r} is not an object")
        except (OSError, ValueError, AttributeError) as exc:
            raise TilecraftError(
                f"the synthesis cache {self.path} is unreadable ({exc}): "
                + (
                    "give a file (--cache FILE.json)"
                    if self.path.is_dir()
                    else "delete it to synthesize again"
                )
            ) from None

    def known(self, digest: str, fam: str) -> dict:
        """What `evaluate` needs of the cache for config `digest` on family `fam`: its design
        (None where these sources have not elaborated it) and the family's figures by design."""
        figures = {}
        for key, figure in self.data["figures"].items():
            design, _, family_ = key.rpartition("/")
            if family_ == fam:
                figures[design] = figure
        return {"design": self.data["designs"].get(f"{digest}/{self.sources}"), "figures": figures}

    def remember(self, digest: str, design: str, fam: str, figure: dict | None = None) -> None:
        """Config `digest` elaborates to `design` from these sources; `figure`: its synthesis."""
        self.data["designs"][f"{digest}/{self.sources}"] = design
        if figure is not None:
            self.data["figures"][f"{design}/{fam}"] = figure
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(self.data, indent=1, sort_keys=True) + "\n")


def fits(point: dict, part: str) -> list[str]:
    """The boards whose part this point fits, judged on the sweep's synthesis family."""
    fam = family(part)
    out = []
    for name in board_names():
        cap = PARTS.get(board(name).part_family)
        if cap is None or family(board(name).part_family) != fam:
            continue
        if all(point.get(k, 0) <= cap[k] for k in cap if k in FIGURES):
            out.append(name)
    return out


def compared_host_layers(points: list[dict]) -> list[str]:
    """The host layers of the points the fronts compare: the fewest any point leaves there
    (the same set, so the same work: a point's latency is its accelerator's alone). A point
    that leaves more on the host (a depthwise conv or a pool where the blocks are not square)
    would look faster than it is."""
    sets = sorted({tuple(sorted(p["host_layers"])) for p in points}, key=lambda s: (len(s), s))
    return list(sets[0]) if sets else []


def run_sweep(
    part: str,
    *,
    model: str = "resnet18",
    limit: int | None = None,
    workers: int = 2,
    scheduler: str | None = None,
    cache: str | Path = "build/dse/synthesis-cache.json",
    workdir: str | Path = "build/dse",
    trials: int = 0,
) -> dict:
    """Evaluate the sweep's configs for `part`; returns the points, fits, fronts (of the points
    that run the same work, `compared_host_layers`, and of those of them without the
    requantization unit: what the unit moves) and seconds.
    With `trials`, each config's layers are tuned first (`evaluate.network_latency`; their
    records kept under `workdir`/records, so a stopped sweep resumes)."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 0:
        raise ConfigError(f"trials must be 0 (heuristic schedules) or more, not {trials!r}")
    if part not in PARTS or family(part) == "ecp5":
        known = ", ".join(p for p in PARTS if family(p) != "ecp5")
        raise ConfigError(f"unknown part {part!r} for a sweep; known: {known}")
    start = time.perf_counter()
    store = SynthCache(cache)
    fam = family(part)
    configs = sweep_configs(limit)
    work = str(Path(workdir).resolve())
    jobs = [
        (name, cfg.to_dict(), part, model, store.known(cfg.digest, fam), work, trials)
        for name, cfg in configs
    ]
    points = []
    for point in _evaluate_all(jobs, workers, scheduler):
        if point["error"] is None:
            keep = (*FIGURES, "synth_seconds")
            figure = {k: point[k] for k in keep} if point.get("synthesized") else None
            store.remember(point["digest"], point["design"], fam, figure)
        points.append(point)
    order = {name: i for i, (name, _) in enumerate(configs)}
    points.sort(key=lambda p: order[p["name"]])
    good = [p for p in points if p["error"] is None]
    host = compared_host_layers(good)
    for p in good:
        p["fits"] = fits(p, part)
        p["fractions"] = {k: p[k] / PARTS[part][k] for k in ("lut", "ff", "dsp", "bram36")}
        p["compared"] = sorted(p["host_layers"]) == host
    compared = [p for p in good if p["compared"]]
    plain = [p for p in compared if not p["requant_lanes"]]
    return {
        "suite": "dse",
        "part": part,
        "family": fam,
        "model": model,
        "trials": trials,
        "workers": workers if scheduler is None else None,
        "scheduler": scheduler,
        "seconds": time.perf_counter() - start,
        "points": points,
        "host_layers_compared": host,
        "fronts": fronts(compared) if compared else {},
        "fronts_without_unit": fronts(plain) if plain else {},
        "synthesized": sum(bool(p.get("synthesized")) for p in good),
    }


def _evaluate_all(
    jobs: list, workers: int, scheduler: str | None, function=evaluate, processes: bool = True
):
    """Each job's point as it completes: on Dask, or here in turn (`workers` 0, no scheduler)."""
    if workers == 0 and scheduler is None:
        yield from (function(*job) for job in track(jobs, "design points"))
        return
    from distributed import Client, LocalCluster, as_completed

    cluster = None
    if scheduler is None:
        # no dashboard, and its HTTP server on a free port: at None it still takes 8787 and
        # warns when another cluster (a second sweep, the tuner) holds it
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=":0",
            scheduler_kwargs={"dashboard": False},
        )
    client = Client(cluster) if scheduler is None else dask_client(scheduler)
    try:
        futures = {client.submit(function, *job, pure=False): job for job in jobs}
        for future in track(as_completed(futures), "design points", total=len(futures)):
            try:
                yield future.result()
            except Exception as exc:  # a worker died, or the task raised: this point failed
                name = futures[future][0]
                yield {"name": name, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
