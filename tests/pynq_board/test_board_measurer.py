"""The tuner's board measurer (`--measure pynq`) through the pynq device on a simulated board:
the cycles the CYCLES register gives, and a hung run recorded as a failure, not raised."""

from __future__ import annotations

import pytest

pytest.importorskip("pynq.overlay")

from tilecraft.compiler.tune.measure import Board, CycleModel  # noqa: E402
from tilecraft.compiler.tune.task import Task  # noqa: E402
from tilecraft.ops import Conv2d  # noqa: E402


def test_the_board_measures_what_the_cycle_model_says(pynq_z1, make_board, monkeypatch):
    design, bit = pynq_z1
    fake = make_board(design)
    task = Task(design.config, Conv2d(1, 16, 8, 8, 32, kernel=3, stride=1, pad=1))
    schedules = list(task.space[:3])
    monkeypatch.setenv("TILECRAFT_BITFILE", str(bit))
    board = Board()
    got = [board.measure(task, s) for s in schedules]
    want = [CycleModel().measure(task, s) for s in schedules]
    assert [r.cycles for r in got] == [r.cycles for r in want] and all(r.ok for r in got)
    assert fake.accelerator.runs == 3
    fake.accelerator.hang = True
    hung = Board(str(bit), timeout_s=0.05).measure(task, schedules[0])
    assert not hung.ok and hung.error.startswith("DeviceTimeout: program")
