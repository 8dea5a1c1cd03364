"""The whole-network suites run ResNet-18 and MobileNetV2 end to end on the simulator (slow:
~50 s and ~60 s, each also on the preset's twin with the requantization unit)."""

import pytest

from tilecraft.benchmarks import resnet18
from tilecraft.boards import resolve_config


@pytest.mark.slow
def test_resnet18_suite():
    r = resnet18.run(resolve_config(resnet18.PRESET), calibration=1)
    assert r["bit_exact_vs_reference"] and r["accelerator_mac_share"] == 1.0
    assert r["accelerator_programs"] == 1 and r["chained_layers"] == 22  # the whole network
    assert len(r["layers"]) == 22 and all(x["cycles"] > x["ideal_cycles"] for x in r["layers"])
    assert r["layers"][0]["name"] == "conv_2+maxpool_9"  # the pool on conv1's accumulators
    assert r["modeled_latency_ms"] > r["accelerator_ms"] > 70  # the 16x16 @ 100 MHz floor: ~71
    assert r["arena_peak_bytes"] >= r["arena_lower_bound_bytes"] > 0
    assert r["output_sqnr_db"] > 15
    for key in (
        "modeled_latency_ms",
        "accelerator_mac_share",
        "compile_seconds",
        "sim_ratio",
        "arena_peak_bytes",
    ):
        assert key in r
    unit = r["with_unit"]  # the preset's twin with the requantization unit, same run
    assert unit["bit_exact_vs_reference"] and unit["config"] == f"{r['config']}_rq8_rr"
    assert 70 < unit["accelerator_ms"] < r["accelerator_ms"]  # the epilogues off the ALU
    assert "ResNet-18 on" in resnet18.format_table(r) and "_rq8" in resnet18.format_table(r)


@pytest.mark.slow
def test_mobilenet_v2_suite():
    from tilecraft.benchmarks import mobilenet_v2

    r = mobilenet_v2.run(resolve_config(mobilenet_v2.PRESET))
    assert r["bit_exact_vs_reference"] and r["accelerator_mac_share"] == 1.0
    assert r["accelerator_programs"] == 1 and r["chained_layers"] == len(r["layers"])
    depthwise = [x for x in r["layers"] if x["utilization"] and x["utilization"] < 1 / 16]
    assert len(depthwise) >= 17  # the diagonal blocks: at most one product in 16 is the layer's
    unit = r["with_unit"]
    assert unit["bit_exact_vs_reference"] and unit["accelerator_ms"] < r["accelerator_ms"]
    assert "MobileNetV2 on" in mobilenet_v2.format_table(r)
