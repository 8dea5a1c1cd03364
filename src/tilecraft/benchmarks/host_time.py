"""The host's part of a modeled latency: the host steps and the packing around the
accelerator's steps, measured here, warm (`runtime.executor.steady_host_seconds`), on the
generated host kernels (`compiler.llvm.host.LlvmKernels`: the code `tilecraft compile
--host-target` builds into a board's library and `tilecraft run --kernels` runs), and on
numpy (what a board runs without that library) in the same process for comparison. Without
llvmlite (the `llvm` extra) numpy's time is the figure."""

from __future__ import annotations

from functools import cache

from tilecraft.runtime.executor import steady_host_seconds


@cache
def generated_kernels():
    """The generated host kernels, JIT-compiled here (one JIT for the process); None without
    llvmlite."""
    try:
        from tilecraft.compiler.llvm.host import LlvmKernels
    except ImportError:
        return None
    return LlvmKernels()


def host_times(model, run, kernels) -> dict:
    """`host_ms_measured_here` (on `kernels`, or numpy's when None), `host_ms_numpy` and
    which kernels the first is (`host_kernels`) for `run` (a run of `model` made with
    keep)."""
    numpy_ms = 1e3 * steady_host_seconds(model, run)
    if kernels is None:
        return {
            "host_ms_measured_here": numpy_ms,
            "host_ms_numpy": numpy_ms,
            "host_kernels": "numpy",
        }
    kernels.prepare(model)  # compiled all at once, not inside the first timed call
    return {
        "host_ms_measured_here": 1e3 * steady_host_seconds(model, run, kernels),
        "host_ms_numpy": numpy_ms,
        "host_kernels": "generated",
    }
