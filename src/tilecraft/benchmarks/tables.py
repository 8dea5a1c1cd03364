"""The benchmarks README's tables, made from the recorded results (`results.py`): each suite's
section holds a block between `<!-- figures: SUITE -->` and `<!-- /figures: SUITE -->` that
`render` fills from `results/SUITE.json` (the figures with their goals, then the suite's
per-layer or per-case rows). `tilecraft figures` rewrites the README; `check` says which blocks
disagree with the data (a test runs it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tilecraft.benchmarks import results
from tilecraft.benchmarks.markdown import figures_block, lookup, md_table, schedule_text, value

README = Path(__file__).with_name("README.md")
BLOCK = re.compile(r"(<!-- figures: ([a-z0-9-]+) -->\n)(.*?)(<!-- /figures: \2 -->)", re.S)


def _provenance(entry: dict) -> str:
    m = entry["machine"]
    where = ", ".join(f"{k} {m[k]}" for k in ("cores", "machine", "python", "numpy") if k in m)
    text = (
        f"Measured {entry['date']} at commit `{entry['commit'][:12]}`"
        f"{' (with uncommitted changes)' if entry['commit'].endswith('+dirty') else ''} with "
        f"`{entry['command']}` on {m.get('processor', 'an unrecorded machine')}"
        f"{' (' + where + ')' if where else ''}."
    )
    if entry.get("transcribed"):
        text += f" Transcribed: {entry['transcribed']}."
    if entry.get("stale"):
        text += f" **Stale**: {entry['stale']}."
    return text


# ---- per suite -------------------------------------------------------------------------------
def _resnet18_layers(r: dict) -> str:
    figures = figures_block(
        r,
        [
            ("mac_weighted_utilization", "MACs / (cycles x 256), MAC-weighted", "≥ 0.98"),
            ("min_roofline_fraction", "the worst layer's roofline / cycles", "≥ 0.95"),
            ("mac_weighted_roofline_fraction", "roofline / cycles, MAC-weighted", "≥ 0.98"),
            ("mac_weighted_utilization_no_overlap", "the same tiles single-buffered", "—"),
            ("total_cycles", "the 11 layers", "—"),
            ("total_ideal_cycles", "MACs / 256", "—"),
            ("compile_seconds", "all 11 layers", "—"),
            ("all_bit_exact", "against ops.reference", "true"),
        ]
        + [
            (f"with_unit.{key}", f"with the requantization unit: {what}", goal)
            for key, what, goal in [
                ("mac_weighted_utilization", "MAC-weighted utilization", "≥ 0.98"),
                ("min_roofline_fraction", "the worst layer's", "≥ 0.95"),
                ("mac_weighted_roofline_fraction", "MAC-weighted", "≥ 0.98"),
                ("total_cycles", "the 11 layers", "—"),
                ("all_bit_exact", "against ops.reference", "true"),
            ]
            if r.get("with_unit")
        ],
    )
    unit = {x["name"]: x for x in (r.get("with_unit") or {}).get("layers", [])}
    layers = md_table(
        [
            "layer",
            "MMACs",
            "cycles",
            "utilization",
            "roofline fraction",
            "no overlap",
            "schedule",
            "compile s",
        ]
        + (["cycles with the unit", "roofline fraction with the unit"] if unit else []),
        [
            [
                x["name"],
                value(x["macs"] / 1e6, 1),
                value(x["cycles"]),
                value(x["utilization"]),
                value(x["roofline_fraction"]),
                value(x["utilization_no_overlap"]),
                schedule_text(x.get("schedule")),
                value(x["compile_seconds"], 2),
            ]
            + (
                [value(unit[x["name"]]["cycles"]), value(unit[x["name"]]["roofline_fraction"])]
                if unit
                else []
            )
            for x in r["layers"]
        ],
    )
    return (
        figures
        + "\n\n"
        + layers
        + (f"\n\nWith the unit: {r['with_unit']['config']}." if r.get("with_unit") else "")
    )


def _network(goal_ms: str) -> Callable[[dict], str]:
    def render(r: dict) -> str:
        return figures_block(
            r,
            [
                ("modeled_latency_ms", "accelerator + host", goal_ms),
                ("accelerator_ms", "the cycle model at the config's clock", "—"),
                (
                    "host_ms_measured_here",
                    "host steps and packing on the generated host kernels, warm, this machine",
                    "—",
                ),
                ("host_ms_numpy", "the same on numpy, no kernel library", "—"),
                ("accelerator_mac_share", "", "1.0"),
                ("accelerator_programs", "", "1"),
                ("chained_layers", "layers in the programs", "—"),
                ("mac_weighted_utilization", "pooling cycles included", "—"),
                ("compile_seconds", "calibration excluded", "≤ 2"),
                ("sim_ratio", "functional simulation / numpy int32 GEMM, same MACs", "≤ 2"),
                ("timed_sim_ratio", "the first run: cycle model and race check too", "—"),
                ("arena_peak_bytes", "", "—"),
                ("arena_lower_bound_bytes", "", "—"),
                ("output_sqnr_db", "int8 logits against float", "—"),
                ("bit_exact_vs_reference", "", "true"),
                ("with_unit.modeled_latency_ms", "the same with the requantization unit", goal_ms),
                ("with_unit.accelerator_ms", "the same with the unit: the cycle model", "—"),
                ("with_unit.host_ms_measured_here", "the same with the unit: the host", "—"),
                ("with_unit.bit_exact_vs_reference", "the same with the unit", "true"),
            ],
        ) + (f"\n\nWith the unit: {r['with_unit']['config']}." if r.get("with_unit") else "")

    return render


def _digits(r: dict) -> str:
    return figures_block(
        r,
        [
            ("float_accuracy", "360 held-out images", "—"),
            ("int8_accuracy", "on the simulator", "within 0.01 of float"),
            ("cycles_per_image", "batch of 360", "—"),
            ("modeled_us_per_image", "", "—"),
            ("programs", "", "—"),
            ("accelerator_mac_share", "", "1.0"),
            ("compile_seconds", "", "—"),
        ],
    )


def _onnxruntime(r: dict) -> str:
    figures = figures_block(
        r,
        [
            ("onnxruntime_equal_fraction", "int8 logits equal to onnxruntime's", "1.0"),
            ("onnxruntime_max_steps", "", "0"),
            ("onnxruntime_accuracy", "", "—"),
            ("asymmetric.equal_fraction", "uint8 activations, zero points", "1.0"),
            ("asymmetric.max_steps", "", "0"),
        ],
    )
    modes = [
        [
            name,
            value(m.get("cycles_per_image"), 0),
            value(m.get("accuracy")),
            value(m.get("equal_fraction")),
        ]
        for name, m in sorted(r["modes"].items())
    ]
    a = r["asymmetric"]
    modes.append(
        [
            "asymmetric",
            value(a.get("cycles_per_image"), 0),
            value(a.get("accuracy")),
            value(a.get("equal_fraction")),
        ]
    )
    header = ["requantization", "cycles per image", "accuracy", "equal to onnxruntime"]
    return figures + "\n\n" + md_table(header, modes)


def _float_convs(v: dict) -> str:
    if v.get("float_convs") is None:
        return "-"
    return f"{v['float_convs']} of {v['convs']}"


def _onnxruntime_resnet18(r: dict) -> str:
    rows = []
    for name, v in r["variants"].items():
        layers = list(v.get("layer_equal_fraction", {}).values())
        ordered = sorted(layers)
        median = ordered[len(ordered) // 2] if ordered else None
        rows.append(
            [
                name,
                value(v.get("programs")),
                value(v.get("modeled_latency_ms"), 1),
                value(v.get("compile_seconds"), 1),
                value(v.get("equal_fraction")),
                value(v.get("max_steps")),
                _float_convs(v),
                value(layers[0] if layers else None, 5),  # 0.99999 is not 1
                value(median),
                value(ordered[0] if ordered else None),
            ]
        )
    return (
        md_table(
            [
                "variant",
                "programs",
                "modeled ms",
                "compile s",
                "logits equal",
                "max steps",
                "onnxruntime's float convs",
                "tensors equal: first conv",
                "median",
                "worst",
            ],
            rows,
        )
        + "\n\nGoal: modeled ms within 3% of the same network quantized by "
        "tilecraft; logits and every tensor equal to onnxruntime's (1.0)." + _onnxruntime_on_unit(r)
    )


def _onnxruntime_on_unit(r: dict) -> str:
    """The variants on the config with the requantization unit: as compiled, and with
    `--requant onnxruntime`."""
    rows = []
    for name, v in r["variants"].items():
        e, u = v.get("onnxruntime_exact"), v.get("with_unit") or {}
        if not e:
            continue
        counted = "tensors_equal" in e
        tensors = f"{e['tensors_equal']} of {e['tensors_compared']}" if counted else "—"
        rows.append([name, value(u.get("modeled_latency_ms", v.get("modeled_latency_ms")), 1),
                     value(e.get("programs")), value(e.get("modeled_latency_ms"), 1),
                     value(e.get("modeled_accelerator_ms"), 1),
                     value(e.get("equal_fraction")), value(e.get("max_steps")), tensors,
                     value(e.get("simulator_matches_reference"))])  # fmt: skip
    if not rows:
        return ""
    head = ["variant", "modeled ms as compiled", "programs", "modeled ms", "accelerator ms",
            "logits equal", "max steps", "tensors equal", "simulator = reference"]  # fmt: skip
    return (
        f"\n\nOn {r.get('unit_config', r.get('config'))}, with the requantization unit: "
        "modeled ms as compiled; then the rest with `--requant onnxruntime` (every rounding "
        "onnxruntime's, the Adds on the host as QLinearAdd; modeled ms = the accelerator's "
        "and the host's, measured here on the generated host kernels):\n\n" + md_table(head, rows)
    )


def _sim_speed(r: dict) -> str:
    return figures_block(
        r,
        [
            ("ratio", "sim_seconds / numpy_seconds", "≤ 2"),
            ("sim_seconds", "", "—"),
            ("numpy_seconds", "", "—"),
        ],
    )


def _rtl_speed(r: dict) -> str:
    figures = figures_block(
        r,
        [
            ("cycles_per_second", "simulated cycles per wall-clock second", "≥ 100,000"),
            ("cycle_error", "|rtl − model| / rtl", "≤ 0.02"),
            ("rtl_cycles", "", "—"),
            ("model_cycles", "", "—"),
            ("bit_exact", "", "true"),
        ],
    )
    sweeps = r.get("schedules")
    if not sweeps:
        return figures
    rows = [[x["config"], value(x["schedules"]), value(x["bit_exact"]),
             f"{x['max_cycle_error']:.3%}", f"{x['mean_cycle_error']:.4%}",
             f"{x['exact_share']:.0%}", "met" if x["meets_goal"] else "**not met**"]
            for x in sweeps]  # fmt: skip
    header = ["config", "drawn schedules", "bit-exact", "max error", "mean error", "exact",
              "goal (max ≤ 0.5%, ≥ 80% exact)"]  # fmt: skip
    worst = max(sweeps, key=lambda x: x["max_cycle_error"])["worst"]
    return (
        f"{figures}\n\nThe model against the RTL over random layers under random legal "
        f"schedules (`schedules.N.KEY`):\n\n{md_table(header, rows)}\n\nThe worst: model "
        f"{worst['model']:,} cycles, RTL {worst['rtl']:,}: {worst['schedule']}."
    )


def _resources(r: dict) -> str:
    rows = []
    for c in r["configs"]:
        f = c.get("fractions", {})

        def cell(k, c=c, f=f):
            return f"{value(c[k], 1)} ({f.get(k, 0):.1%})"

        rows.append(
            [
                c["config"],
                c["part"],
                cell("lut"),
                cell("ff"),
                cell("dsp"),
                cell("bram36"),
                value(c.get("seconds"), 0),
            ]
        )
    return (
        md_table(["config", "part", "LUT", "FF", "DSP", "BRAM36", "seconds"], rows)
        + "\n\nGoal: the default config within 70% of each resource of the xc7z020."
    )


def _cpu_fallback(r: dict) -> str:
    figures = figures_block(
        r,
        [
            ("conv_max_vs_numpy", "the convs' worst ours / numpy", "≤ 1"),
            ("conv_max_vs_onnxruntime", "the convs' worst ours / onnxruntime", "≤ 1.5"),
            ("network_max_vs_onnxruntime", "whole networks' worst ours / onnxruntime", "≤ 1.0"),
            (
                "int8_network_max_vs_onnxruntime",
                "networks quantized by onnxruntime, the worst ours / onnxruntime",
                "≤ 1.2",
            ),
            (
                "int8_network_first_run_s",
                "the slowest first run of one, every kernel JIT-compiled, seconds",
                "≤ 1",
            ),
            ("host_cpu", "", "—"),
        ],
    )
    cases = md_table(
        ["case", "dtype", "ours ms", "numpy ms", "onnxruntime ms", "vs numpy", "vs onnxruntime"],
        [
            [
                c["name"],
                c["dtype"],
                value(c.get("ours_ms"), 2),
                value(c.get("numpy_ms"), 2),
                value(c.get("onnxruntime_ms"), 2),
                value(c.get("vs_numpy"), 2),
                value(c.get("vs_onnxruntime"), 2),
            ]
            for c in r["cases"]
        ],
    )
    targets = r.get("arm") or []
    emulated = md_table(
        ["ARM target", "kernel (emulated)", "instructions per MAC", "build s", "bytes"],
        [
            [t["target"] + f" ({t.get('cpu', '')})", e["name"],
             value(e["instructions_per_mac"], 2),
             value(t.get("compile_seconds", 0) + t.get("link_seconds", 0), 2),
             value(t.get("bytes"))]
            for t in targets
            for e in t.get("emulated", [])
        ],
    )  # fmt: skip
    accelerator = lookup(r, "related.resnet18.accelerator_ms")
    return figures + "\n\n" + cases + "\n\n" + emulated + _a9_estimate(r, accelerator)


def _a9_estimate(r: dict, accelerator: float | None) -> str:
    """The quantized networks' estimated time on the PYNQ-Z1's Cortex-A9, labelled so, with
    its assumptions, beside the accelerator's modeled ResNet-18 (the resnet18 suite's)."""
    est = r.get("a9_estimate")
    if not est:
        return ""
    rows = []
    for name, v in est["networks"].items():
        ratio = "—"
        if accelerator and name.startswith("resnet18_network"):
            ratio = f"{v['estimate_ms'] / accelerator:.0f}x its {accelerator:.1f} ms"
        rows.append([name, value(v["macs"]), f"{v['estimate_ms']:,.0f} ms (estimate)", ratio])
    table = md_table(
        ["network", "MACs", "Cortex-A9, one core (estimate)", "the accelerator (modeled)"], rows
    )
    return (
        "\n\n" + table + "\n\n**Estimates, not measurements** (no Cortex-A9 is at hand): "
        f"{est['instructions_per_mac']:.2f} instructions per MAC ({est['kernel']}, counted "
        f"under emulation, the table above) x the network's MACs, at {est['clock_mhz']} MHz "
        f"({est['clock_source']}) and {est['instructions_per_cycle']:g} instruction a cycle "
        f"({est['ipc_source']}); {est.get('weights_source', 'the weights random int8')}. "
        "The accelerator's time is the resnet18 suite's modeled figure (the PYNQ-Z1 preset at "
        "its clock)."
    )


def _seed_order(row: dict) -> tuple:
    """nextpnr's default seed first, then the numbered ones in order (whatever order they were
    routed in)."""
    seed = row["seed"]
    if seed == "default":
        return (0, 0, "")
    if isinstance(seed, int) and not isinstance(seed, bool):
        return (1, seed, "")
    return (2, 0, str(seed))  # not a seed `hw timing` writes: last, as it reads


def _seed_fmax(row: dict) -> str:
    """A seed's Fmax, marked where it is a placement's estimate (a route stopped by its time
    limit or by hand) or no route came back."""
    if row.get("routed", True):
        return value(row["fmax_mhz"], 1)
    stopped = row.get("stopped", False)
    if row.get("fmax_mhz") is None:
        return value(None) + (" (stopped)" if stopped else " (no route)")
    return value(row["fmax_mhz"], 1) + (" (placed; stopped)" if stopped else " (placed)")


def _timing(r: dict) -> str:
    figures = figures_block(
        r,
        [
            ("fmax_mhz", "after routing", "≥ 100"),
            ("routed", "", "true"),
            ("seed", "nextpnr's placement seed (— : its default)", "—"),
            ("endpoints.failing", "endpoints short of the clock's period", "0"),
            ("endpoints.endpoints", "timed endpoints", "—"),
            ("endpoints.worst_ns", "the worst path", "—"),
            ("seconds", "synthesis, placement and routing", "—"),
        ],
    )
    out = [figures]
    if r.get("seeds"):
        out.append(
            md_table(
                ["seed", "Fmax MHz", "failing endpoints"],
                [
                    [str(x["seed"]), _seed_fmax(x), value(x.get("failing_endpoints"))]
                    for x in sorted(r["seeds"], key=_seed_order)
                ],
            )
        )
    use = {k: (v.get("used") if isinstance(v, dict) else v) for k, v in r["resources"].items()}
    out.append(md_table(["resource", "used"], [[k, value(v)] for k, v in use.items() if v]))
    return "\n\n".join(out)


def _dse(r: dict) -> str:
    """The sweep's points and fronts; with a sweep of another model on the same points beside
    it (`RELATED`), that model's latency as a column of its own, by point name."""
    front = set(r.get("fronts", {}).get("joint", []))
    plain = set(r.get("fronts_without_unit", {}).get("joint", []))
    others = [x for x in r.get("related", {}).values() if x.get("part") == r.get("part")]
    extra = {o.get("model"): {p["name"]: p for p in o["points"]} for o in others}
    rows = []
    for p in r["points"]:
        mark = ("* " if p["name"] in front else "") + ("o " if p["name"] in plain else "")
        if p.get("error"):  # its kind and its last clause, the reason (the JSON has it all)
            kind, _, text = p["error"].partition(": ")
            why = f"failed ({kind}): {text.rpartition(': ')[2]}"
            rows.append([mark + p["name"], why[:120], *[""] * (5 + len(extra))])
            continue
        f = p.get("fractions", {})

        def cell(k, p=p, f=f):
            return f"{value(p.get(k), 1)} ({f.get(k, 0):.0%})"

        theirs = [_dse_latency(points.get(p["name"], {})) for points in extra.values()]
        rows.append([mark + p["name"], _dse_latency(p), *theirs,
                     cell("lut"), cell("ff"), cell("dsp"), cell("bram36"),
                     ", ".join(p.get("fits", [])) or "none"])  # fmt: skip
    head = "config (* joint front; o: joint front without the unit)"
    models = [r.get("model"), *extra]
    ms = [f"{MODEL_TITLES.get(m, m or 'ResNet-18')} accelerator ms" for m in models]
    return md_table([head, *ms, "LUT", "FF", "DSP", "BRAM36", "fits"], rows)


def _dse_latency(p: dict) -> str:
    """A point's latency, and the layers it leaves on the host where it leaves more than the
    sweep's fronts compare (their time is not in it: `explore.sweep.compared_host_layers`)."""
    ms = value(p.get("latency_ms"), 1)
    if p.get("compared", True):
        return ms
    host = p.get("host_layers", [])
    return f"{ms} (not compared: {len(host)} layers on the host)"


MODEL_TITLES = {"resnet18": "ResNet-18", "mobilenet_v2": "MobileNetV2", "digits": "digits"}


def _gpu_fallback(r: dict) -> str:
    rows = [[n["name"], value(n.get("gpu_ms"), 1), value(n.get("cpu_ms"), 1),
             value(n.get("gpu_vs_cpu"), 2), value(n.get("gpu_first_run_ms"), 0),
             value(n.get("reference_ms"), 0), value(n.get("bit_exact"))]
            for n in r["networks"]]  # fmt: skip
    sw = r.get("software") or {}
    names = {"driver_cuda": "driver CUDA", "cuda_core": "cuda.core",
             "cuda_bindings": "cuda-bindings", "llvmlite": "llvmlite"}  # fmt: skip
    with_ = ", ".join(f"{names[k]} {sw[k]}" for k in names if sw.get(k))
    return (
        f"On {r.get('gpu', '?')} (compute capability {r.get('compute_capability', '?')})"
        + (f"; {with_}" if with_ else "")
        + ":\n\n"
        + md_table(
            [
                "network",
                "GPU ms",
                "CPU (1 thread) ms",
                "GPU / CPU",
                "first GPU run ms",
                "integer reference ms",
                "bit-exact",
            ],
            rows,
        )
    )


def _tuner(r: dict) -> str:
    figures = figures_block(
        r,
        [
            ("median_trials_ratio", "random / tuner trials to 95% of the exhaustive best", "≥ 4"),
            ("median_trials_ratio_99", "the same to 99%", "—"),
            ("tuned_min_roofline_fraction", "64 trials", "≥ 0.95"),
            ("tuned_mac_weighted_utilization", "64 trials", "≥ 0.98"),
        ],
    )
    rows = [[x["name"], value(x.get("space")), value(x.get("exhaustive_best")),
             ", ".join(map(str, x.get("tuner_trials", []))),
             ", ".join(map(str, x.get("random_trials", []))),
             value(x.get("tuned_roofline_fraction"))]
            for x in r.get("layers", [])]  # fmt: skip
    header = ["layer", "space", "exhaustive best", "tuner trials to 95%", "random",
              "tuned roofline fraction"]  # fmt: skip
    layers = md_table(header, rows)
    return figures + "\n\n" + layers


# the recorded sweeps by (part, model): `tilecraft dse --record` keeps each under its suite
DSE_SUITES = {
    ("xc7z020", "resnet18"): "dse",  # the PYNQ-Z1's part
    ("xczu7ev", "resnet18"): "dse-xczu7ev",  # the ZCU104's: the unit costs a smaller share
    ("xc7z020", "mobilenet_v2"): "dse-mobilenet-v2",  # what the depthwise mode buys
    ("xczu7ev", "mobilenet_v2"): "dse-xczu7ev-mobilenet-v2",  # the same, the 128-bit port's too
}

RENDER: dict[str, Callable[[dict], str]] = {
    "resnet18-layers": _resnet18_layers,
    "resnet18": _network("≤ 74"),
    "mobilenet-v2": _network("≤ 38 (≤ 20 with depthwise at array speed)"),
    "digits": _digits,
    "onnxruntime": _onnxruntime,
    "onnxruntime-resnet18": _onnxruntime_resnet18,
    "sim-speed": _sim_speed,
    "rtl-speed": _rtl_speed,
    "resources": _resources,
    "cpu-fallback": _cpu_fallback,
    "tuner": _tuner,
    "timing": _timing,
    **dict.fromkeys(DSE_SUITES.values(), _dse),
    "gpu-fallback": _gpu_fallback,
}


# the other suites' results a suite's block shows beside its own (under its result's "related")
RELATED = {"cpu-fallback": ("resnet18",), "dse": ("dse-mobilenet-v2",)}


def block(suite: str, folder: Path | None = None) -> str:
    """The markdown of `suite`'s figures block, from its recorded result (and those of the
    suites it is set beside, `RELATED`)."""
    entry = results.load(suite, folder)
    if entry is None:
        sweeps = {s: f"--part {p} --model {m}" for (p, m), s in DSE_SUITES.items()}
        how = f"tilecraft dse {sweeps[suite]} --record" if suite in sweeps else (
            f"tilecraft bench {suite} --record")  # fmt: skip
        return f"_No recorded result: `{how}` makes one._\n"
    result = entry["result"]
    if suite in RELATED:
        related = {name: results.load(name, folder) for name in RELATED[suite]}
        result = {**result, "related": {k: v["result"] for k, v in related.items() if v}}
    return RENDER[suite](result) + "\n\n" + _provenance(entry) + "\n"


def render(text: str, folder: Path | None = None) -> str:
    """`text` (the README) with every figures block made again from the recorded data."""
    return BLOCK.sub(lambda m: m.group(1) + block(m.group(2), folder) + m.group(4), text)


def check(path: Path | None = None, folder: Path | None = None) -> list[str]:
    """The suites whose block in `path` (the README) disagrees with their recorded data."""
    path = path or README
    text = path.read_text()
    return [m.group(2) for m in BLOCK.finditer(text) if m.group(3) != block(m.group(2), folder)]
