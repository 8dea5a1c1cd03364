"""The gpu-fallback suite: without a GPU it stops with the gpu device's error; its per-network
check (every tensor against the integer reference) is run here with the GPU kernels compiled
for the CPU in the GPU's place, and catches a device that computes a wrong value."""

import re

import numpy as np
import pytest
from network_models import tiny_resnet

pytest.importorskip("llvmlite", reason="the GPU kernels need llvmlite (the llvm extra)")

from tilecraft.benchmarks import gpu_fallback as G  # noqa: E402
from tilecraft.compiler.llvm.compute import JitCompute  # noqa: E402
from tilecraft.errors import DeviceError  # noqa: E402
from tilecraft.hw.config import preset  # noqa: E402
from tilecraft.runtime.cpu import CpuDevice  # noqa: E402


def _off(v: np.ndarray) -> np.ndarray:
    return v if v.dtype != np.int8 else np.where(v == 0, 1, v).astype(v.dtype)


class Off(JitCompute):
    """The CPU's kernels with every int8 result one too high somewhere: a wrong GPU, through
    both of the device's ways in (a chain's layers bound once, a lone computation)."""

    def outputs(self, comp, tensors):
        return {k: _off(v) for k, v in super().outputs(comp, tensors).items()}

    def bind(self, comp, fixed):
        given, call = super().bind(comp, fixed)
        return given, lambda *values: _off(call(*values))


@pytest.fixture
def jit(tmp_path):
    from tilecraft.compiler.llvm.cache import KernelCache
    from tilecraft.compiler.llvm.jit import Jit

    return Jit(KernelCache(tmp_path))


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(G.MODELS, "tiny", lambda seed: tiny_resnet(seed=7, depthwise=True))


@pytest.mark.slow
def test_each_network_is_checked_tensor_by_tensor(jit, tiny):
    cfg, cpu = preset("default"), CpuDevice(JitCompute(jit))
    good = G._network("tiny", cfg, CpuDevice(JitCompute(jit, direct=True)), cpu, repeats=1)
    assert good["bit_exact"] and good["cpu_bit_exact"] and good["mismatched"] == []
    assert good["gpu_ms"] > 0 and good["gpu_vs_cpu"] == good["gpu_ms"] / good["cpu_ms"]
    bad = G._network("tiny", cfg, CpuDevice(Off(jit, direct=True)), cpu, repeats=1)
    assert not bad["bit_exact"] and bad["mismatched"]
    table = G.format_table(
        {"gpu": "stand-in", "compute_capability": "0.0", "networks": [good, bad]}
    )
    assert "tiny" in table and "True" in table and "False" in table


def test_without_a_gpu_the_suite_says_so():
    try:
        from tilecraft.runtime.gpu import cuda

        cuda()
        pytest.skip("this machine has a GPU")
    except DeviceError:
        pass
    with pytest.raises(DeviceError, match="no CUDA GPU here|needs cuda.core"):
        G.run(preset("default"))


def test_the_table_names_the_software_a_run_recorded():
    from tilecraft.benchmarks.tables import RENDER

    run = {"gpu": "stand-in", "compute_capability": "9.0", "networks": []}
    assert RENDER["gpu-fallback"](run).startswith("On stand-in (compute capability 9.0):")
    run["software"] = {"driver_cuda": "13.0", "cuda_core": "1.2.2", "llvmlite": "0.50.0"}
    head = RENDER["gpu-fallback"](run).splitlines()[0]
    assert head == (
        "On stand-in (compute capability 9.0); driver CUDA 13.0, cuda.core 1.2.2, llvmlite 0.50.0:"
    )


@pytest.mark.gpu
def test_a_gpu_run_records_its_driver_and_packages():
    try:
        from tilecraft.runtime.gpu import cuda

        cuda()
    except DeviceError:
        pytest.skip("no CUDA GPU here")
    sw = G._software()
    assert re.fullmatch(r"\d+\.\d+", sw["driver_cuda"]), sw
    assert all(sw[k] for k in ("cuda_core", "cuda_bindings", "llvmlite")), sw
