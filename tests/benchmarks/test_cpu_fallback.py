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
