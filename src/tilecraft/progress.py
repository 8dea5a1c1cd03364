"""Progress for long work (Verilator builds, synthesis, benchmark suites, random-program sweeps),
drawn with rich on stderr when it is a terminal and silent otherwise, so CI logs stay readable.
Set TILECRAFT_PROGRESS=0 to silence it on a terminal too, =1 to force it."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


def enabled() -> bool:
    forced = os.environ.get("TILECRAFT_PROGRESS")
    if forced is not None:
        return forced not in ("", "0")
    return sys.stderr.isatty()


@contextmanager
def task(description: str) -> Iterator[None]:
    """A spinner with the elapsed time while the body runs (one step of unknown length)."""
    if not enabled():
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, transient=True) as progress:
        progress.add_task(description, total=None)
        yield


@contextmanager
def status(description: str) -> Iterator[Callable[[str], None]]:
    """Like `task`, yielding a function that appends a phase to the description (a tool's
    current step, parsed from its log as it runs)."""
    if not enabled():
        yield lambda phase: None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, transient=True) as progress:
        handle = progress.add_task(description, total=None)
        yield lambda phase: progress.update(handle, description=f"{description}: {phase}")


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """`items`, with a bar (done / total, elapsed, remaining) while they are consumed."""
    if not enabled():
        yield from items
        return
    from rich.progress import track as rich_track

    yield from rich_track(items, description=description, total=total, transient=True)
