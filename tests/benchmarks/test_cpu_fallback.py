"""The cpu-fallback suite runs end to end: every case checked against numpy, the JSON keys
benchmarks README names, and (with emulation) the ARM builds' instruction counts."""

import pytest

pytest.importorskip("llvmlite", reason="the host kernels need llvmlite (the llvm extra)")


@pytest.mark.slow
def test_cpu_fallback_suite_reports_every_case():
    from tilecraft.benchmarks import cpu_fallback

    r = cpu_fallback.run(repeats=1, emulate=False, networks=False)
    assert r["ok"], [c["name"] for c in r["cases"] if not c["matches_numpy"]]
    names = {(c["name"], c["dtype"]) for c in r["cases"]}
    assert ("conv3x3_64to64_56x56", "float32") in names and ("dense_512to1000", "int8") in names
    for case in r["cases"]:
        assert {"name", "dtype", "ours_ms", "numpy_ms", "onnxruntime_ms"} <= set(case)
        assert case["ours_ms"] > 0 and case["numpy_ms"] > 0
    assert r["conv_max_vs_numpy"] > 0
    text = cpu_fallback.format_table(r)
    assert "conv3x3_64to64_56x56" in text and "one thread" in text


@pytest.mark.slow
def test_a_network_quantized_by_onnxruntime_runs_whole_on_the_kernels(tmp_path):
    """The int8 network cases: onnxruntime quantizes the model (here MobileNetV2 with uint8
    activations and zero points), tilecraft compiles it and runs it whole on the cpu device,
    bit-exact with the reference, timed beside onnxruntime's session on the same file."""
    pytest.importorskip("onnxruntime")
    from tilecraft.benchmarks import cpu_fallback
    from tilecraft.compiler.llvm.cache import KernelCache
    from tilecraft.compiler.llvm.jit import Jit

    jit = Jit(KernelCache(tmp_path / "kernels"))
    r = cpu_fallback._quantized_network(jit, "mobilenet_v2", "uint8", 1, str(tmp_path))
    assert r["matches_numpy"], "the cpu device's outputs differ from the reference's"
    assert (r["name"], r["dtype"]) == ("mobilenet_v2_network", "uint8")
    assert r["ours_ms"] > 0 and r["onnxruntime_ms"] > 0 and r["first_run_s"] > 0
    assert jit.built > 0  # the first run compiled the network's kernels


def test_the_cortex_a9_estimate_states_its_arithmetic():
    """The A9's time is an estimate: the emulated instructions per MAC of its int8 conv x a
    network's MACs at the stated clock and rate; none without the emulated count."""
    from tilecraft.benchmarks import cpu_fallback as cf

    rows = [
        {"name": "resnet18_network", "dtype": "int8", "macs": 1_300_000_000},
        {"name": "resnet18_network", "dtype": "float32", "macs": 0},
    ]
    arm = [
        {"target": "aarch64", "emulated": [{"name": cf.A9["kernel"], "instructions_per_mac": 9}]},
        {"target": "armv7", "emulated": [{"name": cf.A9["kernel"], "instructions_per_mac": 0.5}]},
    ]
    est = cf.a9_estimate(rows, arm)
    seconds = 0.5 * 1.3e9 / (est["clock_mhz"] * 1e6 * est["instructions_per_cycle"])
    assert est["networks"] == {
        "resnet18_network (int8)": {"macs": 1_300_000_000, "estimate_ms": seconds * 1e3}
    }
    assert est["clock_source"] and est["ipc_source"]  # every assumption says where it is from
    assert cf.a9_estimate(rows, arm[:1]) is None
