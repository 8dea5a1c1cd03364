"""Perfetto / Chrome trace JSON: one slice per instruction per stage."""

from __future__ import annotations

import json
from pathlib import Path

from tilecraft.files import write_atomic

# compute-stage instructions are drawn on the unit that runs them (they may overlap)
_TIDS = {"load": 1, "compute": 2, "compute/gemm": 3, "compute/alu": 4, "store": 5}


def chrome_trace(events: list[tuple[str, int, int, int, str]], clock_mhz: float) -> dict:
    """events: (stage, index, start_cycle, end_cycle, label). Times become microseconds."""
    out = [
        {"ph": "M", "pid": 0, "tid": tid, "name": "thread_name", "args": {"name": name}}
        for name, tid in _TIDS.items()
    ]
    for stage, index, start, end, label in events:
        out.append(
            {
                "ph": "X",
                "pid": 0,
                "tid": _TIDS[stage],
                "name": label.split()[0],
                "ts": start / clock_mhz,
                "dur": max(end - start, 0) / clock_mhz,
                "args": {"index": index, "insn": label, "start_cycle": start, "end_cycle": end},
            }
        )
    return {"traceEvents": out, "displayTimeUnit": "ns"}


def write_trace(path: str | Path, trace: dict) -> None:
    write_atomic(path, json.dumps(trace))
