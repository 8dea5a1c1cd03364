"""Compile work side by side: results in input order from other processes, a worker's error
raised here as itself, bad job counts refused, and a network compiled on two workers
byte-identical to one compiled in order."""

import os

import numpy as np
import pytest

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import preset
from tilecraft.jobs import can_fork, check_jobs, map_jobs
from tilecraft.models.zoo import resnet18

forks = pytest.mark.skipif(not can_fork(), reason="this platform does not fork")


def _square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def _refuse_three(x: int) -> int:
    if x == 3:
        raise ScheduleError(f"item {x} refused")
    return x


@forks
def test_results_come_back_in_order_from_worker_processes():
    out = map_jobs(_square_and_pid, list(range(12)), 2, "squaring")
    assert [v for v, _ in out] == [x * x for x in range(12)]
    assert os.getpid() not in {pid for _, pid in out}


def test_one_job_runs_here_in_order():
    out = map_jobs(_square_and_pid, [3, 1, 2], 1, "squaring")
    assert out == [(9, os.getpid()), (1, os.getpid()), (4, os.getpid())]
    assert map_jobs(_square_and_pid, [], None, "nothing") == []


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_workers_error_is_raised_here_as_itself(jobs):
    with pytest.raises(ScheduleError, match="item 3 refused"):
        map_jobs(_refuse_three, list(range(6)), jobs, "refusing")


@pytest.mark.parametrize("jobs", [0, -2, 1.5, True, "2"])
def test_bad_job_counts_are_refused(jobs):
    with pytest.raises(ScheduleError, match=f"jobs must be a positive whole number.*{jobs!r}"):
        check_jobs(jobs)
    with pytest.raises(ScheduleError, match="jobs must be"):
        map_jobs(_square_and_pid, [1, 2], jobs, "squaring")


def test_none_means_one_job_per_available_core():
    assert check_jobs(None) >= 1
    assert check_jobs(3) == 3


@pytest.mark.slow
@forks
def test_a_network_compiled_on_two_workers_is_the_one_compiled_in_order():
    """A small ResNet-18 (layers of one shape share a job; four jobs run on two workers)."""
    graph = import_model(resnet18(seed=3, classes=10, size=32))
    data = random_calibration(graph, 1)
    serial = compile_network(graph, preset("default"), data, jobs=1)
    parallel = compile_network(graph, preset("default"), data, jobs=2)
    assert len(serial.model.programs) == len(parallel.model.programs) >= 1
    for a, b in zip(serial.model.programs, parallel.model.programs):
        assert a.name == b.name
        np.testing.assert_array_equal(a.insns, b.insns)
        np.testing.assert_array_equal(a.uops, b.uops)
        assert a.constants.keys() == b.constants.keys()
        for k in a.constants:
            np.testing.assert_array_equal(a.constants[k], b.constants[k], err_msg=k)
    assert serial.layer_programs.keys() == parallel.layer_programs.keys()
    for name, p in serial.layer_programs.items():
        assert p.schedule == parallel.layer_programs[name].schedule, name


def test_off_the_main_thread_the_work_runs_in_that_thread():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        out = pool.submit(map_jobs, _square_and_pid, [1, 2, 3], 2, "squaring").result()
    assert {pid for _, pid in out} == {os.getpid()}


def _unverified(x: int) -> int:
    from tilecraft.errors import VerifyError

    if x == 2:
        raise VerifyError("raw", "reads inp rows written by instruction 1", 5, "GEMM ...")
    return x


@forks
def test_an_error_with_fields_comes_back_with_them():
    from tilecraft.errors import VerifyError

    with pytest.raises(VerifyError) as info:
        map_jobs(_unverified, [0, 1, 2, 3], 2, "verifying")
    assert (info.value.rule, info.value.index, info.value.insn) == ("raw", 5, "GEMM ...")


def _die_on_two(x: int) -> int:
    if x == 2:
        os._exit(9)  # as the kernel's OOM killer would leave it
    return x


@forks
def test_a_worker_that_dies_is_named_with_the_way_out():
    from tilecraft.errors import TilecraftError

    with pytest.raises(TilecraftError, match=r"worker process died while dying.*--jobs 1"):
        map_jobs(_die_on_two, [0, 1, 2, 3], 2, "dying")


def test_a_dask_scheduler_that_cannot_be_reached_is_named():
    pytest.importorskip("distributed")
    from tilecraft.errors import TilecraftError
    from tilecraft.jobs import dask_client

    with pytest.raises(
        TilecraftError, match=r"cannot reach the Dask scheduler 'bogus' \(ValueError"
    ):
        dask_client("bogus")
    with pytest.raises(TilecraftError, match="tcp://127.0.0.1:9"):
        dask_client("tcp://127.0.0.1:9", timeout="1s")  # nothing listens on the discard port
