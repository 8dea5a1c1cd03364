"""The `tilecraft` command: thin subcommands over public functions."""

from __future__ import annotations

import argparse
import json
import os
import sys
import zipfile
from pathlib import Path

import numpy as np

from tilecraft.errors import TilecraftError


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return args.func(args) or 0
    except TilecraftError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tilecraft", description=__doc__)
    sub = p.add_subparsers(title="commands")

    cfg = sub.add_parser("config", help="hardware configs").add_subparsers(title="config")
    show = cfg.add_parser("show", help="print a config, its derived sizes and ISA layout")
    show.add_argument("preset", nargs="?", default="default", help="preset name or .toml/.json")
    show.add_argument("--isa", action="store_true", help="also print the instruction layouts")
    show.add_argument("--list", action="store_true", help="list the preset names")
    show.set_defaults(func=cmd_config_show)

    dis = sub.add_parser("disasm", help="disassemble a program file")
    dis.add_argument("program")
    dis.add_argument("--uops", action="store_true", help="also list the micro-ops")
    dis.set_defaults(func=cmd_disasm)

    sim = sub.add_parser("sim", help="run a program on the behavioral simulator")
    sim.add_argument("program")
    sim.add_argument("--inputs", help=".npz of named inputs (default: random, --seed)")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--trace", help="write a Perfetto/Chrome trace JSON here")
    sim.add_argument("--json", help="write the report as JSON here")
    sim.add_argument("--check", action="store_true", help="compare outputs with the numpy oracle")
    sim.set_defaults(func=cmd_sim)

    ex = sub.add_parser("example", help="the double-buffered blocked GEMM (the main job)")
    ex.add_argument("--config", default="default", help="preset name or .toml/.json")
    ex.add_argument("--M", type=int, default=64)
    ex.add_argument("--K", type=int, default=256)
    ex.add_argument("--N", type=int, default=128)
    ex.add_argument("--seed", type=int, default=0)
    ex.add_argument("-o", "--output", help="save the overlapped program here (.tcp)")
    ex.add_argument("--trace", help="write the overlapped run's trace here")
    ex.add_argument("--json", help="write the figures as JSON here")
    ex.set_defaults(func=cmd_example)

    comp = sub.add_parser("compile", help="compile an operator to a program file")
    ops = comp.add_subparsers(title="operator")
    conv = ops.add_parser("conv2d", help="conv2d, NCHW int8 -> int8")
    for name, default in (
        ("N", 1),
        ("IC", 64),
        ("H", 56),
        ("W", 56),
        ("OC", 64),
        ("K", 3),
        ("S", 1),
        ("P", 1),
    ):
        conv.add_argument(f"--{name}", type=int, default=default)
    conv.set_defaults(func=cmd_compile, op="conv2d")
    dense = ops.add_parser("dense", help="dense (M, K) @ (K, N), int8 -> int8")
    for name, default in (("M", 64), ("K", 256), ("N", 128)):
        dense.add_argument(f"--{name}", type=int, default=default)
    dense.set_defaults(func=cmd_compile, op="dense")
    for q in (conv, dense):
        q.add_argument("--config", default="default", help="preset name or .toml/.json")
        q.add_argument("--bias", action="store_true", help="add a per-channel int32 bias")
        q.add_argument("--multiplier", choices=["none", "tensor", "channel"], default="none")
        q.add_argument("--shift", type=int, default=8, help="rounding right shift (0..31)")
        q.add_argument("--relu", action="store_true")
        q.add_argument("--residual", action="store_true", help="add an int8 residual input")
        q.add_argument("--schedule", help="TILE_OC,TILE_IC,TILE_OH,TILE_OW[,ORDER][,single]")
        q.add_argument(
            "--params-as-inputs",
            action="store_true",
            help="weights/bias/multiplier as program inputs (default: random "
            "constants from --seed)",
        )
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("-o", "--output", required=True, help="program file to write (.tcp)")

    bench = sub.add_parser("bench", help="benchmark suites (BENCHMARKS.md)")
    bench.add_argument("suite", choices=["sim-speed", "resnet18-layers", "rtl-speed", "resources"])
    bench.add_argument("--config", default="default")
    bench.add_argument("--json", help="write the result JSON here")
    bench.add_argument(
        "--no-check",
        action="store_true",
        help="resnet18-layers: cycle model only, skip the bit-exact runs",
    )
    bench.add_argument(
        "--rtl", metavar="LAYERS", help="resnet18-layers: also run these layers (C4,C9) on the RTL"
    )
    bench.add_argument(
        "--random",
        type=int,
        default=0,
        metavar="N",
        help="rtl-speed: also run N seeded random programs on the RTL and the cycle model",
    )
    bench.set_defaults(func=cmd_bench)

    hw = sub.add_parser("hw", help="the accelerator's RTL").add_subparsers(title="hw")
    ver = hw.add_parser("verilog", help="write the top-level Verilog")
    ver.add_argument("--config", default="default")
    ver.add_argument("-o", "--output", required=True, help="folder to write into")
    ver.set_defaults(func=cmd_hw_verilog)
    res = hw.add_parser("resources", help="synthesize (yosys synth_xilinx) and count resources")
    res.add_argument("--config", default="default")
    res.add_argument("--part", default="xc7z020")
    res.add_argument("--json", help="write the figures as JSON here")
    res.set_defaults(func=cmd_hw_resources)
    return p


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
    print(
        f"# {program.name}: config {program.config.tag}, {len(program.insns)} instructions, "
        f"{len(program.uops)} micro-ops, {program.dram_size} DRAM bytes"
    )
    for b in program.buffers:
        print(f"# {b.role:8s} {b.name}: {np.dtype(b.dtype)}{list(b.shape)} at byte {b.offset}")
    print("\n".join(disassemble(program.table())))
    if args.uops:
        print("\n".join(format_uops(program.uop_table())))
    return 0


def cmd_sim(args) -> int:
    from tilecraft.runtime import Program, get_device
    from tilecraft.runtime.layout import pack_inputs, unpack_outputs
    from tilecraft.sim.trace import write_trace

    program = Program.load(args.program)
    inputs = _inputs(program, args.inputs, args.seed)
    result = get_device("sim").run(program, pack_inputs(program, inputs), trace=bool(args.trace))
    print(result.report.format())
    if args.trace:
        write_trace(args.trace, result.report.trace)
        print(f"trace written to {args.trace}")
    if args.json:
        _write_json(args.json, result.report.to_dict())
    if args.check:
        from tilecraft.compiler.oracle import check_outputs

        ok, message = check_outputs(program, inputs, unpack_outputs(program, result.outputs))
        print(message)
        return 0 if ok else 1
    return 0


def cmd_example(args) -> int:
    from tilecraft.boards import resolve_config
    from tilecraft.compiler.blocked_gemm import run_demo
    from tilecraft.sim.trace import write_trace

    cfg = resolve_config(args.config)
    r = run_demo(cfg, args.M, args.K, args.N, seed=args.seed, trace=bool(args.trace))
    print(
        f"blocked GEMM {r['M']}x{r['K']} . {r['K']}x{r['N']} int8 on {r['config']}, "
        f"tiles (blocks) m,n,k = {r['tiles']}"
    )
    for label in ("overlap", "serial"):
        x = r[label]
        status = "bit-exact vs numpy" if x["bit_exact"] else f"{x['mismatches']} MISMATCHES"
        print(
            f"  {label:8s} {x['cycles']:9,} cycles  GEMM utilization {x['gemm_utilization']:.3f}"
            f"  {x['instructions']} insns  {status}"
        )
    print(f"  overlap gained {r['speedup']:.2f}x over serialized tokens")
    if args.output:
        r["programs"]["overlap"].save(args.output)
        print(f"program written to {args.output}")
    if args.trace:
        write_trace(args.trace, r["overlap"]["report"].trace)
        print(f"trace written to {args.trace}")
    if args.json:
        slim = {k: v for k, v in r.items() if k != "programs"}
        for label in ("overlap", "serial"):
            slim[label] = {**slim[label], "report": slim[label]["report"].to_dict()}
        _write_json(args.json, slim)
    return 0 if r["overlap"]["bit_exact"] and r["serial"]["bit_exact"] else 1


def cmd_compile(args) -> int:
    from tilecraft.boards import resolve_config
    from tilecraft.compiler.conv2d import conv2d, dense
    from tilecraft.compiler.ops import Conv2d, Epilogue

    cfg = resolve_config(args.config)
    ep = Epilogue(
        bias=args.bias,
        multiplier=args.multiplier,
        shift=args.shift,
        residual=args.residual,
        relu=args.relu,
    )
    rng = np.random.default_rng(args.seed)
    if args.op == "conv2d":
        op = Conv2d(
            args.N, args.IC, args.H, args.W, args.OC, kernel=args.K, stride=args.S, pad=args.P
        )
        oc, wshape = op.oc, op.weight_shape
    else:
        op, oc, wshape = None, args.N, (args.K, args.N)
    params = {}
    if not args.params_as_inputs:
        params["weight"] = rng.integers(-128, 128, wshape, dtype=np.int8)
        if ep.bias:
            params["bias"] = rng.integers(-(1 << 15), 1 << 15, oc, dtype=np.int32)
        if ep.multiplier == "channel":
            params["multiplier"] = rng.integers(1, 1 << 10, oc, dtype=np.int32)
    if ep.multiplier == "tensor":
        params["multiplier"] = int(rng.integers(1, 1 << 10))
    schedule = _schedule(args.schedule)
    if op is not None:
        program = conv2d(cfg, op, ep, schedule=schedule, name="conv2d", **params)
        what = op.describe()
    else:
        program = dense(cfg, args.M, args.K, args.N, ep, schedule=schedule, **params)
        what = f"dense M={args.M} K={args.K} N={args.N}"
    meta = program.meta
    print(f"{what}, epilogue {ep.describe()}, on {cfg.tag}")
    if meta["folded"]:
        print("  kernel taps folded into the reduction (few input channels)")
    print(f"  schedule: {meta['schedule']}")
    for note in meta.get("schedule_notes", []):
        print(f"    {note}")
    for c in meta.get("schedule_candidates", []):
        print(f"    measured {c['schedule']}: {c['cycles']:,} cycles (estimate {c['estimate']:,})")
    print(
        f"  {len(program.insns)} instructions, {len(program.uops)} micro-ops, "
        f"{program.dram_size:,} DRAM bytes; verified (tokens, deadlock, hazards, ranges)"
    )
    program.save(args.output)
    print(f"program written to {args.output}")
    return 0


def cmd_hw_verilog(args) -> int:
    from tilecraft.boards import resolve_config
    from tilecraft.hw import regs
    from tilecraft.hw.rtl.top import verilog

    cfg = resolve_config(args.config)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tilecraft_top.v").write_text(verilog(cfg))
    regmap = {
        r.name: {"offset": r.offset, "access": r.access, "doc": r.doc} for r in regs.REGISTERS
    }
    (out / "registers.json").write_text(json.dumps(regmap, indent=2) + "\n")
    (out / "config.toml").write_text(cfg.to_toml())
    print(f"wrote tilecraft_top.v, registers.json and config.toml ({cfg.tag}) to {out}")
    return 0


def cmd_hw_resources(args) -> int:
    from tilecraft.boards import resolve_config
    from tilecraft.boards.flows.resources import synthesize

    r = synthesize(resolve_config(args.config), args.part)
    print(r.format())
    if args.json:
        _write_json(args.json, r.to_dict())
    return 0


def _schedule(text: str | None):
    from tilecraft.compiler.schedule import ORDERS, ConvSchedule
    from tilecraft.errors import ScheduleError

    if not text:
        return None
    parts = [p.strip() for p in text.split(",")]
    try:
        tiles = [int(p) for p in parts[:4]]
    except ValueError:
        tiles = []
    extra = parts[4:]
    order = next((p for p in extra if p in ORDERS), "oc_outer")
    unknown = [p for p in extra if p not in ORDERS and p != "single"]
    if len(tiles) != 4 or unknown:
        raise ScheduleError(
            f"--schedule {text!r}: expected TILE_OC,TILE_IC,TILE_OH,TILE_OW[,ORDER][,single] "
            f"with ORDER one of {ORDERS}"
        )
    return ConvSchedule(*tiles, order=order, double_buffer="single" not in extra)


def cmd_bench(args) -> int:
    from tilecraft.boards import resolve_config

    if args.suite == "rtl-speed":
        from tilecraft.benchmarks import rtl_speed as suite

        result = suite.run(resolve_config(args.config), random=args.random)
    elif args.suite == "resources":
        from tilecraft.boards.flows.resources import synthesize

        result = {"suite": "resources", "configs": []}
        for name in ("default", "1x8x8", "2x16x16"):
            r = synthesize(resolve_config(name))
            print(r.format())
            result["configs"].append(r.to_dict())
        if args.json:
            _write_json(args.json, result)
        return 0
    elif args.suite == "resnet18-layers":
        from tilecraft.benchmarks import resnet18_layers as suite

        if args.rtl:
            result = suite.run_on_rtl(resolve_config(args.config), args.rtl.split(","))
            print(suite.format_rtl_table(result))
            if args.json:
                _write_json(args.json, result)
            return 0 if all(r["bit_exact"] for r in result["layers"]) else 1
        result = suite.run(resolve_config(args.config), check=not args.no_check)
    else:
        from tilecraft.benchmarks import sim_speed as suite

        result = suite.run(resolve_config(args.config))
    print(suite.format_table(result))
    if args.json:
        _write_json(args.json, result)
    return 0


def _inputs(program, path: str | None, seed: int) -> dict[str, np.ndarray]:
    from tilecraft.errors import DeviceError

    if path:
        try:
            npz = np.load(path, allow_pickle=False)
            if not isinstance(npz, np.lib.npyio.NpzFile):
                raise DeviceError(f"cannot read inputs from {path!r}: not an .npz of named arrays")
            with npz:
                return {k: npz[k] for k in npz.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise DeviceError(f"cannot read inputs from {path!r}: {exc}") from None
    from tilecraft.runtime.layout import random_inputs

    return random_inputs(program, np.random.default_rng(seed))


def _write_json(path: str, data: dict) -> None:
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n")
    os.replace(tmp, target)
    print(f"JSON written to {path}")


def _jsonable(obj):
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(obj)
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


if __name__ == "__main__":
    sys.exit(main())
