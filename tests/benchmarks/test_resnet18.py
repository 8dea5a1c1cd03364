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
    # the host on the generated kernels (the dev install has llvmlite), numpy's beside it
    assert r["host_kernels"] == "generated" and r["host_ms_numpy"] > 0
    assert r["modeled_latency_ms"] == r["accelerator_ms"] + r["host_ms_measured_here"]
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


def test_the_host_is_timed_on_the_generated_kernels_and_on_numpy():
    """`host_times`: the generated kernels' time is the figure, numpy's is beside it; without
    kernels (no llvmlite) numpy's is both."""
    import numpy as np
    from network_models import tiny_resnet

    from tilecraft.benchmarks.host_time import host_times
    from tilecraft.compiler.frontend import import_model
    from tilecraft.compiler.graph.network import compile_network
    from tilecraft.compiler.llvm.host import LlvmKernels, host_entries, layout_entries
    from tilecraft.compiler.llvm.jit import Jit
    from tilecraft.compiler.quant.calibrate import random_calibration
    from tilecraft.hw.config import preset
    from tilecraft.runtime import get_device
    from tilecraft.runtime.executor import run_model
    from tilecraft.runtime.model import HostStep

    graph = import_model(tiny_resnet(seed=2))
    model = compile_network(graph, preset("1x16x8"), random_calibration(graph, 1)).model
    x = {"input": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    run = run_model(model, x, get_device("sim"), keep=True)
    kernels = LlvmKernels(Jit(cache=False))
    timed = host_times(model, run, kernels)
    assert timed["host_kernels"] == "generated"
    assert timed["host_ms_measured_here"] > 0 and timed["host_ms_numpy"] > 0
    # compiled for the timing: the host steps' kernels and the programs' layout kernels (the
    # folded first conv's packing among them)
    steps = [(s.op, [model.tensor(i).shape for i in s.inputs]) for s in model.steps
             if isinstance(s, HostStep)]  # fmt: skip
    layouts = layout_entries(model)
    assert any(spec.kind == "pack_im2col" for spec, _ in layouts)
    assert kernels.jit.built == len({spec.symbol for spec, _ in host_entries(steps) + layouts})
    alone = host_times(model, run, None)
    assert alone["host_kernels"] == "numpy"
    assert alone["host_ms_measured_here"] == alone["host_ms_numpy"] > 0
