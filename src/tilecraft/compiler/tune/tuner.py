"""The tuner: measure a layer's schedules in batches, each batch proposed by simulated
annealing on the cost model's scores (after a random first batch), with an epsilon share of
random picks; every measurement goes to the records as it ends, and a run resumes from them.
`strategy="random"` is the baseline it is compared with."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tilecraft.compiler.tune.features import NAMES, features
from tilecraft.compiler.tune.measure import Measurer
from tilecraft.compiler.tune.model import CostModel
from tilecraft.compiler.tune.records import Record, Records, tool_version
from tilecraft.compiler.tune.task import Task, schedule_key
from tilecraft.errors import TilecraftError
from tilecraft.ops import ConvSchedule
from tilecraft.serial import from_json

STRATEGIES = ("model", "random")


@dataclass
class TuneResult:
    task: Task
    best: ConvSchedule | None
    best_cycles: int | None
    curve: list[int | None] = field(default_factory=list)  # best so far after each trial
    measured: int = 0  # by this run
    resumed: int = 0  # found in the records
    failed: int = 0
    seconds: float = 0.0


def tune(
    task: Task,
    measurer: Measurer,
    trials: int,
    records: Records | None = None,
    *,
    strategy: str = "model",
    seed: int = 0,
    batch: int = 8,
    epsilon: float = 0.1,
    warm: list | None = None,
    progress: Callable | None = None,
    target: int | None = None,
) -> TuneResult:
    """Measure up to `trials` new schedules of `task` (fewer if the space runs out, or once a
    schedule of at most `target` cycles is found) and return the best one found, counting
    what `records` already held. `warm`: (features, cycles) of other layers, to start from a
    trained model (transfer)."""
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise TilecraftError(f"trials must be a positive whole number, not {trials!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise TilecraftError(f"batch must be a positive whole number, not {batch!r}")
    if strategy not in STRATEGIES:
        raise TilecraftError(f"unknown strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    if not isinstance(task, Task):
        raise TilecraftError(f"task must be a tune.task.Task, not {task!r}")
    if not callable(getattr(measurer, "measure", None)):
        raise TilecraftError(
            f"measurer must be a measurer (tune.measure.measurer(NAME)), not {measurer!r}"
        )
    if not (isinstance(epsilon, (int, float)) and 0 <= epsilon <= 1):
        raise TilecraftError(f"epsilon is a share of each batch, in 0..1, not {epsilon!r}")
    if records is not None:
        _check_records(records, task, measurer)
    start = time.perf_counter()
    space = task.space
    index = {schedule_key(s): i for i, s in enumerate(space)}
    cycles: dict[int, int | None] = {}
    for key, r in (records.of(task.key) if records else {}).items():
        if key in index:
            cycles[index[key]] = r.cycles
    result = TuneResult(task, None, None, resumed=len(cycles))
    for c in cycles.values():
        _advance(result, c)
    x = features(task) if strategy == "model" else None
    rng = np.random.default_rng(seed)
    model = CostModel(seed)

    def reached() -> bool:
        return (
            target is not None and result.best_cycles is not None and result.best_cycles <= target
        )

    while result.measured < trials and len(cycles) < len(space) and not reached():
        size = min(batch, trials - result.measured, len(space) - len(cycles))
        picks = _propose(x, len(space), cycles, size, strategy, model, warm, rng, epsilon)
        batch_results = (
            measurer.measure_many(task, [space[i] for i in picks])
            if hasattr(measurer, "measure_many")
            else None
        )
        for n, i in enumerate(picks):
            if reached() and batch_results is None:  # measured ones are recorded all the same
                break
            r = batch_results[n] if batch_results else measurer.measure(task, space[i])
            cycles[i] = r.cycles
            result.measured += 1
            result.failed += r.cycles is None
            if records is not None:
                records.append(
                    Record(
                        task.key,
                        task.config.digest,
                        schedule_key(space[i]),
                        r.cycles,
                        r.error,
                        records.tool,
                        r.seconds,
                        r.note,
                    )
                )
            _advance(result, r.cycles, space[i])
            if progress is not None:
                progress(result, time.perf_counter() - start)
    result.seconds = time.perf_counter() - start
    if result.best is None:
        result.best = _best_of(space, cycles)
    return result


def _advance(result: TuneResult, c: int | None, schedule: ConvSchedule | None = None) -> None:
    if c is not None and (result.best_cycles is None or c < result.best_cycles):
        result.best_cycles = c
        result.best = schedule
    result.curve.append(result.best_cycles)


def _check_records(records, task: Task, measurer) -> None:
    """Records of another config or another measurer would resume the search from figures that
    are not this one's (and be written under the wrong config or tool)."""
    if not isinstance(records, Records):
        raise TilecraftError(f"records must be tune.records.Records, not {records!r}")
    if records.config != task.config.digest:
        raise TilecraftError(
            f"the records are config {records.config!r}'s; the task is {task.config.tag}'s "
            f"({task.config.digest}): open them with the task's config digest"
        )
    name = getattr(measurer, "name", None)
    if name is not None and records.tool is not None and records.tool != tool_version(name):
        raise TilecraftError(
            f"the records are {records.tool!r}'s; the measurer is {tool_version(name)!r}"
        )


def _best_of(space, cycles: dict) -> ConvSchedule | None:
    done = [(c, i) for i, c in cycles.items() if c is not None]
    return space[min(done)[1]] if done else None


def _propose(
    x, n: int, cycles: dict, size: int, strategy: str, model: CostModel, warm, rng, epsilon: float
) -> list[int]:
    """The next `size` schedules to measure (indices into the space of `n`, none measured)."""
    todo = np.array([i for i in range(n) if i not in cycles])
    ok = [(i, c) for i, c in cycles.items() if c is not None]
    if strategy == "random":
        return [int(i) for i in rng.choice(todo, size=size, replace=False)]
    if len(ok) < size and not warm:  # nothing to learn from yet: the analytic estimate's best
        prior = x[todo, NAMES.index("log_estimate")]
        return _explore(
            [int(i) for i in todo[np.argsort(prior, kind="stable")[:size]]], todo, rng, epsilon
        )
    own = [(x[np.array([i for i, _ in ok])], np.array([c for _, c in ok]))] if ok else []
    model.fit(own + list(warm or []))
    scores = model.score(x)
    picks = anneal(x, scores, cycles, size, rng)
    if len(ok) < size:  # a warm start's first batch: half the estimate's best, half the model's
        prior = [
            int(i) for i in todo[np.argsort(x[todo, NAMES.index("log_estimate")], kind="stable")]
        ]
        half = [i for i in prior if i not in picks][: size // 2]
        picks = picks[: size - len(half)] + half
    return _explore(picks, todo, rng, epsilon)


def _explore(picks: list[int], todo, rng, epsilon: float) -> list[int]:
    """Epsilon-greedy: each pick is replaced by a random unmeasured schedule with
    probability `epsilon`."""
    for slot in range(len(picks)):
        if rng.random() < epsilon:
            left = [i for i in todo if i not in picks]
            if left:
                picks[slot] = int(rng.choice(left))
    return picks


def anneal(
    x: np.ndarray,
    scores: np.ndarray,
    cycles: dict,
    size: int,
    rng,
    chains: int = 8,
    steps: int = 60,
) -> list[int]:
    """Simulated annealing on the model's scores over the space's neighbourhood graph
    (schedules one knob step apart): chains start at the best measured schedules and at
    random ones, and the best-scored unmeasured schedules they visit are returned."""
    n = len(x)
    neighbours = _neighbours(x)
    measured = sorted((c, i) for i, c in cycles.items() if c is not None)
    starts = [i for _, i in measured[: chains // 2]]
    starts += [int(i) for i in rng.choice(n, size=chains - len(starts), replace=True)]
    spread = float(np.std(scores)) or 1.0
    seen = set()
    for here in starts:
        for step in range(steps):
            seen.add(here)
            near = neighbours[here]
            if not near:
                break
            there = near[int(rng.integers(len(near)))]
            temperature = spread * (1.0 - step / steps) + 1e-9
            gain = scores[there] - scores[here]
            if gain >= 0 or rng.random() < np.exp(gain / temperature):
                here = there
        seen.add(here)
    fresh = [i for i in seen if i not in cycles]
    if len(fresh) < size:  # the chains stayed near measured points: the rest by score
        fresh += [i for i in np.argsort(-scores) if i not in cycles and i not in fresh]
    fresh.sort(key=lambda i: -scores[i])
    return [int(i) for i in fresh[:size]]


def _neighbours(x: np.ndarray) -> list[list[int]]:
    """Per schedule, those that differ from it in exactly one knob (the first 7 features:
    tile sizes, order, buffering, slots)."""
    knobs = [tuple(row) for row in np.round(x[:, :7], 6)]
    by_knobs = {k: i for i, k in enumerate(knobs)}
    values = [sorted({k[d] for k in knobs}) for d in range(7)]
    out = []
    for k in knobs:
        near = []
        for d in range(7):
            pos = values[d].index(k[d])
            for step in (-1, 1):
                if 0 <= pos + step < len(values[d]):
                    other = by_knobs.get(k[:d] + (values[d][pos + step],) + k[d + 1 :])
                    if other is not None:
                        near.append(other)
        out.append(near)
    return out


def best_schedule(records: Records, task: Task) -> ConvSchedule | None:
    """The fastest schedule the records hold for `task` (None: none measured)."""
    best = records.best(task.key)
    return from_json(ConvSchedule, json.loads(best.schedule)) if best else None
