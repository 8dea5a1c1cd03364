"""Measuring on a Dask LocalCluster: the same cycles as measuring here, chunks per worker, and
a chunk whose worker dies resubmitted once with the records saying so."""

import os

import pytest

from tilecraft.compiler.tune import measure as M
from tilecraft.compiler.tune.records import Records, tool_version
from tilecraft.compiler.tune.task import Task
from tilecraft.compiler.tune.tuner import tune
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d

pytest.importorskip("distributed", reason="distributed measurement needs dask (the tune extra)")
pytest.importorskip("xgboost", reason="the cost model needs xgboost (the tune extra)")
TASK = Task(preset("default"), Conv2d(1, 16, 8, 8, 32, kernel=3, stride=1, pad=1))


class DiesOnce(M.CycleModel):
    """Kills its worker process the first time (a marker file says it happened)."""

    name = "cycle-model"

    def measure(self, task, s):
        marker = os.environ["TILECRAFT_TEST_MARKER"]
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)
        return super().measure(task, s)


@pytest.fixture(scope="module")
def cluster():
    from tilecraft.compiler.tune.distributed import DaskMeasurer

    meter = DaskMeasurer("sim", workers=2)
    yield meter
    meter.close()


def test_the_cluster_measures_what_this_process_does(cluster, tmp_path):
    local = M.CycleModel()
    schedules = list(TASK.space[:6])
    remote = cluster.measure_many(TASK, schedules)
    assert [r.cycles for r in remote] == [local.measure(TASK, s).cycles for s in schedules]
    records = Records(tmp_path / "r.jsonl", TASK.config.digest, tool_version(cluster.name))
    result = tune(TASK, cluster, 16, records, seed=0)
    assert result.measured == 16 and len(records.of(TASK.key)) == 16


@pytest.mark.slow
def test_a_dead_worker_is_retried_and_noted(cluster, tmp_path, monkeypatch):
    marker = tmp_path / "died"
    monkeypatch.setenv("TILECRAFT_TEST_MARKER", str(marker))
    cluster.client.run(lambda: os.environ.update(TILECRAFT_TEST_MARKER=str(marker)))
    monkeypatch.setitem(M.MEASURERS, "dies-once", DiesOnce)
    cluster.client.run(lambda: M.MEASURERS.update({"dies-once": DiesOnce}))
    cluster.measure_name = "dies-once"
    try:
        results = cluster.measure_many(TASK, [TASK.space[0]])
    finally:
        cluster.measure_name = "sim"
    assert marker.exists() and results[0].ok and "retried" in results[0].note


class Slow(M.CycleModel):
    """Takes longer than the test's limit."""

    name = "cycle-model"

    def measure(self, task, s):
        import time

        time.sleep(2.0)
        return super().measure(task, s)


@pytest.mark.slow
def test_a_measurement_past_its_timeout_is_recorded_and_the_run_goes_on(cluster, monkeypatch):
    monkeypatch.setitem(M.MEASURERS, "slow", Slow)
    cluster.client.run(lambda: M.MEASURERS.update({"slow": Slow}))
    cluster.measure_name, cluster.timeout_s = "slow", 0.25
    try:
        results = cluster.measure_many(TASK, [TASK.space[0]])
    finally:
        cluster.measure_name, cluster.timeout_s = "sim", None
    assert not results[0].ok and results[0].error == "timed out after 0.25 s"
    assert cluster.measure_many(TASK, [TASK.space[1]])[0].ok  # the cluster still measures


def test_bad_measurer_options_are_refused(monkeypatch):
    from tilecraft.compiler.tune.distributed import DaskMeasurer
    from tilecraft.errors import TilecraftError

    with pytest.raises(TilecraftError, match="timeout must be positive, not 0"):
        DaskMeasurer("sim", timeout_s=0)
    with pytest.raises(TilecraftError, match="unknown measurer 'fpga'; valid: sim, rtl, pynq"):
        DaskMeasurer("fpga")
    monkeypatch.delenv("TILECRAFT_BITFILE", raising=False)
    with pytest.raises(TilecraftError, match="needs the overlay's bitstream: --bitfile"):
        M.measurer("pynq")
