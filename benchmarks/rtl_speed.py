"""rtl-speed: a fixed conv layer program on the generated Verilog under cocotb + Verilator
(BENCHMARKS.md): simulated cycles per wall-clock second, and the cycle model's error."""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.conv2d import conv2d
from tilecraft.compiler.ops import Conv2d, Epilogue
from tilecraft.hw.config import HwConfig
from tilecraft.runtime import get_device
from tilecraft.runtime.layout import pack_inputs

LAYER = Conv2d(1, 64, 14, 14, 64, kernel=3, pad=1)


def run(cfg: HwConfig | None = None, seed: int = 0) -> dict:
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = cfg or HwConfig()
    rng = np.random.default_rng(seed)
    w = rng.integers(-128, 128, LAYER.weight_shape, dtype=np.int8)
    x = rng.integers(-128, 128, LAYER.input_shape, dtype=np.int8)
    program = conv2d(cfg, LAYER, Epilogue(shift=8, relu=True), weight=w)
    inputs = pack_inputs(program, {"input": x})
    model = get_device("sim").run(program, inputs)
    rtl = RtlDevice(cfg).run(program, inputs)
    exact = all(np.array_equal(rtl.outputs[k], v) for k, v in model.outputs.items())
    cycles = rtl.report.cycles
    return {
        "suite": "rtl-speed",
        "config": cfg.tag,
        "workload": LAYER.describe(),
        "rtl_cycles": cycles,
        "model_cycles": model.report.cycles,
        "cycle_error": abs(cycles - model.report.cycles) / cycles,
        "sim_seconds": rtl.report.seconds,
        "cycles_per_second": cycles / rtl.report.seconds,
        "bit_exact": exact,
    }


def format_table(r: dict) -> str:
    return (
        f"rtl-speed on {r['config']}: {r['workload']}\n"
        f"  RTL {r['rtl_cycles']:,} cycles in {r['sim_seconds']:.2f} s = "
        f"{r['cycles_per_second']:,.0f} cycles/s (goal >= 100,000)\n"
        f"  model {r['model_cycles']:,} cycles: error {r['cycle_error']:.2%} (goal <= 2%); "
        f"outputs {'bit-exact' if r['bit_exact'] else 'DIFFER'}"
    )
