"""rtl-speed: a fixed conv layer program on the generated Verilog under cocotb + Verilator
(benchmarks/README.md): simulated cycles per wall-clock second, and the cycle model's error;
with `random=N`, also N seeded random programs (compiler/programs/random_test_programs.py) and
the out-of-order-units program, each compared bit for bit and cycle for cycle."""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.hw.config import HwConfig
from tilecraft.ops import Conv2d, Epilogue
from tilecraft.progress import track
from tilecraft.runtime import get_device
from tilecraft.runtime.layout import pack_inputs

LAYER = Conv2d(1, 64, 14, 14, 64, kernel=3, pad=1)


def run(cfg: HwConfig | None = None, seed: int = 0, random: int = 0) -> dict:
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
    result = {
        "suite": "rtl-speed",
        "config": cfg.tag,
        "workload": LAYER.describe(),
        "rtl_cycles": cycles,
        "model_cycles": model.report.cycles,
        "cycle_error": abs(cycles - model.report.cycles) / cycles,
        "sim_seconds": rtl.report.seconds,
        "cycles_per_second": cycles / rtl.report.seconds,
        "bit_exact": exact,
        "ok": exact,
    }
    if random:
        result["random"] = random_programs(cfg, random)
        result["ok"] = exact and not result["random"]["differ"]
    return result


def random_programs(cfg: HwConfig, count: int) -> dict:
    """Seeds 0..count-1 of the random program generator, plus the out-of-order-units program."""
    from tilecraft.compiler.programs.random_test_programs import (
        out_of_order_program,
        random_program,
    )
    from tilecraft.sim.rtl.device import RtlDevice

    seeds = track(range(count), "random programs")
    jobs = [random_program(cfg, s) for s in seeds] + [out_of_order_program(cfg)]
    errors, differ = [], []
    for (program, inputs), rtl in zip(jobs, RtlDevice(cfg).run_many(jobs)):
        model = get_device("sim").run(program, inputs)
        errors.append(abs(rtl.report.cycles - model.report.cycles) / rtl.report.cycles)
        if any(not np.array_equal(rtl.outputs[n], v) for n, v in model.outputs.items()):
            differ.append(program.name)
    worst = int(np.argmax(errors))
    return {
        "programs": len(jobs),
        "bit_exact": len(jobs) - len(differ),
        "differ": differ,
        "max_cycle_error": errors[worst],
        "worst": jobs[worst][0].name,
        "mean_cycle_error": float(np.mean(errors)),
        "exact_cycles": sum(e == 0 for e in errors),
    }


def format_table(r: dict) -> str:
    text = (
        f"rtl-speed on {r['config']}: {r['workload']}\n"
        f"  RTL {r['rtl_cycles']:,} cycles in {r['sim_seconds']:.2f} s = "
        f"{r['cycles_per_second']:,.0f} cycles/s (goal >= 100,000)\n"
        f"  model {r['model_cycles']:,} cycles: error {r['cycle_error']:.2%} (goal <= 2%); "
        f"outputs {'bit-exact' if r['bit_exact'] else 'DIFFER'}"
    )
    if "random" in r:
        x = r["random"]
        text += (
            f"\n  {x['programs']} random/out-of-order programs: {x['bit_exact']} bit-exact"
            f"{' (differ: ' + ', '.join(x['differ']) + ')' if x['differ'] else ''}; "
            f"cycle error max {x['max_cycle_error']:.2%} ({x['worst']}), "
            f"mean {x['mean_cycle_error']:.3%}, {x['exact_cycles']} exact"
        )
    return text
