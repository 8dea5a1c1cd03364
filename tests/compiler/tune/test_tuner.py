"""The tuner: on a layer whose every schedule is measured by a stand-in (the analytic estimate
perturbed per schedule, so the optimum is known), it finds the optimum, beats random search
at equal trials, resumes from its records without measuring anything twice, records failures
and goes on; and it works end to end with the cycle model."""

import hashlib

import pytest

from tilecraft.compiler.operator.heuristic import estimate
from tilecraft.compiler.tune.measure import CycleModel, Result, measurer
from tilecraft.compiler.tune.records import Records, tool_version
from tilecraft.compiler.tune.task import Task, schedule_key
from tilecraft.compiler.tune.tuner import best_schedule, tune
from tilecraft.errors import TilecraftError
from tilecraft.hw.config import preset
from tilecraft.hw.timing import Timing
from tilecraft.ops import Conv2d

pytest.importorskip("xgboost", reason="the cost model needs xgboost (the tune extra)")

TASK = Task(preset("default"), Conv2d(1, 128, 28, 28, 128, kernel=3, stride=1, pad=1))


class StandIn:
    """Cycles from the analytic estimate, times a fixed factor in [1, 1.5) per schedule (where
    the estimate is wrong); `fail` schedules fail."""

    name = "stand-in"

    def __init__(self, fail=()):
        self.calls, self.fail = [], set(fail)
        self.t = Timing.from_config(TASK.config)

    def cycles(self, s) -> int:
        noise = int(hashlib.sha256(schedule_key(s).encode()).hexdigest()[:8], 16) / 2**32
        return int(estimate(TASK.config, TASK.mapped, s, self.t) * (1 + 0.5 * noise))

    def measure(self, task, s) -> Result:
        self.calls.append(schedule_key(s))
        if schedule_key(s) in self.fail:
            return Result(None, "ScheduleError: does not fit", 0.0)
        return Result(self.cycles(s), None, 0.0)


@pytest.mark.slow
def test_the_tuner_beats_random_search_at_equal_trials():
    optimum = min(StandIn().cycles(s) for s in TASK.space)
    found = {}
    for strategy in ("model", "random"):
        best = [
            tune(TASK, StandIn(), 48, strategy=strategy, seed=seed).best_cycles for seed in range(3)
        ]
        found[strategy] = sum(b / optimum for b in best) / len(best)
    assert found["model"] < found["random"], found
    assert found["model"] < 1.05, found


class Remembered(CycleModel):
    """The cycle model, remembering what it measured."""

    def __init__(self):
        super().__init__()
        self.seen = {}

    def measure(self, task, s) -> Result:
        self.seen[schedule_key(s)] = r = super().measure(task, s)
        return r


@pytest.mark.slow
def test_every_schedule_measured_on_the_cycle_model_finds_the_optimum():
    small = Task(preset("default"), Conv2d(1, 16, 8, 8, 32, kernel=3, stride=1, pad=1))
    meter = Remembered()
    result = tune(small, meter, len(small.space) + 5)
    assert result.measured == len(small.space) == len(meter.seen)  # the space ran out first
    assert result.best_cycles == min(r.cycles for r in meter.seen.values() if r.ok)


def test_a_run_resumes_from_its_records_and_records_failures(tmp_path):
    path = tmp_path / "tune.jsonl"
    fail = {schedule_key(s) for s in TASK.space[::7]}
    first = StandIn(fail)
    records = Records(path, TASK.config.digest, tool_version(first.name))
    a = tune(TASK, first, 20, records, seed=1)
    second = StandIn(fail)
    again = Records(path, TASK.config.digest, tool_version(second.name))
    b = tune(TASK, second, 20, again, seed=2)
    assert b.resumed == 20 and len(second.calls) == 20
    assert not set(first.calls) & set(second.calls)  # nothing measured twice
    assert b.best_cycles <= a.best_cycles
    kept = Records(path, TASK.config.digest, tool_version("stand-in"))
    failed = [r for r in kept.of(TASK.key).values() if not r.ok]
    assert a.failed + b.failed == len(failed) and all("does not fit" in r.error for r in failed)
    assert best_schedule(kept, TASK) is not None


def test_bad_requests_are_refused():
    with pytest.raises(TilecraftError, match="trials must be a positive whole number, not 0"):
        tune(TASK, StandIn(), 0)
    with pytest.raises(TilecraftError, match="batch must be a positive whole number, not 0"):
        tune(TASK, StandIn(), 4, batch=0)  # it looped without measuring
    with pytest.raises(TilecraftError, match="unknown measurer 'fpga'; valid: sim, rtl"):
        measurer("fpga")
    with pytest.raises(TilecraftError, match="unknown strategy 'grid'"):
        tune(TASK, StandIn(), 3, strategy="grid")


def test_records_of_another_config_or_measurer_are_refused(tmp_path):
    """Another config's records resumed the search from its figures, and the new ones were
    written under the records' config (another measurer's: under its tool)."""
    from tilecraft.compiler.tune.records import Records

    other = Records(tmp_path / "r.jsonl", preset("1x8x8").digest, tool_version("cycle-model"))
    with pytest.raises(TilecraftError, match="the records are config .*; the task is"):
        tune(TASK, CycleModel(), 2, other)
    mine = Records(tmp_path / "s.jsonl", TASK.config.digest, tool_version("rtl"))
    with pytest.raises(TilecraftError, match="the records are 'rtl/tilecraft-.*; the measurer is"):
        tune(TASK, CycleModel(), 2, mine)
    with pytest.raises(TilecraftError, match="records must be tune.records.Records"):
        tune(TASK, CycleModel(), 2, str(tmp_path / "r.jsonl"))
    for bad, message in (
        ({"epsilon": 5}, "epsilon is a share of each batch, in 0..1, not 5"),
        ({"measurer": "sim"}, "measurer must be a measurer"),
    ):
        args = {"task": TASK, "measurer": CycleModel(), "trials": 2, **bad}
        with pytest.raises(TilecraftError, match=message):
            tune(**args)
    with pytest.raises(TilecraftError, match="a task's config must be an HwConfig"):
        Task("default", TASK.op)
    with pytest.raises(TilecraftError, match="fold is None"):
        Task(TASK.config, TASK.op, fold="yes")
