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


@pytest.mark.slow
def test_resnet18_quantized_by_onnxruntime_is_one_program():
    """onnxruntime's own QDQ ResNet-18 and MobileNetV2 (int8, and uint8 with zero points):
    their scales, integers and residual Adds kept, one program each; the first int8 tensor
    (ResNet-18's: the first conv's, pooled in its program) equal to onnxruntime's but for
    near-halves, ResNet-18's logits within two steps;
    the convs onnxruntime itself runs in float32 counted. On the preset with the unit and
    `--requant onnxruntime`, the uint8 models give onnxruntime's logits and every tensor
    (~150 s)."""
    pytest.importorskip("onnxruntime")
    from tilecraft.benchmarks import onnxruntime_resnet18 as suite

    r = suite.run(resolve_config(suite.PRESET))
    assert len(r["variants"]) == 4
    for name, v in r["variants"].items():
        layers = list(v["layer_equal_fraction"].values())
        assert v["programs"] == 1 and len(layers) >= 29, name  # every quantized tensor made
        assert layers[0] > 0.999, (name, layers[0])
        assert 0 <= v["float_convs"] <= v["convs"] >= 20, name  # onnxruntime's float32 convs
        if "mobilenet" not in name:
            assert v["max_steps"] <= 2, (name, v["max_steps"])
            assert v["modeled_latency_ms"] > 79, name  # exact requantization: more ALU passes
        # the preset's twin with the requantization unit, in the same run
        e, unit = v["onnxruntime_exact"], v["with_unit"]
        assert unit["modeled_latency_ms"] < v["modeled_latency_ms"], name
        assert e["simulator_matches_reference"] and e["tensors_compared"] >= 29, name
        for times in (v, unit, e):  # modeled: the accelerator's time and the host's (the Adds)
            ms = times.get("accelerator_ms", times.get("modeled_accelerator_ms"))
            assert times["modeled_latency_ms"] == pytest.approx(
                ms + times["host_ms_measured_here"]
            ), name
        if name.endswith("uint8"):  # onnxruntime's every rounding: its logits, every tensor
            assert e["equal_fraction"] == 1.0 and e["max_steps"] == 0, (name, e)
            assert e["tensors_equal"] == e["tensors_compared"], (name, e)
        else:  # the convs onnxruntime leaves in float32 are not reproduced
            assert v["float_convs"] > 0 and e["tensors_equal"] < e["tensors_compared"], name
    assert r["unit_config"].endswith("_rq8_rr") and "int8" in suite.format_table(r)
