"""rtl-speed: a fixed conv layer program on the generated Verilog under cocotb + Verilator
(benchmarks/README.md): simulated cycles per wall-clock second, and the cycle model's error;
with `random=N`, also N seeded random programs (compiler/programs/random_test_programs.py) and
the out-of-order-units program (and the unit's pace and INP-turn programs on configs with those),
each compared bit for bit and cycle for cycle, each run recorded (its RTL cycles and a digest of
its outputs) so that `against`, an earlier run's result, says whether a change to the RTL kept
every cycle and every output; with `schedules=N`, N random layers under random legal schedules
per config (compiler/programs/random_schedules.py): the model's error across the schedule
space."""

from __future__ import annotations

import hashlib

import numpy as np

from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.errors import TilecraftError
from tilecraft.hw.config import HwConfig, preset
from tilecraft.ops import Conv2d, Epilogue
from tilecraft.progress import track
from tilecraft.runtime import get_device
from tilecraft.runtime.layout import pack_inputs

LAYER = Conv2d(1, 64, 14, 14, 64, kernel=3, pad=1)


MAX_SCHEDULE_ERROR = 0.005  # the goals of the sweep over drawn schedules, on every config
MIN_EXACT_SHARE = 0.8
SCHEDULE_CONFIGS = ("default", "1x8x8", "2x16x16")
BATCH = 20  # drawn schedules per simulator process (the progress bar's step)


def run(
    cfg: HwConfig | None = None,
    seed: int = 0,
    random: int = 0,
    schedules: int = 0,
    schedule_configs: list[HwConfig] | None = None,
    against: dict | None = None,
) -> dict:
    """`schedules`: drawn schedules per config, on `schedule_configs` (default: the presets
    default, 1x8x8 and 2x16x16). `against`: an earlier result of this suite with `random`
    runs on the same config: every run compared with its own (`compare`)."""
    if against is not None:  # refused before any run, not after them
        comparable(against, cfg or HwConfig(), random)
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
        "outputs_digest": outputs_digest(rtl.outputs),
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
    if against is not None:
        result["against"] = compare(against, result)
        result["ok"] = result["ok"] and result["against"]["same"]
    if schedules:
        configs = schedule_configs or [preset(name) for name in SCHEDULE_CONFIGS]
        result["schedules"] = [drawn_schedules(c, schedules) for c in configs]
        result["ok"] = result["ok"] and not any(x["differ"] for x in result["schedules"])
    return result


def drawn_schedules(cfg: HwConfig, count: int, first_seed: int = 0) -> dict:
    """Seeds first_seed.. of compiler/programs/random_schedules.py on the RTL and the cycle
    model: outputs compared bit for bit, the model's signed cycle error per schedule."""
    from tilecraft.compiler.programs.random_schedules import draw
    from tilecraft.sim.rtl.device import RtlDevice

    seeds = list(range(first_seed, first_seed + count))
    rtl_device, sim = RtlDevice(cfg), get_device("sim")
    rows, differ = [], []
    batches = [seeds[i : i + BATCH] for i in range(0, count, BATCH)]
    for batch in track(batches, f"drawn schedules on {cfg.tag}"):
        drawn = [draw(cfg, s) for s in batch]
        runs = rtl_device.run_many([(d.program, d.inputs) for d in drawn])
        for d, rtl in zip(drawn, runs):
            model = sim.run(d.program, d.inputs)
            if any(not np.array_equal(rtl.outputs[n], v) for n, v in model.outputs.items()):
                differ.append(d.describe())
            r, m = rtl.report.cycles, model.report.cycles
            row = {"seed": d.seed, "rtl": r, "model": m, "error": (m - r) / r}
            rows.append({**row, "schedule": d.describe()})
    errors = np.abs([row["error"] for row in rows])
    worst = rows[int(np.argmax(errors))]
    exact = int(np.count_nonzero(errors == 0))
    return {
        "config": cfg.tag,
        "schedules": count,
        "first_seed": first_seed,
        "bit_exact": count - len(differ),
        "differ": differ,
        "max_cycle_error": float(errors.max()),
        "mean_cycle_error": float(errors.mean()),
        "exact_cycles": exact,
        "exact_share": exact / count,
        "worst": worst,
        "errors": [row["error"] for row in rows],  # signed: (model - rtl) / rtl, by seed
        "meets_goal": bool(errors.max() <= MAX_SCHEDULE_ERROR and exact / count >= MIN_EXACT_SHARE),
    }


def _beside_random(cfg: HwConfig) -> list:
    """What `random_programs` runs after the random ones, each as a function that builds it."""
    from functools import partial

    from tilecraft.compiler.programs import random_test_programs as r

    makers = [partial(r.out_of_order_program, cfg)]
    if cfg.requant_lanes:
        makers += [partial(r.requant_pace_program, cfg, s) for s in range(2)]
    if cfg.store_to_inp:
        makers += [partial(r.inp_turns_program, cfg, s) for s in range(2)]
    return makers


def outputs_digest(outputs: dict) -> str:
    """A digest of a run's outputs (names, shapes, types and bytes): equal digests, equal data."""
    h = hashlib.sha256()
    for name in sorted(outputs):
        value = np.ascontiguousarray(outputs[name])
        h.update(f"{name}:{value.dtype.str}:{value.shape};".encode())
        h.update(value.tobytes())
    return h.hexdigest()[:16]


def random_programs(cfg: HwConfig, count: int) -> dict:
    """Seeds 0..count-1 of the random program generator, the out-of-order-units program, and on
    a config with the requantization unit its pace program (seeds 0..1), with the STORE into
    INP its INP-turn program (seeds 0..1): the programs whose cycles a change to those parts
    would move."""
    from tilecraft.compiler.programs.random_test_programs import random_program
    from tilecraft.sim.rtl.device import RtlDevice

    seeds = track(range(count), "random programs")
    jobs = [random_program(cfg, s) for s in seeds] + [make() for make in _beside_random(cfg)]
    errors, differ, runs = [], [], []
    for (program, inputs), rtl in zip(jobs, RtlDevice(cfg).run_many(jobs)):
        model = get_device("sim").run(program, inputs)
        errors.append(abs(rtl.report.cycles - model.report.cycles) / rtl.report.cycles)
        if any(not np.array_equal(rtl.outputs[n], v) for n, v in model.outputs.items()):
            differ.append(program.name)
        runs.append(
            {
                "program": program.name,
                "rtl_cycles": rtl.report.cycles,
                "model_cycles": model.report.cycles,
                "outputs_digest": outputs_digest(rtl.outputs),
            }
        )
    worst = int(np.argmax(errors))
    return {
        "programs": len(jobs),
        "bit_exact": len(jobs) - len(differ),
        "differ": differ,
        "max_cycle_error": errors[worst],
        "worst": jobs[worst][0].name,
        "mean_cycle_error": float(np.mean(errors)),
        "exact_cycles": sum(e == 0 for e in errors),
        "runs": runs,
    }


def comparable(before: dict, cfg: HwConfig, random: int) -> None:
    """Refuse an earlier result that a run of `random` programs on `cfg` cannot be compared
    with, naming what differs."""
    if (
        not isinstance(before, dict)
        or before.get("suite") != "rtl-speed"
        or "runs" not in before.get("random", {})
    ):
        raise TilecraftError(
            "the earlier result has no recorded runs to compare with: give the JSON of "
            "`tilecraft bench rtl-speed --random N --json FILE`"
        )
    if before["config"] != cfg.tag:
        raise TilecraftError(
            f"the earlier result was measured on {before['config']}, this run is on "
            f"{cfg.tag}: compare runs of one config"
        )
    extra = len(_beside_random(cfg))
    if len(before["random"]["runs"]) != random + extra:
        raise TilecraftError(
            f"the earlier result ran {len(before['random']['runs']) - extra} random programs, "
            f"this run {random}: give --random {len(before['random']['runs']) - extra}"
        )


def compare(before: dict, after: dict) -> dict:
    """`after`'s RTL runs against `before`'s (two results of this suite on one config, the
    same random programs): the fixed layer's and every random run's cycles and outputs. A
    change to the RTL that is meant to keep every cycle (a timing cut) keeps `same` true."""
    old = {"layer": (before["rtl_cycles"], before.get("outputs_digest"))}
    old |= {r["program"]: (r["rtl_cycles"], r["outputs_digest"]) for r in before["random"]["runs"]}
    new = {"layer": (after["rtl_cycles"], after["outputs_digest"])}
    new |= {r["program"]: (r["rtl_cycles"], r["outputs_digest"]) for r in after["random"]["runs"]}
    if set(old) != set(new):
        raise TilecraftError(
            f"the earlier result ran other programs (only there: {sorted(set(old) - set(new))[:4]}"
            f", only here: {sorted(set(new) - set(old))[:4]})"
        )
    changed = [
        {
            "program": name,
            "rtl_cycles_before": old[name][0],
            "rtl_cycles": new[name][0],
            "same_outputs": old[name][1] == new[name][1],
        }
        for name in new
        if old[name] != new[name]
    ]
    return {
        "runs": len(new),
        "same_cycles": sum(old[n][0] == new[n][0] for n in new),
        "same_outputs": sum(old[n][1] == new[n][1] for n in new),
        "changed": changed,
        "same": not changed,
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
    if "against" in r:
        x = r["against"]
        text += (
            f"\n  against the earlier run: {x['same_cycles']} of {x['runs']} runs in the same "
            f"cycles, {x['same_outputs']} with the same outputs"
        )
        for c in x["changed"][:8]:
            text += (
                f"\n    {c['program']}: {c['rtl_cycles_before']:,} -> {c['rtl_cycles']:,} "
                f"cycles, outputs {'the same' if c['same_outputs'] else 'DIFFER'}"
            )
    for x in r.get("schedules", []):
        w = x["worst"]
        text += (
            f"\n  {x['schedules']} drawn schedules on {x['config']}: {x['bit_exact']} bit-exact"
            f"{' (differ: ' + '; '.join(x['differ']) + ')' if x['differ'] else ''}; "
            f"cycle error max {x['max_cycle_error']:.3%}, mean {x['mean_cycle_error']:.4%}, "
            f"{x['exact_share']:.0%} exact (goal: max <= {MAX_SCHEDULE_ERROR:.1%}, "
            f">= {MIN_EXACT_SHARE:.0%} exact: {'met' if x['meets_goal'] else 'NOT MET'})\n"
            f"    worst: model {w['model']:,} cycles, RTL {w['rtl']:,} ({w['schedule']})"
        )
    return text


def plot(r: dict, path) -> None:
    """The model's signed error over the drawn schedules, one histogram per config."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweeps = r.get("schedules")
    if not sweeps:
        raise TilecraftError("rtl-speed --plot draws the --schedules sweep: give --schedules N")
    fig, axes = plt.subplots(1, len(sweeps), figsize=(4.5 * len(sweeps), 3.4), squeeze=False)
    for ax, x in zip(axes[0], sweeps):
        errors = 100 * np.asarray(x["errors"])
        lim = max(100 * MAX_SCHEDULE_ERROR, 1.05 * float(np.abs(errors).max()))
        ax.hist(errors, bins=41, range=(-lim, lim), color="tab:blue")
        for goal in (-100 * MAX_SCHEDULE_ERROR, 100 * MAX_SCHEDULE_ERROR):
            ax.axvline(goal, color="tab:red", lw=0.6, ls="--")
        ax.axvline(0, color="black", lw=0.6)
        share, worst = x["exact_share"], x["max_cycle_error"]
        ax.set_title(f"{x['config']}\n{share:.0%} exact, max {worst:.3%}", fontsize=9)
        ax.set_xlabel("(model - RTL) / RTL, %")
        ax.set_yscale("log")
    axes[0][0].set_ylabel(f"schedules (of {sweeps[0]['schedules']})")
    fig.suptitle("cycle model against the RTL over random layers and legal schedules")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
