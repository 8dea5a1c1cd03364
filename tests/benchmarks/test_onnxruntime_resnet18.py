"""The onnxruntime-resnet18 suite: ResNet-18 and MobileNetV2 quantized by onnxruntime itself, end
to end on the simulator (slow: ~150 s; a file of its own, so that a worker runs it beside the
other network suites)."""

import pytest

from tilecraft.boards import resolve_config


@pytest.mark.slow
def test_networks_quantized_by_onnxruntime_are_one_program_each():
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
