"""Building a simulation model is one process's work at a time: a second process asking for the
same model waits until the first is done (two test workers, two commands at once)."""

import multiprocessing
import time

import pytest

from tilecraft.sim.rtl.build import _one_builder

fcntl = pytest.importorskip("fcntl", reason="advisory locks are POSIX")


def _hold(lock, log, entered):
    with _one_builder(lock):
        log.write_text("a")
        entered.set()
        time.sleep(0.3)  # the other process tries to enter meanwhile
        log.write_text(log.read_text() + "b")


def test_a_second_builder_waits_for_the_first(tmp_path):
    ctx = multiprocessing.get_context("fork")
    lock, log, entered = tmp_path / "model.lock", tmp_path / "log", ctx.Event()
    child = ctx.Process(target=_hold, args=(lock, log, entered))
    child.start()
    assert entered.wait(30)
    with _one_builder(lock):  # blocks until the child has finished
        log.write_text(log.read_text() + "c")
    child.join(30)
    assert child.exitcode == 0
    assert log.read_text() == "abc"


def _model(root, name, age_s, now, built=True):
    import os

    d = root / name
    d.mkdir()
    mark = d / "built.ok" if built else d
    if built:
        mark.write_text("key")
    os.utime(mark, (now - age_s, now - age_s))
    return d


def test_old_models_beyond_the_recent_ones_are_removed(tmp_path):
    from tilecraft.sim.rtl.build import prune

    now = 1_000_000.0
    hour = 3_600
    recent = [_model(tmp_path, f"recent{i}", i * 60, now) for i in range(3)]
    young = _model(tmp_path, "young", hour / 2, now)  # beyond `keep`, but just used
    old = [_model(tmp_path, f"old{i}", 2 * hour + i, now) for i in range(3)]
    broken = _model(tmp_path, "unfinished", 3 * hour, now, built=False)
    runtime = _model(tmp_path, ".runtime", 4 * hour, now, built=False)  # objcache's, not a model
    removed = prune(tmp_path, keep=3, now=now)
    assert set(removed) == {*old, broken} and runtime.exists()
    assert all(d.exists() for d in [*recent, young]) and not any(d.exists() for d in old)


def test_a_model_another_process_holds_is_not_removed(tmp_path):
    from tilecraft.sim.rtl.build import _lock_of, prune

    now = 1_000_000.0
    held = _model(tmp_path, "held", 5 * 86_400, now)
    ctx = multiprocessing.get_context("fork")
    entered, release = ctx.Event(), ctx.Event()

    def hold():
        with _one_builder(_lock_of(held)):
            entered.set()
            release.wait(30)

    child = ctx.Process(target=hold)
    child.start()
    assert entered.wait(30)
    try:
        assert prune(tmp_path, keep=0, now=now) == [] and held.exists()
    finally:
        release.set()
        child.join(30)
    assert prune(tmp_path, keep=0, now=now) == [held] and not held.exists()
