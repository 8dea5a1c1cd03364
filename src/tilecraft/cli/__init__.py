"""The `tilecraft` command: each subcommand is a few lines over a public function."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import suppress
from pathlib import Path

import numpy as np

from tilecraft.cli.common import (
    add_layer_arguments,
    count,
    layer_of,
    modeled_cycles,
    names,
    positive,
    record_result,
    recorded,
    schedule,
    write,
    write_json,
    write_trace,
)
from tilecraft.errors import PathError, TilecraftError
from tilecraft.files import read_json

OUTPUTS = ("output", "json", "trace", "plot", "save_tables")  # checked before any work
PLOT_FORMATS = (".png", ".svg", ".pdf")  # what matplotlib writes by the extension


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = _negative_values(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):  # a command of commands given none (`tilecraft hw`): its help
        with suppress(SystemExit):  # --help prints, then exits
            parser.parse_args([argv[0], "--help"] if argv else ["--help"])
        return 2
    try:
        _check_outputs(args)
        return args.func(args) or 0
    except TilecraftError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `tilecraft ... | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that Python's exit flush cannot fail again
        return 1


def _negative_values(argv: list[str]) -> list[str]:
    """`--schedule -1,2,4,4` as `--schedule=-1,2,4,4`: argparse would take the value for an
    option and answer "expected one argument" instead of the schedule's own error."""
    out = list(argv)
    if len(out) > 1 and out[0] == "compile" and out[1] not in ("conv2d", "dense", "-h", "--help"):
        out[0] = "compile-model"  # `tilecraft compile MODEL.onnx ...`
    if (
        len(out) > 1
        and out[0] == "tune"
        and out[1] not in ("conv2d", "dense", "resnet18-layers", "model", "-h", "--help")
    ):
        out.insert(1, "model")  # `tilecraft tune MODEL.onnx ...`
    for i in range(len(out) - 2, -1, -1):
        value = out[i + 1]
        if out[i] == "--schedule" and value[:1] == "-" and value[1:2].isdigit():
            out[i : i + 2] = [f"--schedule={value}"]
    return out


def _check_outputs(args) -> None:
    """Refuse an output path that cannot be written before the command runs (a benchmark or a
    synthesis takes minutes; its result must not be lost to a typo in --json)."""
    from tilecraft.files import check_writable

    for name in OUTPUTS:
        path = getattr(args, name, None)
        if path:
            check_writable(path, "--" + name.replace("_", "-"))
    trace = getattr(args, "trace", None)
    if trace and Path(trace).suffix.lower() != ".json":
        raise PathError(
            f"--trace {trace!r}: a trace is JSON (Perfetto's format); name a .json file"
        )
    plot = getattr(args, "plot", None)
    if plot and Path(plot).suffix.lower() not in PLOT_FORMATS:
        raise PathError(
            f"--plot {plot!r}: a plot is written as {', '.join(PLOT_FORMATS)} (by the file's "
            f"extension), not {Path(plot).suffix or 'a file without one'!r}"
        )


# ---- commands ------------------------------------------------------------------------------
def cmd_config_show(args) -> int:
    from tilecraft.boards import config_names, resolve_config
    from tilecraft.hw.isa import isa_for

    if args.list:
        print("\n".join(config_names()))
        return 0
    cfg = resolve_config(args.preset)
    print(cfg.describe())
    if args.isa:
        print(isa_for(cfg).describe())
    return 0


def cmd_disasm(args) -> int:
    from tilecraft.hw.isa import disassemble, format_uops
    from tilecraft.runtime import Program

    program = Program.load(args.program)
    print("\n".join(program.describe() + disassemble(program.table())))
    if args.uops:
        print("\n".join(format_uops(program.uop_table())))
    return 0


def cmd_sim(args) -> int:
    from tilecraft.runtime import Program, get_device
    from tilecraft.runtime.check import check_outputs
    from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs
    from tilecraft.runtime.tensors import load_tensors

    program = Program.load(args.program)
    if args.inputs:
        inputs = load_tensors(args.inputs)
    else:
        inputs = random_inputs(program, np.random.default_rng(args.seed))
    result = get_device("sim").run(program, pack_inputs(program, inputs), trace=bool(args.trace))
    print(result.report.format())
    write(args.trace, lambda p: write_trace(p, result.report.trace), "trace")
    write(args.json, lambda p: write_json(p, result.report.to_dict()), "JSON")
    if args.check:
        ok, message = check_outputs(program, inputs, unpack_outputs(program, result.outputs))
        print(message)
        return 0 if ok else 1
    return 0


def cmd_example(args) -> int:
    from tilecraft.benchmarks.example import run_example
    from tilecraft.boards import resolve_config

    r = run_example(
        resolve_config(args.config), args.M, args.K, args.N, seed=args.seed, trace=bool(args.trace)
    )
    print(r.format())
    write(args.output, r.overlap.program.save, "program")
    write(args.trace, lambda p: write_trace(p, r.overlap.report.trace), "trace")
    write(args.json, lambda p: write_json(p, r.to_dict()), "JSON")
    return 0 if r.ok else 1


def cmd_compile(args) -> int:
    from tilecraft.compiler.operator.params import random_params
    from tilecraft.compiler.operator.pipeline import compile_operator, plan_operator

    cfg, op, ep = layer_of(args)
    options = {
        "schedule": schedule(args.schedule) or recorded(args, cfg, op, ep),
        "max_insns": args.max_insns,
    }
    plan_operator(cfg, op, ep, **options)  # a layer too large fails before its weights exist
    params = random_params(
        op, ep, np.random.default_rng(args.seed), arrays=not args.params_as_inputs
    )
    comp = compile_operator(cfg, op, ep, **options, **params)
    print(comp.format())
    chosen = next((c.cycles for c in comp.candidates if c.schedule == comp.schedule), None)
    modeled = modeled_cycles([comp.program], [chosen])
    print(modeled.format())
    write(args.output, comp.program.save, "program")
    summary = {
        "operator": op.describe(),
        "config": cfg.tag,
        "schedule": comp.schedule.describe(),
        "instructions": len(comp.program.insns),
        "output": args.output,
        **modeled.to_dict(),
    }
    write(args.json, lambda p: write_json(p, summary), "JSON")
    return 0


SUITE_OPTIONS = {  # bench's flags that only some suites take
    "no_check": ("resnet18-layers",),
    "rtl": ("resnet18-layers",),
    "records": ("resnet18-layers",),
    "random": ("rtl-speed",),
    "schedules": ("rtl-speed",),
    "layers": ("tuner",),
    "save_tables": ("tuner",),
}


def cmd_bench(args) -> int:
    from tilecraft.benchmarks import suite
    from tilecraft.boards import resolve_config

    module = suite(args.suite)
    for flag, suites in SUITE_OPTIONS.items():  # a flag for another suite: a mistake, not a no-op
        value = getattr(args, flag)
        if value not in (None, False, 0) and args.suite not in suites:
            given = "--" + flag.replace("_", "-")
            raise TilecraftError(f"{given} is for {' and '.join(suites)}, not {args.suite}")
    if args.suite == "resnet18-layers" and args.plot and args.rtl:
        raise TilecraftError("resnet18-layers --plot draws the cycle model's figures; drop --rtl")
    if args.plot and not hasattr(module, "plot"):
        raise TilecraftError(f"--plot is for resnet18-layers and rtl-speed, not {args.suite}")
    if args.plot and args.suite == "rtl-speed" and not args.schedules:
        raise TilecraftError("rtl-speed --plot draws the --schedules sweep: give --schedules N")
    if args.against and args.suite != "rtl-speed":
        raise TilecraftError(f"--against is for rtl-speed, not {args.suite}")
    options = {
        "resnet18-layers": {
            "check": not args.no_check,
            "rtl": names(args.rtl),
            "records": args.records,
        },
        "rtl-speed": {
            "random": args.random,
            "schedules": args.schedules,
            # the sweep runs on the three presets unless a config is named
            "schedule_configs": [resolve_config(args.config)] if args.config else None,
            "against": read_json(args.against, "earlier result") if args.against else None,
        },
        "tuner": {
            "seeds": args.seeds,
            "layers": names(args.layers),
            "save_tables": args.save_tables,
        },
    }.get(args.suite, {})
    config = args.config or getattr(module, "PRESET", "default")
    result = module.run(resolve_config(config), **options)
    print(module.format_table(result))
    if args.plot:
        write(args.plot, lambda p: module.plot(result, p), "plot")
    write(args.json, lambda p: write_json(p, result), "JSON")
    if args.record:
        record_result(args.suite, result)
    return 0 if result.get("ok", True) else 1


def cmd_figures(args) -> int:
    from tilecraft.benchmarks import tables
    from tilecraft.files import write_atomic

    stale = tables.check()
    if args.check:
        if stale:
            print(f"the benchmarks README's tables disagree with the recorded results of: "
                  f"{', '.join(stale)} (run tilecraft figures)")  # fmt: skip
            return 1
        print("the benchmarks README's tables agree with the recorded results")
        return 0
    write_atomic(tables.README, tables.render(tables.README.read_text()))
    print(f"{tables.README}: {len(stale)} table(s) made again from the recorded results"
          f"{' (' + ', '.join(stale) + ')' if stale else ''}")  # fmt: skip
    return 0


def cmd_hw_verilog(args) -> int:
    from tilecraft.boards import resolve_config
    from tilecraft.boards.flows.verilog import export_verilog

    cfg = resolve_config(args.config)
    paths = export_verilog(cfg, args.folder)
    print(f"wrote {', '.join(p.name for p in paths)} ({cfg.tag}) to {args.folder}")
    return 0


def cmd_hw_restamp(args) -> int:
    from tilecraft.boards.fit import restamp

    done = restamp()
    says = {
        "stamped": "the same design: stamped with the tree's RTL",
        "changed": "its design changed: measure it again",
        "no design": "recorded without its design: measure it again to stamp it later",
    }
    for config, fam, what in done:
        print(f"{config} ({fam}): {says[what]}")
    stamped = sum(what == "stamped" for *_, what in done)
    print(f"{stamped} of {len(done)} figures from other sources stamped")
    return 0


def cmd_hw_resources(args) -> int:
    from tilecraft.boards import resolve_config
    from tilecraft.boards.flows.resources import synthesize

    cfg = resolve_config(args.config)
    r = synthesize(cfg, args.part)
    print(r.format())
    write(args.json, lambda p: write_json(p, r.to_dict()), "JSON")
    if args.record:
        from tilecraft.boards.fit import family, record

        figure = {
            "config": args.config,
            "tag": cfg.tag,
            "family": family(args.part),
            **{k: getattr(r, k) for k in ("lut", "ff", "dsp", "bram36", "uram")},
            "seconds": round(r.seconds),
        }
        record(figure, cfg)
        print(f"recorded in the package's synthesis figures ({figure['family']}, {cfg.tag})")
    return 0


# ---- arguments -----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tilecraft", description=__doc__)
    sub = p.add_subparsers(title="commands")

    cfg = sub.add_parser("config", help="hardware configs").add_subparsers(title="config")
    show = cfg.add_parser("show", help="print a config, its derived sizes and ISA layout")
    show.add_argument("preset", nargs="?", default="default", help="preset name or .toml/.json")
    show.add_argument("--isa", action="store_true", help="also print the instruction layouts")
    show.add_argument("--list", action="store_true", help="list the config names")
    show.set_defaults(func=cmd_config_show)

    dis = sub.add_parser("disasm", help="disassemble a program file")
    dis.add_argument("program")
    dis.add_argument("--uops", action="store_true", help="also list the micro-ops")
    dis.set_defaults(func=cmd_disasm)

    sim = sub.add_parser("sim", help="run a program on the behavioral simulator")
    sim.add_argument("program")
    sim.add_argument("--inputs", help=".npz of named logical inputs (default: random, --seed)")
    sim.add_argument("--seed", type=count, default=0)
    sim.add_argument("--trace", help="write a Perfetto/Chrome trace JSON here")
    sim.add_argument("--json", help="write the report as JSON here")
    sim.add_argument("--check", action="store_true", help="compare outputs with the reference")
    sim.set_defaults(func=cmd_sim)

    ex = sub.add_parser("example", help="the double-buffered blocked GEMM (the main job)")
    ex.add_argument("--config", default="default", help="config name or .toml/.json")
    ex.add_argument("--M", type=int, default=64)
    ex.add_argument("--K", type=int, default=256)
    ex.add_argument("--N", type=int, default=128)
    ex.add_argument("--seed", type=count, default=0)
    ex.add_argument("-o", "--output", help="save the overlapped program here (.tcp)")
    ex.add_argument("--trace", help="write the overlapped run's trace here")
    ex.add_argument("--json", help="write the figures as JSON here")
    ex.set_defaults(func=cmd_example)

    from tilecraft.compiler.operator.builder import MAX_INSNS

    comp = sub.add_parser("compile", help="compile an operator to a program file")
    ops = comp.add_subparsers(title="operator")
    conv = ops.add_parser("conv2d", help="conv2d, NCHW int8 -> int8")
    dense = ops.add_parser("dense", help="dense (M, K) @ (K, N), int8 -> int8")
    for q, op in ((conv, "conv2d"), (dense, "dense")):
        add_layer_arguments(q, op)
        q.set_defaults(func=cmd_compile)
        q.add_argument("--schedule", help="TILE_OC,TILE_IC,TILE_OH,TILE_OW[,ORDER][,single]")
        q.add_argument(
            "--records",
            help="tuning records (tilecraft tune): use the best schedule they hold for this layer",
        )
        q.add_argument(
            "--params-as-inputs",
            action="store_true",
            help="weights/bias/multiplier as program inputs (default: random constants)",
        )
        q.add_argument("--seed", type=count, default=0, help="of the random parameters")
        q.add_argument(
            "--max-insns",
            type=positive,
            default=MAX_INSNS,
            metavar="N",
            help=f"refuse a layer whose program would exceed N instructions (default {MAX_INSNS})",
        )
        q.add_argument("-o", "--output", required=True, help="program file to write (.tcp)")
        q.add_argument("--json", help="write what was built (schedule, modeled cycles) here")

    from tilecraft.benchmarks import SUITES

    bench = sub.add_parser("bench", help="benchmark suites (src/tilecraft/benchmarks/README.md)")
    bench.add_argument("suite", choices=list(SUITES))
    bench.add_argument("--config", help="default: the suite's preset (resnet18: pynq-z1)")
    bench.add_argument("--json", help="write the result JSON here")
    bench.add_argument(
        "--plot",
        help="resnet18-layers: each layer against its roofline; rtl-speed: the --schedules "
        "sweep's error histogram per config",
    )
    bench.add_argument(
        "--no-check", action="store_true", help="resnet18-layers: cycle model only, no runs"
    )
    bench.add_argument(
        "--rtl", metavar="LAYERS", help="resnet18-layers: run these layers (C4,C9) on the RTL"
    )
    bench.add_argument(
        "--random",
        type=count,
        default=0,
        metavar="N",
        help="rtl-speed: also run N seeded random programs on the RTL and the cycle model",
    )
    bench.add_argument(
        "--schedules",
        type=count,
        default=0,
        metavar="N",
        help="rtl-speed: also run N random layers under random legal schedules on the RTL and "
        "the cycle model, on each of default, 1x8x8 and 2x16x16 (or on --config's config): "
        "the model's error, max, mean and the share that is exact",
    )
    bench.add_argument(
        "--against",
        metavar="JSON",
        help="rtl-speed: an earlier run's --json (the same config and --random N): say whether "
        "every run kept its RTL cycles and outputs (the check a timing cut needs)",
    )
    bench.add_argument(
        "--records",
        help="resnet18-layers: tuning records; each layer takes the best schedule they hold",
    )
    bench.add_argument("--seeds", type=positive, default=3, help="tuner: seeds per layer")
    bench.add_argument("--layers", metavar="C1,C2", help="tuner: only these layers")
    bench.add_argument(
        "--save-tables",
        metavar="FILE.npz",
        help="tuner: write the exhaustive tables (the package's data/tuner_tables.npz)",
    )
    bench.add_argument("--record", action="store_true", help="keep the result as the suite's "
                       "recorded figures (benchmarks/results/SUITE.json; tilecraft figures "
                       "then makes the README's tables from it)")  # fmt: skip
    bench.set_defaults(func=cmd_bench)

    figures = sub.add_parser(
        "figures",
        help="rewrite the benchmarks README's tables (src/tilecraft/benchmarks/README.md) from "
        "the recorded results",
    )
    figures.add_argument("--check", action="store_true", help="only say whether they agree "
                         "(exit 1 if not)")  # fmt: skip
    figures.set_defaults(func=cmd_figures)

    hw = sub.add_parser("hw", help="the accelerator's RTL").add_subparsers(title="hw")
    ver = hw.add_parser("verilog", help="write the top-level Verilog and its register map")
    ver.add_argument("--config", default="default")
    ver.add_argument("-o", "--output", dest="folder", required=True, help="folder to write into")
    ver.set_defaults(func=cmd_hw_verilog)
    res = hw.add_parser("resources", help="synthesize (yosys synth_xilinx) and count resources")
    res.add_argument("--config", default="default")
    res.add_argument("--part", default="xc7z020")
    res.add_argument("--json", help="write the figures as JSON here")
    res.add_argument(
        "--record",
        action="store_true",
        help="add them to boards/synthesis.json (what `tilecraft boards` judges fits by)",
    )
    res.set_defaults(func=cmd_hw_resources)
    stamp = hw.add_parser(
        "restamp",
        help="mark the recorded synthesis figures whose config's design is unchanged as "
        "measured on the tree's RTL (after a change to a part of the RTL they do not have)",
    )
    stamp.set_defaults(func=cmd_hw_restamp)
    from tilecraft.cli.boards import add_hw_parsers

    add_hw_parsers(hw)

    from tilecraft.cli import boards, dse, network, tune

    boards.add_parsers(sub)
    dse.add_parsers(sub, count)
    network.add_parsers(sub, count)
    tune.add_parsers(sub, count)
    return p


if __name__ == "__main__":
    sys.exit(main())
