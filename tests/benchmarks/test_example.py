"""The main job: the double-buffered GEMM beats the same tiles serialized, both bit-exact."""

from __future__ import annotations

from tilecraft.benchmarks.example import run_example
from tilecraft.hw.config import preset


def test_overlap_beats_serialized_tokens_and_both_are_exact():
    r = run_example(preset("default"), 64, 256, 128)
    assert r.ok and r.overlap.bit_exact and r.serial.bit_exact
    assert r.tiles == r.overlap.program.schedule
    assert not r.serial.program.schedule.overlap
    assert r.speedup > 1.25
    assert r.overlap.report.gemm_utilization > r.serial.report.gemm_utilization
    data = r.to_dict()
    assert data["speedup"] == r.serial.report.cycles / r.overlap.report.cycles
    assert "bit-exact vs numpy" in r.format()
