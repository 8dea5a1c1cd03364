"""`tilecraft boards` (the presets and which configs fit them) and `tilecraft build --board B`
(a PYNQ overlay's Vivado project, built where Vivado is)."""

from __future__ import annotations

import argparse

from tilecraft.cli.common import (
    positive,
    positive_number,
    record_result,
    seconds,
    write,
    write_json,
)
from tilecraft.errors import TilecraftError


def seed_list(text: str) -> list[int | None]:
    """nextpnr seeds, comma-separated: whole numbers >= 0, or `default` (nextpnr's own)."""
    seeds = []
    for part in text.split(","):
        part = part.strip()
        if part == "default":
            seeds.append(None)
        elif part.isascii() and part.isdigit():
            seeds.append(int(part))
        else:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not a seed: give whole numbers >= 0 or 'default', "
                f"comma-separated (default,1,2,3,4,5)"
            )
    if len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r} names a seed twice: give each once")
    return seeds


def board_rows() -> list[dict]:
    """One dict per board preset: what it is, and how each sweep preset fits its part."""
    from tilecraft.boards import board, board_names
    from tilecraft.boards.fit import fit
    from tilecraft.hw.config import preset, preset_names

    rows = []
    for name in board_names():
        b = board(name)
        fits = {c: fit(preset(c), b, c) for c in preset_names()}
        rows.append(
            {
                "board": name,
                "description": b.description,
                "part": b.part,
                "family": b.family,
                "ps": b.ps.ip if b.ps else None,
                "host": b.host or None,
                "clock_mhz": b.config.clock_mhz,
                "axi_data_bits": b.config.axi_data_bits,
                "dram_mib": b.memory.dram_mib if b.memory else None,
                "cma_mib": b.memory.cma_mib if b.memory else None,
                "pynq": b.pynq.release if b.pynq else None,
                "python": b.pynq.python if b.pynq else None,
                "vivado": b.pynq.vivado if b.pynq else None,
                "config_digest": b.config.digest,
                "fits": {
                    c: {
                        "fits": f.fits,
                        "fractions": f.fractions,
                        "basis": f.basis,
                        "verdict": f.describe(),
                    }
                    for c, f in fits.items()
                },
            }
        )
    return rows


def cmd_boards(args) -> int:

    rows = board_rows()
    print(
        f"{'board':11s} {'part':22s} {'host':8s} {'fabric':>8s} {'DDR':>6s} {'CMA':>6s}  "
        f"PYNQ (Python, Vivado)"
    )
    for r in rows:
        if r["pynq"] is None:
            print(
                f"{r['board']:11s} {r['part']:22s} {'-':8s} {r['clock_mhz']:5.0f} MHz "
                f"{'-':>6s} {'-':>6s}  none: the open flow (tilecraft build)"
            )
            continue
        print(
            f"{r['board']:11s} {r['part']:22s} {r['host']:8s} {r['clock_mhz']:5.0f} MHz "
            f"{r['dram_mib']:>4} M {r['cma_mib']:>4} M  {r['pynq']} ({r['python']}, {r['vivado']})"
        )
    print("\nWhich configs fit (yosys synthesis figures; no placement):")
    for r in rows:
        print(f"  {r['board']}:")
        for config, f in r["fits"].items():
            print(f"    {config:9s} {f['verdict']}")
    write(args.json, lambda p: write_json(p, {"boards": rows}), "JSON")
    return 0


NAME = "tilecraft"  # an overlay's default name


def cmd_build(args) -> int:
    from tilecraft.boards import board, resolve_config
    from tilecraft.boards.block_design import block_design
    from tilecraft.boards.fit import fit
    from tilecraft.boards.flows.vivado import build
    from tilecraft.compiler.operator.conv2d import conv2d
    from tilecraft.ops import Conv2d, Epilogue

    b = board(args.board)
    cfg = resolve_config(args.config) if args.config else b.config
    if args.clock_mhz is not None and b.open is None:
        cfg = cfg.replace(clock_mhz=args.clock_mhz)  # the fabric clock the block design makes
    if b.open is not None:
        ignored = [
            flag
            for flag, given in (("--name", args.name != NAME), ("--any-vivado", args.any_vivado))
            if given
        ]
        if ignored:  # the open flow writes tilecraft.bit with yosys and nextpnr, no Vivado
            raise TilecraftError(f"{', '.join(ignored)}: for Vivado boards, not {b.name}")
        return _build_open(b, cfg, args)
    if args.route_timeout is not None:
        raise TilecraftError(f"--route-timeout: for open-flow boards (ulx3s-85f), not {b.name}")
    design = block_design(b, cfg, args.name)
    verdict = fit(cfg, b, args.config or b.name)
    print(
        f"{design.name}: {cfg.tag} on the {b.description}, fabric clock {design.clock.mhz:g} "
        f"MHz ({verdict.describe()})"
    )
    if verdict.fits is False:
        print("warning: the synthesis figures say this config does not fit the part")
    example = conv2d(cfg, Conv2d(1, 64, 14, 14, 64, 3, 1, 1), Epilogue(shift=9, relu=True))
    result = build(
        design,
        args.folder,
        example=example.replace(name="example_conv"),
        any_vivado=args.any_vivado,
        allow_timing_failure=args.allow_timing_failure,
    )
    print(
        f"wrote the Verilog, bd.tcl, project.tcl, build.sh and the overlay package "
        f"(package/) to {args.folder}"
    )
    if result["ran"]:
        print(f"Vivado {result['vivado']} built {result['overlay']}/{design.name}.bit and .hwh")
    else:
        print(
            f"{result['reason']}: build it with\n  {result['command']}\nthen, on the "
            f"board, pip install {args.folder}/package (or copy {result['overlay']}/ "
            f"there)"
        )
    return 0


def _build_open(b, cfg, args) -> int:
    from tilecraft.boards.flows.ecp5_board import build_bitstream

    print(
        f"{cfg.tag} on the {b.description}: yosys, nextpnr-ecp5 and ecppack (minutes a "
        f"route; a route short of its clock is routed again at a lower one)"
    )
    made = build_bitstream(
        b,
        args.folder,
        cfg,
        route_timeout_s=args.route_timeout,
        clock_mhz=args.clock_mhz,
        allow_timing_failure=args.allow_timing_failure,
    )
    print(made.timing.format())
    print(made.describe())
    if not made.timing.met:
        print(
            f"warning: {made.path.name} is clocked above its route's Fmax, as asked "
            f"(--allow-timing-failure): it may fail on the board"
        )
    print(
        f"wrote {made.path} ({made.path.stat().st_size:,} bytes), "
        f"{made.path.with_suffix('.json').name} and {made.config_file.name} (the config at "
        f"{made.pll_mhz:g} MHz: model this board's figures with --config "
        f"{made.config_file})"
    )
    return 0


def cmd_hw_timing(args) -> int:
    from tilecraft.boards import resolve_config

    if args.flow != "ecp5":  # the xilinx flow synthesizes only: nothing to seed, plot or route
        given = [
            f
            for f in ("seed", "seeds", "unit", "plot", "record", "freq", "route_timeout")
            if getattr(args, f)
        ]
        if given:
            flags = ", ".join("--" + f.replace("_", "-") for f in given)
            raise TilecraftError(f"{flags}: for --flow ecp5 (the xilinx flow is synthesis alone)")
    if args.workers is not None and args.seeds is None:
        raise TilecraftError("--workers: for --seeds (one route runs on one core)")
    if args.seeds is not None and (args.seed is not None or args.unit is not None):
        other = "--seed" if args.seed is not None else "--unit"
        raise TilecraftError(f"--seeds routes the config at each seed: drop {other}")
    if args.unit is not None:
        return _unit_timing(args)
    cfg = resolve_config(args.config)
    if args.seeds is not None:
        return _timing_over_seeds(args, cfg)
    if args.flow == "ecp5":
        from tilecraft.boards.flows.ecp5 import timing

        report = timing(
            cfg,
            device=args.device,
            target_mhz=args.freq,
            route_timeout_s=args.route_timeout,
            seed=args.seed,
        )
        print(report.format())
        data = {"flow": "ecp5", **report.to_dict()}
        if args.plot:
            _plot_endpoints(report, args.plot)
        if args.record:
            _record_ecp5(args.config, cfg, report)
            record_result("timing", data)
    else:
        from tilecraft.boards.flows.resources import synthesize

        r = synthesize(cfg, args.part, depth=True)
        print(
            f"{cfg.tag} on {args.part}: logic depth {r.logic_depth} cells (yosys ltp after "
            f"synth_xilinx; a proxy: Vivado is not run), {r.seconds:.0f} s"
        )
        data = {
            "flow": "xilinx",
            "fmax_mhz": None,
            "routed": False,
            "seconds": r.seconds,
            **r.to_dict(),
        }
    write(args.json, lambda p: write_json(p, data), "JSON")
    return 0


def _timing_over_seeds(args, cfg) -> int:
    """`hw timing --seeds`: the config routed at each seed; the JSON (and --record) keeps the
    default seed's route (else the first's) with a row per seed under `seeds`."""
    from tilecraft.boards.flows.ecp5 import format_seeds, seed_rows, timing_over_seeds

    reports = timing_over_seeds(
        cfg,
        args.seeds,
        device=args.device,
        target_mhz=args.freq,
        route_timeout_s=args.route_timeout,
        workers=args.workers or 1,
    )
    for report in reports:
        print(report.format(), end="\n\n")
    print(format_seeds(reports))
    first = next((r for r in reports if r.seed is None), reports[0])
    data = {"flow": "ecp5", **first.to_dict(), "seeds": seed_rows(reports)}
    if args.plot:
        _plot_endpoints(first, args.plot)
    if args.record:
        _record_ecp5(args.config, cfg, first)
        record_result("timing", data)
    write(args.json, lambda p: write_json(p, data), "JSON")
    return 0


def _unit_timing(args) -> int:
    """`hw timing --unit NAME`: copies of one unit routed alone on the ECP5."""
    from tilecraft.boards.flows.unit_timing import unit_timing

    if args.flow != "ecp5" or args.record:
        raise TilecraftError(
            f"--unit {args.unit} routes on the ECP5 flow only, and records nothing: drop "
            f"{'--record' if args.record else '--flow ' + args.flow}"
        )
    report = unit_timing(
        args.unit,
        args.copies,
        device=args.device,
        target_mhz=args.freq or 100.0,
        route_timeout_s=args.route_timeout,
        seed=args.seed,
    )
    print(report.format())
    if args.plot:
        _plot_endpoints(report, args.plot)
    write(
        args.json,
        lambda p: write_json(p, {"flow": "ecp5", "unit": args.unit, **report.to_dict()}),
        "JSON",
    )
    return 0


def _plot_endpoints(report, path: str) -> None:
    from tilecraft.boards.flows.sta import plot_histogram

    if report.endpoints is None:
        print("--plot: no routed SDF (routing did not finish), nothing to plot")
        return
    title = (
        f"{report.config} on the {report.device}: {report.fmax_mhz:.1f} MHz routed, "
        f"target {report.target_mhz:g} MHz"
    )
    try:
        plot_histogram(report.endpoints, path, title)
    except ImportError:
        raise TilecraftError("--plot needs matplotlib: pip install 'tilecraft[plot]'") from None
    print(f"wrote {path}")


def _record_ecp5(name: str, cfg, report) -> None:
    from tilecraft.boards.fit import record

    if not report.resources:  # no route came back: nextpnr wrote no utilisation
        print(f"not recorded in the package's figures (ecp5, {cfg.tag}): no route, no utilisation")
        return
    use = {k: v.get("used", 0) for k, v in report.resources.items()}
    record(
        {
            "config": name,
            "tag": cfg.tag,
            "family": "ecp5",
            "lut": use.get("TRELLIS_COMB", 0),
            "ff": use.get("TRELLIS_FF", 0),
            "dsp": use.get("MULT18X18D", 0),
            "bram36": use.get("DP16KD", 0) / 2,
            "uram": 0,
            "seconds": round(report.seconds),
        },
        cfg,
    )
    print(f"recorded in the package's figures (ecp5, {cfg.tag})")


def add_hw_parsers(hw) -> None:
    """`tilecraft hw timing`."""
    t = hw.add_parser(
        "timing",
        help="place and route (ECP5, nextpnr) and report the routed "
        "Fmax and worst path; or the logic depth for a Xilinx part",
    )
    t.add_argument("--config", default="1x8x8")
    t.add_argument("--flow", choices=("ecp5", "xilinx"), default="ecp5")
    t.add_argument("--device", default="85k", help="ecp5: 25k, 45k or 85k (speed grade 6)")
    t.add_argument("--part", default="xc7z020", help="xilinx: the part")
    t.add_argument(
        "--freq", type=positive_number, help="the target clock in MHz (default: the config's)"
    )
    t.add_argument(
        "--route-timeout",
        type=seconds,
        metavar="S",
        help="stop nextpnr S s after it starts (placement counts); report the estimate "
        "after placement",
    )
    t.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="ecp5: nextpnr's placement seed (default: nextpnr's own)",
    )
    t.add_argument(
        "--seeds",
        type=seed_list,
        metavar="LIST",
        help="ecp5: synthesize once, route at each of these seeds (e.g. default,1,2,3,4,5) "
        "and say at how many the target holds; the JSON and --record keep the default seed's "
        "route (else the first's) and a row per seed",
    )
    t.add_argument(
        "--workers",
        type=positive,
        metavar="N",
        help="--seeds: routes at once, each on one core (default 1)",
    )
    t.add_argument(
        "--unit",
        metavar="NAME",
        help="ecp5: route copies of one unit alone, requant-lane (a minute, not the core's "
        "most of an hour; --config is not used)",
    )
    t.add_argument(
        "--copies", type=positive, default=4, metavar="N", help="--unit: how many side by side (4)"
    )
    t.add_argument("--json", help="write the figures as JSON here")
    t.add_argument("--plot", help="ecp5: plot the endpoints' path lengths (PNG) here")
    t.add_argument(
        "--record",
        action="store_true",
        help="ecp5: add the utilisation to "
        "boards/synthesis.json (what `tilecraft boards` judges fits by)",
    )
    t.set_defaults(func=cmd_hw_timing)


def add_parsers(sub) -> None:
    p = sub.add_parser("boards", help="the board presets and which configs fit them")
    p.add_argument("--json", help="write the table as JSON here")
    p.set_defaults(func=cmd_boards)

    b = sub.add_parser(
        "build",
        help="a board's overlay: Verilog, block design and Vivado project "
        "(built when Vivado is on the PATH)",
    )
    b.add_argument("--board", required=True, help="a board preset (`tilecraft boards`)")
    b.add_argument("--config", help="the accelerator config (default: the board's)")
    b.add_argument("--name", default=NAME, help="the overlay's name (its files' stem)")
    b.add_argument(
        "-o", "--output", dest="folder", required=True, help="folder to write the project into"
    )
    b.add_argument(
        "--route-timeout",
        type=seconds,
        metavar="S",
        help="open-flow boards: give up routing after S seconds",
    )
    b.add_argument(
        "--any-vivado",
        action="store_true",
        help="build with any Vivado on the PATH, not only the board's",
    )
    b.add_argument(
        "--clock-mhz",
        type=positive_number,
        metavar="MHZ",
        help="the accelerator's clock (default: the config's; an open-flow build "
        "lowers it until a route meets it, unless given)",
    )
    b.add_argument(
        "--allow-timing-failure",
        action="store_true",
        help="write the bitstream even for a clock its route misses (it may fail on the board)",
    )
    b.set_defaults(func=cmd_build)
