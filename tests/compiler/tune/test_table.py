"""Exhaustive tables: every schedule measured once, replayed as a measurer, refused for another
space; a tuning run stops once it reaches its target."""

import pytest

from tilecraft.compiler.tune.measure import Result
from tilecraft.compiler.tune.table import Replay, measure_all, space_digest
from tilecraft.compiler.tune.task import Task
from tilecraft.compiler.tune.tuner import tune
from tilecraft.errors import TilecraftError
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d, Epilogue

pytest.importorskip("xgboost", reason="the cost model needs xgboost (the tune extra)")
TASK = Task(preset("default"), Conv2d(1, 32, 4, 4, 32, kernel=3, stride=1, pad=1))


class Counting:
    name = "stand-in"

    def measure(self, task, s) -> Result:
        fails = s.tile_oc == 1 and s.tile_ic == 1
        return (
            Result(None, "no", 0.0)
            if fails
            else Result(1000 + 37 * s.tile_oc + 11 * s.tile_ic * s.tile_oh, None, 0.0)
        )


def test_a_table_replays_what_was_measured():
    cycles = measure_all(TASK, Counting())
    assert (cycles == -1).sum() > 0 and len(cycles) == len(TASK.space)
    replay = Replay(TASK, cycles, space_digest(TASK))
    for i in (0, len(cycles) // 2, len(cycles) - 1):
        r = replay.measure(TASK, TASK.space[i])
        assert (r.cycles if r.ok else -1) == cycles[i]


def test_a_table_measured_on_workers_is_the_one_measured_here():
    assert (measure_all(TASK, Counting(), jobs=2) == measure_all(TASK, Counting())).all()
    assert len(measure_all(TASK, Counting(), jobs=2)) == len(TASK.space) > 32  # several chunks


def test_a_table_of_another_space_is_refused():
    other = Task(
        preset("default"), Conv2d(1, 32, 4, 4, 32, kernel=3, stride=1, pad=1), Epilogue(bias=True)
    )
    cycles = measure_all(TASK, Counting())
    with pytest.raises(TilecraftError, match="another schedule space"):
        Replay(other, cycles, space_digest(TASK))


def test_a_run_stops_at_its_target():
    cycles = measure_all(TASK, Counting())
    best = int(cycles[cycles >= 0].min())
    replay = Replay(TASK, cycles, space_digest(TASK))
    r = tune(TASK, replay, len(TASK.space), target=best, seed=3)
    assert r.best_cycles == best and r.measured < len(TASK.space)
    assert r.curve[-1] == best and r.curve.count(best) == 1  # stopped when it got there
