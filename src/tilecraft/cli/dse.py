"""`tilecraft dse --part P`: the design-space sweep, its Pareto front and plot."""

from __future__ import annotations

from tilecraft.errors import TilecraftError


def cmd_dse(args) -> int:
    from tilecraft.cli.common import record_result, write, write_json
    from tilecraft.explore.sweep import run_sweep

    if args.workers is not None and args.scheduler:
        raise TilecraftError("give --workers (a local cluster) or --scheduler, not both")
    # refused before the sweep
    suite = recorded_suite(args.part, args.model) if args.record else None
    result = run_sweep(
        args.part,
        model=args.model,
        limit=args.configs,
        workers=2 if args.workers is None else args.workers,
        scheduler=args.scheduler,
        cache=args.cache,
        trials=args.trials,
    )
    print(format_table(result))
    write(args.json, lambda p: write_json(p, result), "JSON")
    if suite is not None:
        record_result(suite, result)
    if args.plot:
        from tilecraft.explore.plot import plot_fronts

        plot_fronts(result, args.plot)
        print(f"plot written to {args.plot}")
    return 0 if any(p["error"] is None for p in result["points"]) else 1


def recorded_suite(part: str, model: str = "resnet18") -> str:
    """Where `--record` keeps a sweep of `model` on `part` (benchmarks/results/SUITE.json, the
    benchmarks README's block of it): ResNet-18's as `dse` on the PYNQ-Z1's xc7z020 and
    `dse-PART` on another part; another model's as `dse-MODEL` on the xc7z020 and
    `dse-PART-MODEL` on another part (`benchmarks.tables.DSE_SUITES`)."""
    from tilecraft.benchmarks.tables import DSE_SUITES

    suite = DSE_SUITES.get((part, model))
    if suite is None:
        kept = ", ".join(f"{m} on {p}" for p, m in DSE_SUITES)
        raise TilecraftError(
            f"--record keeps sweeps of {kept}, not {model} on {part}: drop --record"
        )
    return suite


def format_table(r: dict) -> str:
    joint = set(r["fronts"].get("joint", []))
    joint_plain = set(r.get("fronts_without_unit", {}).get("joint", []))
    trials = r.get("trials") or 0
    schedules = f"tuned schedules, {trials} trials a layer" if trials else "heuristic schedules"
    lines = [
        f"design space on {r['part']} ({r['family']} synthesis), {r['model']} ({schedules}): "
        f"{len(r['points'])} configs in {r['seconds']:.0f} s, {r['synthesized']} synthesized "
        f"(the rest from the cache); * = on the joint Pareto front, o = on it without the "
        f"requantization unit (+requant); a point that leaves more layers on the host than "
        f"the fronts' ({_host(r['host_layers_compared'])}) is off them: its latency leaves "
        f"their time out",
        f"   {'config':32s} {'latency':>9s} {'LUT':>14s} {'DSP':>11s} {'BRAM36':>12s}  fits",
    ]
    for p in r["points"]:
        if p["error"]:
            lines.append(f"   {p['name']:32s} failed: {p['error'][:80]}")
            continue
        f = p["fractions"]
        star = ("*" if p["name"] in joint else " ") + ("o" if p["name"] in joint_plain else " ")
        lines.append(
            f"{star} {p['name']:32s} {p['latency_ms']:7.1f} ms {p['lut']:>7,} ({f['lut']:4.0%}) "
            f"{p['dsp']:>4} ({f['dsp']:4.0%}) {p['bram36']:>5} ({f['bram36']:4.0%})  "
            f"{', '.join(p['fits']) or 'none'}"
            + ("" if p["compared"] else f"; off the fronts: {_host(p['host_layers'])}")
        )
    return "\n".join(lines)


def _host(layers: list[str]) -> str:
    return f"{len(layers)} layers on the host" if layers else "none on the host"


def add_parsers(sub, count) -> None:
    p = sub.add_parser(
        "dse",
        help="sweep accelerator configs: modeled network latency against "
        "synthesis resources, the Pareto front, which boards each fits",
    )
    p.add_argument("--part", default="xc7z020", help="xc7z020, xczu3eg, xck26, xczu7ev, ...")
    p.add_argument("--model", default="resnet18", choices=("resnet18", "mobilenet_v2", "digits"))
    p.add_argument(
        "--configs", type=count, help="sweep only the first N configs (smallest arrays first)"
    )
    p.add_argument("--workers", type=count, help="local Dask workers (default 2; 0: no Dask)")
    p.add_argument("--scheduler", help="a Dask scheduler's address (its workers evaluate)")
    p.add_argument(
        "--cache",
        default="build/dse/synthesis-cache.json",
        help="synthesis figures by design, the Verilog synthesized (reused across sweeps)",
    )
    p.add_argument(
        "--trials",
        type=int,
        default=0,
        help="tune each config's layers with N "
        "cycle-model measurements each first (the tune extra; default 0: the "
        "compiler's heuristic schedules)",
    )
    p.add_argument("--plot", help="draw the fronts (latency against LUT, DSP, BRAM) to a PNG")
    p.add_argument("--json", help="write the points and fronts as JSON here")
    p.add_argument("--record", action="store_true", help="keep the sweep as the recorded "
                   "figures (benchmarks/results/dse.json; dse-PART.json for a part other "
                   "than the xc7z020)")  # fmt: skip
    p.set_defaults(func=cmd_dse)
