"""The whole-network suite runs ResNet-18 end to end on the simulator (slow: ~30 s)."""

import pytest

from tilecraft.benchmarks import resnet18
from tilecraft.boards import resolve_config


@pytest.mark.slow
def test_resnet18_suite():
    r = resnet18.run(resolve_config(resnet18.PRESET), calibration=1)
    assert r["bit_exact_vs_reference"] and r["accelerator_mac_share"] == 1.0
    assert r["accelerator_programs"] == 1 and r["chained_layers"] == 23  # the whole network
    assert len(r["layers"]) == 23 and all(x["cycles"] > x["ideal_cycles"] for x in r["layers"])
    assert r["modeled_latency_ms"] > r["accelerator_ms"] > 70  # the 16x16 @ 100 MHz floor: ~71
    assert r["arena_peak_bytes"] >= r["arena_lower_bound_bytes"] > 0
    assert r["output_sqnr_db"] > 15
    for key in ("modeled_latency_ms", "accelerator_mac_share", "compile_seconds", "sim_ratio",
                "arena_peak_bytes"):  # fmt: skip
        assert key in r
    assert "ResNet-18 on" in resnet18.format_table(r)
