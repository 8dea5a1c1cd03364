"""resnet18-layers: the accelerator's efficiency on ResNet-18's 11 conv layers (see
benchmarks/README.md).

Each layer is compiled with the default schedule heuristic (no tuning), run on the behavioral
simulator with random int8 data, checked bit-exact against the numpy reference, and timed by
the cycle model. The same tiles single-buffered (no latency hiding: loads, compute and stores
take turns, and so do the GEMM core and the ALU) give `utilization_no_overlap`. The epilogue
is a quantized layer's as the compiler lowers it for the config: a rounding right shift by 8,
ReLU and clip to int8 on the ALU; on a config with the requantization unit, a bias and a
float32 multiplier per channel (about 2**-8), ReLU and clip, on the unit.

A layer's roofline is the larger of its compute bound and its DRAM bound. The compute bound is
taken over the reduction padded to the array's width (`padded_ideal_cycles`): C1's 147 folded
channels (3 x 7 x 7) fill 160 lanes, so no schedule can beat MACs x 160/147 / 256 cycles;
`utilization` keeps the unpadded MACs / (cycles x 256).
"""

from __future__ import annotations

import time

import numpy as np

from tilecraft.benchmarks.workloads import layer_op, resnet18_layers
from tilecraft.compiler.operator.conv2d import compile_conv2d, conv2d
from tilecraft.compiler.operator.pipeline import single_buffered
from tilecraft.errors import TilecraftError
from tilecraft.hw.config import HwConfig
from tilecraft.ops import Epilogue, Multiplier, reference
from tilecraft.progress import track
from tilecraft.runtime import get_device
from tilecraft.runtime.layout import pack_inputs, unpack_outputs
from tilecraft.serial import to_json
from tilecraft.sim.simulator import model_report

EPILOGUE = Epilogue(shift=8, relu=True)
UNIT_EPILOGUE = Epilogue(bias=True, multiplier=Multiplier.FLOAT32, relu=True)


def epilogue_for(cfg: HwConfig) -> Epilogue:
    """The layers' epilogue on `cfg`: on the requantization unit where the config has one."""
    return UNIT_EPILOGUE if cfg.requant_lanes else EPILOGUE


def _parameters(cfg: HwConfig, op, rng: np.random.Generator) -> dict:
    """The unit's epilogue's bias and per-channel multipliers (none for the shift)."""
    if not cfg.requant_lanes:
        return {}
    return {
        "bias": rng.integers(-3000, 3000, op.oc).astype(np.int32),
        "multiplier": (rng.uniform(1, 2, op.oc) * 2.0**-9).astype(np.float32),
    }


def roofline_cycles(cfg: HwConfig, mapped, dram_bytes: int) -> tuple[float, float]:
    """(the compute bound over the reduction padded to the array's width, the roofline): the
    larger of that bound and the program's DRAM bytes at the port's bytes a cycle."""
    padded = mapped.source.macs / (cfg.macs_per_cycle * mapped.lane_efficiency(cfg))
    return padded, max(padded, dram_bytes / cfg.axi_bytes)


def run_layer(
    cfg: HwConfig, layer: dict, rng: np.random.Generator, check: bool = True, records=None
) -> dict:
    op = layer_op(layer)
    w = rng.integers(-128, 128, op.weight_shape, dtype=np.int8)
    x = rng.integers(-128, 128, op.input_shape, dtype=np.int8)
    ep, params = epilogue_for(cfg), _parameters(cfg, op, rng)
    schedule = None
    if records is not None:  # the best schedule tuning found for the layer
        from tilecraft.compiler.tune.task import Task
        from tilecraft.compiler.tune.tuner import best_schedule

        schedule = best_schedule(records, Task(cfg, op, ep))
    t0 = time.perf_counter()
    comp = compile_conv2d(cfg, op, ep, weight=w, name=layer["name"], schedule=schedule, **params)
    compile_s = time.perf_counter() - t0
    program = comp.program
    ideal = op.macs / cfg.macs_per_cycle
    row = {
        "name": layer["name"],
        "macs": op.macs,
        "on_accelerator": True,
        "folded": comp.mapped.folded,
        "schedule": to_json(comp.schedule),
        "schedule_notes": list(comp.notes),
        "compile_seconds": compile_s,
        "compile_steps": dict(comp.seconds),
        "instructions": len(program.insns),
        "ideal_cycles": ideal,
    }
    if check:
        t0 = time.perf_counter()
        result = get_device("sim").run(program, pack_inputs(program, {"input": x}))
        row["sim_seconds"] = time.perf_counter() - t0
        got = unpack_outputs(program, result.outputs)["output"]
        row["bit_exact"] = bool(np.array_equal(got, reference.conv2d(op, ep, x, w, **params)))
        report = result.report
    else:
        report = model_report(program)
    dram = dict(report.dram_bytes)
    padded, roofline = roofline_cycles(cfg, comp.mapped, sum(dram.values()))
    serial = single_buffered(comp, weight=w, **params)
    row.update(
        cycles=report.cycles,
        utilization=ideal / report.cycles,
        padded_ideal_cycles=padded,
        roofline_cycles=roofline,
        roofline_fraction=roofline / report.cycles,
        dram_bytes=dram,
        utilization_no_overlap=ideal / model_report(serial).cycles,
    )
    return row


def run(
    cfg: HwConfig | None = None,
    layers: list[dict] | None = None,
    seed: int = 0,
    check: bool = True,
    rtl: list[str] | None = None,
    records: str | None = None,
) -> dict:
    """The suite's JSON; with `rtl`, the named layers on the generated Verilog instead; with
    `records` (tilecraft tune), each layer on the best schedule they hold. On a config without
    the requantization unit, its twin with the unit too (`with_unit`)."""
    if rtl:
        return run_on_rtl(cfg, rtl, seed)
    cfg = cfg or HwConfig()
    layers = layers or resnet18_layers()
    tuned = None
    if records:
        from tilecraft.compiler.tune.records import applied_records

        tuned = applied_records(records, cfg.digest)
    result = {"suite": "resnet18-layers", **_layers(cfg, layers, seed, check, tuned)}
    if not cfg.requant_lanes and records is None:
        result["with_unit"] = _layers(cfg.with_requant_unit(), layers, seed, check, None)
    if check:
        result["ok"] = result["all_bit_exact"] and result.get("with_unit", {}).get(
            "all_bit_exact", True
        )
    return result


def _layers(cfg: HwConfig, layers: list[dict], seed: int, check: bool, tuned) -> dict:
    """The layers on `cfg` and their totals. The same seed gives the same data on every config,
    so the default config's figures and its twin's with the unit (`with_unit`, in the same run:
    what the unit buys) are of the same layers and data."""
    rng = np.random.default_rng(seed)
    rows = [run_layer(cfg, layer, rng, check, tuned) for layer in track(layers, "resnet18-layers")]
    macs = sum(r["macs"] for r in rows)
    result = {
        "config": cfg.tag,
        "macs_per_cycle": cfg.macs_per_cycle,
        "dram_bytes_per_cycle": cfg.axi_bytes,
        "epilogue": epilogue_for(cfg).describe(),
        "seed": seed,
        "layers": rows,
        "mac_weighted_utilization": sum(r["macs"] * r["utilization"] for r in rows) / macs,
        "mac_weighted_utilization_no_overlap": sum(
            r["macs"] * r["utilization_no_overlap"] for r in rows
        )
        / macs,
        "min_roofline_fraction": min(r["roofline_fraction"] for r in rows),
        "mac_weighted_roofline_fraction": sum(r["macs"] * r["roofline_fraction"] for r in rows)
        / macs,
        "compile_seconds": sum(r["compile_seconds"] for r in rows),
        "total_cycles": sum(r["cycles"] for r in rows),
        "total_ideal_cycles": sum(r["ideal_cycles"] for r in rows),
    }
    if check:
        result["all_bit_exact"] = all(r["bit_exact"] for r in rows)
    return result


def format_table(result: dict) -> str:
    if result.get("suite") == "resnet18-layers-rtl":
        return format_rtl_table(result)
    text = _format_layers(result)
    if result.get("with_unit"):
        text += "\n\n" + _format_layers(result["with_unit"])
    return text


def _format_layers(result: dict) -> str:
    head = (
        f"{'layer':5s} {'MMACs':>7s} {'cycles':>9s} {'util':>6s} {'no-ovl':>6s} {'roofl':>6s} "
        f"{'DRAM KiB':>8s} {'exact':>5s} {'comp s':>6s}  schedule (oc ic oh ow, order, acc slots)"
    )
    lines = [f"resnet18-layers on {result['config']} (epilogue: {result['epilogue']})", head]
    for r in result["layers"]:
        s = r["schedule"]
        exact = {True: "yes", False: "NO"}.get(r.get("bit_exact"), "-")
        lines.append(
            f"{r['name']:5s} {r['macs'] / 1e6:7.1f} {r['cycles']:9,} {r['utilization']:6.3f} "
            f"{r['utilization_no_overlap']:6.3f} {r['roofline_fraction']:6.3f} "
            f"{sum(r['dram_bytes'].values()) / 1024:8.0f} {exact:>5s} "
            f"{r['compile_seconds']:6.2f}  "
            f"{s['tile_oc']} {s['tile_ic']} {s['tile_oh']} {s['tile_ow']} {s['order']} "
            + (f"x{s['acc_slots']}" if s["double_buffer"] else "single")
            + (" (taps folded)" if r["folded"] else "")
        )
    lines.append(
        f"MAC-weighted utilization {result['mac_weighted_utilization']:.3f} "
        f"(no overlap {result['mac_weighted_utilization_no_overlap']:.3f}), "
        f"min roofline fraction {result['min_roofline_fraction']:.3f} "
        f"(MAC-weighted {result['mac_weighted_roofline_fraction']:.3f}), "
        f"total {result['total_cycles']:,} cycles vs ideal {result['total_ideal_cycles']:,.0f}; "
        f"compiled in {result['compile_seconds']:.2f} s"
    )
    return "\n".join(lines)


def run_on_rtl(cfg: HwConfig | None = None, names: list[str] | None = None, seed: int = 0) -> dict:
    """The chosen layers' programs on the generated Verilog too: RTL cycles against the cycle
    model, and the outputs against the simulator's."""
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = cfg or HwConfig()
    layers = [x for x in resnet18_layers() if names is None or x["name"] in names]
    unknown = sorted(set(names or ()) - {x["name"] for x in layers})
    if unknown:
        raise TilecraftError(f"unknown layers {unknown}; the workload has C1..C11")
    rng = np.random.default_rng(seed)
    jobs = []
    for layer in track(layers, "compiling"):
        op = layer_op(layer)
        w = rng.integers(-128, 128, op.weight_shape, dtype=np.int8)
        x = rng.integers(-128, 128, op.input_shape, dtype=np.int8)
        params = _parameters(cfg, op, rng)
        program = conv2d(cfg, op, epilogue_for(cfg), weight=w, name=layer["name"], **params)
        jobs.append((program, pack_inputs(program, {"input": x})))
    rows = []
    for (program, inputs), r in zip(jobs, RtlDevice(cfg).run_many(jobs)):
        s = get_device("sim").run(program, inputs)
        rows.append(
            {
                "name": program.name,
                "model_cycles": s.report.cycles,
                "rtl_cycles": r.report.cycles,
                "cycle_error": abs(r.report.cycles - s.report.cycles) / r.report.cycles,
                "bit_exact": all(np.array_equal(r.outputs[k], v) for k, v in s.outputs.items()),
                "cycles_per_second": r.report.cycles / r.report.seconds,
            }
        )
    ok = all(r["bit_exact"] for r in rows)
    return {"suite": "resnet18-layers-rtl", "config": cfg.tag, "layers": rows, "ok": ok}


def format_rtl_table(result: dict) -> str:
    lines = [f"resnet18 layers on the RTL ({result['config']})"]
    for r in result["layers"]:
        lines.append(
            f"{r['name']:4s} model {r['model_cycles']:9,} rtl {r['rtl_cycles']:9,} "
            f"error {r['cycle_error']:.2%}  {'bit-exact' if r['bit_exact'] else 'DIFFERS'}  "
            f"{r['cycles_per_second']:,.0f} cycles/s"
        )
    return "\n".join(lines)


def plot(result: dict, path: str) -> None:
    """A roofline: each layer's MACs per cycle against its MACs per DRAM byte, under the roof of
    the GEMM core's peak and the DRAM port's bytes per cycle (`plot` extra: matplotlib)."""
    if result.get("suite") == "resnet18-layers-rtl":
        raise TilecraftError("--plot draws the cycle model's figures; drop --rtl")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter
    except ImportError:
        raise TilecraftError("--plot needs matplotlib: pip install 'tilecraft[plot]'") from None
    rows = result["layers"]
    peak, bandwidth = result["macs_per_cycle"], result["dram_bytes_per_cycle"]
    intensity = [r["macs"] / sum(r["dram_bytes"].values()) for r in rows]
    attained = [r["macs"] / r["cycles"] for r in rows]
    lo, hi = min(intensity) / 2, max(intensity) * 2
    knee = peak / bandwidth
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = np.geomspace(lo, hi, 200)
    ax.plot(xs, np.minimum(peak, xs * bandwidth), color="black", label="roofline")
    if lo < knee < hi:
        ax.axvline(knee, color="grey", linestyle=":", linewidth=1)
    ax.scatter(intensity, attained, color="tab:blue", zorder=3, label="layer (cycle model)")
    for r, x, y in zip(rows, intensity, attained):
        ax.annotate(r["name"], (x, y), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax.set_xscale("log")
    ticks = [t for t in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if lo <= t <= hi]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(0, peak * 1.08)
    ax.set_xlabel("arithmetic intensity (MACs per DRAM byte)")
    ax.set_ylabel(f"MACs per cycle (peak {peak}, DRAM {bandwidth} bytes/cycle)")
    ax.set_title(
        f"ResNet-18 conv layers on {result['config']}\nMAC-weighted utilization "
        f"{result['mac_weighted_utilization']:.3f}, cycle model",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
