"""Every schedule of a layer measured once: the exhaustive baseline the tuner is judged
against, kept as a table (cycles in the space's order; -1 where building failed) with a digest
of the space it belongs to, so a table from another space (another compiler) is refused.
`Replay` measures by looking the table up: the cycle model is deterministic, so replaying it
is measuring it, and a benchmark can run many tuning runs in seconds."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from tilecraft.compiler.tune.measure import Measurer, Result
from tilecraft.compiler.tune.task import Task, schedule_key
from tilecraft.errors import TilecraftError
from tilecraft.jobs import check_jobs, map_jobs


def space_digest(task: Task) -> str:
    h = hashlib.sha256(task.key.encode())
    for s in task.space:
        h.update(schedule_key(s).encode())
    return h.hexdigest()[:16]


CHUNK = 32  # schedules a worker measures per job (a job costs a few ms to hand out)


def measure_all(
    task: Task, measurer: Measurer, progress: Callable | None = None, jobs: int | None = 1
) -> np.ndarray:
    """The cycles of every schedule of `task` (-1: failed), in the space's order; `jobs`
    worker processes measure chunks of the space side by side (None: one per core; with a
    `progress` callback, one job: it is called after each schedule)."""
    n = len(task.space)
    if progress is None and check_jobs(jobs) > 1:
        chunks = [range(a, min(a + CHUNK, n)) for a in range(0, n, CHUNK)]
        parts = map_jobs(
            partial(_measure_chunk, task, measurer), chunks, jobs, f"measuring {n:,} schedules"
        )
        return np.concatenate(parts) if parts else np.full(0, -1, np.int64)
    out = np.full(n, -1, np.int64)
    start = time.perf_counter()
    for i, s in enumerate(task.space):
        r = measurer.measure(task, s)
        out[i] = r.cycles if r.ok else -1
        if progress is not None:
            progress(i + 1, n, time.perf_counter() - start)
    return out


def _measure_chunk(task: Task, measurer: Measurer, chunk: range) -> np.ndarray:
    out = np.full(len(chunk), -1, np.int64)
    for j, i in enumerate(chunk):
        r = measurer.measure(task, task.space[i])
        out[j] = r.cycles if r.ok else -1
    return out


class Replay:
    """A measurer that looks each schedule up in an exhaustive table."""

    name = "cycle-model"

    def __init__(self, task: Task, cycles: np.ndarray, digest: str):
        if digest != space_digest(task) or len(cycles) != len(task.space):
            raise TilecraftError(
                f"the exhaustive table for {task.op.describe()} belongs to "
                f"another schedule space (measure it again)"
            )
        self.index = {schedule_key(s): i for i, s in enumerate(task.space)}
        self.cycles = cycles

    def measure(self, task, schedule) -> Result:
        c = int(self.cycles[self.index[schedule_key(schedule)]])
        return Result(c, None, 0.0) if c >= 0 else Result(None, "failed when measured", 0.0)
