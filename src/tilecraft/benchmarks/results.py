"""Each suite's last result, kept as data in the package (`results/SUITE.json`): the suite's
own JSON with where it came from (commit, date, machine, command). `tilecraft bench SUITE
--record` writes it; `tilecraft figures` makes the benchmarks README's tables from it
(`tables.py`), so a table and its data cannot drift apart unseen (tests/benchmarks)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

from tilecraft.errors import FormatError
from tilecraft.files import write_atomic

FOLDER = Path(__file__).with_name("results")
KEYS = ("suite", "commit", "date", "machine", "command", "result")


def path_of(suite: str) -> Path:
    return FOLDER / f"{suite}.json"


def machine() -> dict:
    """The machine a result was measured on: what a figure that depends on speed depends on."""
    import numpy as np

    return {
        "system": platform.system(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def commit(here: Path | None = None) -> str:
    """The checkout's commit, `+dirty` when its tracked files differ from it; "unknown" outside
    a git checkout (an installed package). The recorded results and the README's tables made
    from them do not count: recording one suite leaves the tree the next suite measures as it
    was. `here`: the folder holding the results (this package's by default)."""
    here = here or Path(__file__).parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)"]
            + [f":(exclude){p}" for p in ("results", "README.md")],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def record(suite: str, result: dict, command: str, folder: Path | None = None) -> Path:
    """Write `result` as the suite's recorded result, with its provenance."""
    entry = {
        "suite": suite,
        "commit": commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "command": command,
        "result": result,
    }
    path = (folder or FOLDER) / f"{suite}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(entry, indent=1, sort_keys=False) + "\n")
    return path


def load(suite: str, folder: Path | None = None) -> dict | None:
    """The suite's recorded result (None if none is), checked for its provenance fields."""
    path = (folder or FOLDER) / f"{suite}.json"
    if not path.exists():
        return None
    try:
        entry = json.loads(path.read_text())
    except ValueError as e:
        raise FormatError(f"{path}: not JSON ({e})") from None
    missing = [k for k in KEYS if k not in entry]
    if missing or entry.get("suite") != suite:
        raise FormatError(
            f"{path}: a recorded result needs {list(KEYS)} for suite {suite!r}; missing {missing}"
        )
    return entry
