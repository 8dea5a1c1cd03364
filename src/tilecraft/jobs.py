"""Independent compile work side by side, one worker process per core this process may use.

A layer's schedule search (rank, build the best candidates, time them on the cycle model) needs
nothing from any other layer, so a network's layers are compiled in parallel. Workers are
forked: the parent's imports and the network's arrays are theirs at no cost, and only each
result (a `Program`, a few MB at most) comes back through a pipe. Results come back in input
order; a worker's exception is raised here as itself, and the work not yet started is dropped.

The work runs here, in order, when one job is asked for or there is one item, where fork is
not the platform's way (spawn would re-import everything for every worker), off the main
thread, and in a daemonic process (a Dask worker of a design-space sweep, one of many already).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from tilecraft.errors import ScheduleError, TilecraftError
from tilecraft.progress import track

T = TypeVar("T")
R = TypeVar("R")

_WORK: tuple[Callable, Sequence] | None = None  # the map in progress, inherited by the workers


def available_jobs() -> int:
    """The cores this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def check_jobs(jobs: int | None) -> int:
    """`jobs`, or the available cores for None; anything but a positive whole number is refused."""
    if jobs is None:
        return available_jobs()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ScheduleError(
            f"jobs must be a positive whole number (or None: one per core); got {jobs!r}"
        )
    return jobs


def can_fork() -> bool:
    """Whether workers may be forked from here: where fork is the platform's way, from the
    main thread of a process that is not a daemon (one map at a time, and no fork of a thread
    whose siblings may hold locks)."""
    return (
        "fork" in multiprocessing.get_all_start_methods()
        and not multiprocessing.current_process().daemon
        and threading.current_thread() is threading.main_thread()
    )


def map_jobs(
    fn: Callable[[T], R],
    items: Sequence[T],
    jobs: int | None,
    description: str,
    fewer: str = "jobs=1, --jobs 1",
) -> list[R]:
    """`[fn(x) for x in items]` on up to `jobs` worker processes (None: one per core), with a
    progress bar; put the longest items first, the workers take them in order. `fewer`: how
    the caller's user asks for one job, for the message when a worker dies."""
    n = min(check_jobs(jobs), len(items))
    if n <= 1 or not can_fork():
        return [fn(x) for x in track(items, description)]
    global _WORK
    _WORK = (fn, items)
    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
    try:
        futures = [pool.submit(_run, i) for i in range(len(items))]
        for future in track(as_completed(futures), description, total=len(futures)):
            future.result()  # the first failure stops the map
        return [f.result() for f in futures]
    except BrokenProcessPool as exc:
        raise TilecraftError(
            f"a worker process died while {description} (killed, or out of memory: {n} "
            f"workers each hold a copy of what they change); run with one job ({fewer})"
        ) from exc
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _WORK = None


def _run(index: int):
    fn, items = _WORK
    return fn(items[index])


def dask_client(scheduler: str, timeout: str = "10s"):
    """A Dask client of the scheduler at `scheduler` (tcp://host:8786), or a TilecraftError
    naming the address and what went wrong (a malformed address, nothing answering)."""
    from distributed import Client

    from tilecraft.errors import TilecraftError

    try:
        return Client(scheduler, timeout=timeout)
    except (ValueError, OSError, TimeoutError) as exc:
        raise TilecraftError(
            f"cannot reach the Dask scheduler {scheduler!r} ({type(exc).__name__}: {exc}); give "
            f"an address like tcp://host:8786 that a `dask scheduler` listens on"
        ) from None
