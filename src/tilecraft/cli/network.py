"""The whole-network commands: `tilecraft models`, `tilecraft partition`."""

from __future__ import annotations

import argparse
import json

from tilecraft.cli.common import positive
from tilecraft.compiler.graph.arena import DEFAULT_BUDGET
from tilecraft.errors import DeviceError, ModelError


def input_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]]:
    """`--input-shape name=1,3,224,224` (repeatable) as {name: shape}."""
    shapes = {}
    for item in items or []:
        name, _, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not name or not shape or min(shape) < 1:
            raise ModelError(f"--input-shape {item!r}: expected NAME=D0,D1,... with dims >= 1")
        if name in shapes and shapes[name] != shape:
            raise ModelError(f"--input-shape gives {name!r} twice: {shapes[name]} and {shape}")
        shapes[name] = shape
    return shapes


def byte_count(text: str) -> int:
    """`128M`, `4096`, `1G`: bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale != 1 else text
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError(f"expected a byte count like 128M or 4096, got {text!r}")
    return int(digits) * scale


def cmd_models_write(args) -> int:
    from tilecraft.models.zoo import write_model

    path = write_model(args.name, args.output, seed=args.seed)
    print(f"{args.name} written to {path}")
    return 0


def cmd_partition(args) -> int:
    from tilecraft.compiler.frontend import import_model
    from tilecraft.compiler.partition import partition, report, to_json
    from tilecraft.files import write_atomic

    graph = import_model(args.model, input_shapes(args.input_shape))
    cfg = None
    if args.config:
        from tilecraft.boards import resolve_config

        cfg = resolve_config(args.config)
    placements = partition(graph, cfg)
    print(report(placements))
    if args.json:
        write_atomic(args.json, to_json(placements).encode())
        print(f"JSON written to {args.json}")
    return 0


def cmd_compile_model(args) -> int:
    from tilecraft.boards import resolve_config
    from tilecraft.cli.common import modeled_cycles
    from tilecraft.compiler.frontend import import_model
    from tilecraft.compiler.graph.network import compile_network
    from tilecraft.compiler.quant.calibrate import (
        load_calibration,
        random_calibration,
        samples,
    )
    from tilecraft.compiler.quant.report import error_report, format_report

    cfg = resolve_config(args.config)
    if args.host_target:  # before the compile: a typo must not cost it (nor leave a model)
        from tilecraft.compiler.llvm.targets import target

        target(args.host_target)
    graph = import_model(args.model, input_shapes(args.input_shape))
    if args.calib is not None and args.calib_random is not None:
        raise ModelError("give --calib or --calib-random, not both")
    if args.calib is not None:
        data = load_calibration(graph, args.calib)
    elif args.calib_random is not None:
        data = random_calibration(graph, args.calib_random, seed=args.seed)
    elif graph.scales:
        data = None  # a quantized (QDQ) model: its own scales
    else:
        raise ModelError(
            "give calibration data (--calib FILE.npz|.npy) or --calib-random N "
            "(a model quantized to QDQ brings its own scales)"
        )
    exact = {"auto": None, "exact": True, "fast": False, "onnxruntime": "onnxruntime"}[args.requant]
    records = None
    if args.records:
        from tilecraft.compiler.tune.records import applied_records

        records = applied_records(args.records, cfg.digest)
    result = compile_network(
        graph,
        cfg,
        data,
        observer=args.observer,
        budget=args.dram_budget,
        exact_requant=exact,
        records=records,
        jobs=args.jobs,
    )
    model = result.model
    steps = len(model.steps)
    print(
        f"{model.name}: {len(model.programs)} accelerator program(s), "
        f"{steps - len(model.programs)} host step(s), on {cfg.tag}"
    )
    for name, why in result.moved.items():  # what `tilecraft partition` could not know
        print(f"  {name}: on the host, not the accelerator ({why})")
    modeled = modeled_cycles(list(model.programs))
    if model.programs:
        print(modeled.format())
    print("seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in result.seconds.items()))
    if args.report and data is not None:
        batch = [x for _, x in zip(range(4), samples(graph, data))]
        print(
            f"per-layer error against the float model ({len(batch)} calibration samples), "
            "worst first:"
        )
        print(format_report(error_report(graph, model, batch), limit=args.report))
    model.save(args.output)
    print(f"compiled model written to {args.output}")
    if args.host_target:
        _write_kernels(model, args.host_target, args.output)
    if args.json:
        from tilecraft.files import write_atomic

        summary = {
            "model": model.name,
            "config": cfg.tag,
            "programs": len(model.programs),
            "host_steps": steps - len(model.programs),
            "output": args.output,
            **modeled.to_dict(),
            "seconds": result.seconds,
        }
        write_atomic(args.json, (json.dumps(summary, indent=1) + "\n").encode())
        print(f"JSON written to {args.json}")
    return 0


def _write_kernels(model, name: str, output: str) -> None:
    """The model's host kernels for a board, beside the compiled model: NAME.kernels.so/.json."""
    from pathlib import Path

    from tilecraft.compiler.llvm.library import build_model_library
    from tilecraft.compiler.llvm.targets import target

    out = Path(output)
    lib = build_model_library(model, target(name), out.parent, out.stem + ".kernels")
    print(
        f"{lib.kernels} host kernels for {lib.target.triple} ({lib.target.cpu}) written to "
        f"{lib.shared_object} + {lib.manifest.name} (built in "
        f"{lib.compile_seconds + lib.link_seconds:.1f} s)"
    )


def cmd_run_model(args) -> int:

    from tilecraft.boards import resolve_config
    from tilecraft.runtime import get_device
    from tilecraft.runtime.device import device_names
    from tilecraft.runtime.executor import run_model
    from tilecraft.runtime.model import CompiledModel

    if args.model.endswith(".onnx"):
        return _run_float(args)
    if args.input_shape:
        raise ModelError(
            f"--input-shape fixes an ONNX model's dynamic dimensions; "
            f"{args.model!r} was compiled with its shapes fixed (give "
            f"--input-shape to tilecraft compile)"
        )
    config = resolve_config(args.config) if args.config else None
    model = CompiledModel.load(args.model, config)
    inputs = _inputs(args.input, model.inputs[0])
    names = [*device_names(), "reference"]
    if args.device not in names:
        raise DeviceError(f"unknown device {args.device!r}; available: {', '.join(names)}")
    if args.bitfile and args.device != "pynq":
        raise DeviceError(f"--bitfile is the pynq device's overlay, not the {args.device} device's")
    host, options = None, {}
    if args.device == "pynq":
        if not args.bitfile:
            raise DeviceError("--device pynq needs --bitfile (the overlay's .bit, its .hwh beside)")
        options = {"bitfile": args.bitfile}
    if args.kernels:  # a prebuilt library: the host steps, and the cpu device, run from it
        from tilecraft.runtime.cpu import LibraryKernels, load_library

        host = LibraryKernels(load_library(args.kernels))
        options = {"library": args.kernels} if args.device == "cpu" else options
    elif args.device == "cpu":
        from tilecraft.compiler.llvm.host import LlvmKernels

        host = LlvmKernels()
    device = None if args.device == "reference" else get_device(args.device, **options)
    run = run_model(model, inputs, device, host=host)
    cycles = run.accelerator_cycles
    if args.device == "cpu":
        print(
            f"cpu: {len(run.steps)} steps on the host's generated kernels in "
            f"{run.host_seconds * 1e3:.1f} ms here"
        )
    elif device is not None:
        ms = cycles / (model.config.clock_mhz * 1e3)
        print(
            f"accelerator: {cycles:,} cycles = {ms:.3f} ms at {model.config.clock_mhz:g} MHz "
            f"({sum(s.place == 'accelerator' for s in run.steps)} programs); "
            f"host steps {run.host_seconds * 1e3:.1f} ms here"
        )
    _print_top(run.outputs, args.top_k)
    _save_outputs(run.outputs, args.output)
    return 0


def _inputs(path: str, first: str) -> dict:
    """`--input`: a .npy for the first input, or a .npz by input name."""
    import numpy as np

    from tilecraft.runtime.tensors import load_tensors

    if not path.endswith(".npy"):
        return load_tensors(path)
    try:
        return {first: np.load(path, allow_pickle=False)}
    except (OSError, ValueError) as e:
        raise ModelError(f"{path!r} is not a readable .npy: {e}") from None


def _run_float(args) -> int:
    """`tilecraft run MODEL.onnx --device cpu`: the float network on the host's kernels."""
    import time

    from tilecraft.compiler.frontend import import_model
    from tilecraft.compiler.llvm.float_graph import FloatGraph

    if args.device != "cpu":
        raise ModelError(
            f"an ONNX model runs in float on --device cpu, not "
            f"{args.device!r}; compile it (tilecraft compile MODEL.onnx) for the "
            f"accelerator"
        )
    graph = import_model(args.model, input_shapes(args.input_shape))
    inputs = _inputs(args.input, graph.inputs[0])
    net = FloatGraph(graph)
    net.run(inputs)  # the first run pays numpy's start-up costs
    start = time.perf_counter()
    outputs = net.run(inputs)
    ms = (time.perf_counter() - start) * 1e3
    on_numpy = f"; in numpy: {', '.join(net.numpy_nodes)}" if net.numpy_nodes else ""
    kind = "float"
    if net.fake_quantized:  # a quantized model: its Q/DQ pairs round, as onnxruntime's do
        kind = f"fake-quantized ({net.fake_quantized} tensors rounded to the model's int8 grid)"
    print(
        f"{kind} {graph.name}: {len(graph.nodes)} nodes on the host's kernels in {ms:.1f} ms "
        f"here, one thread{on_numpy}"
    )
    _print_top(outputs, args.top_k)
    _save_outputs(outputs, args.output)
    return 0


def _print_top(outputs: dict, top_k: int) -> None:
    import numpy as np

    for name, y in outputs.items():
        flat = y.reshape(y.shape[0], -1)
        for row, v in enumerate(flat):
            top = np.argsort(-v)[:top_k]
            e = np.exp(v - v.max())
            p = e / e.sum()
            print(
                f"{name}[{row}] top-{len(top)}: " + ", ".join(f"{int(k)} ({p[k]:.3f})" for k in top)
            )


def _save_outputs(outputs: dict, path: str | None) -> None:
    if path:
        import io

        import numpy as np

        from tilecraft.files import write_atomic

        buf = io.BytesIO()
        np.savez(buf, **outputs)
        write_atomic(path, buf.getvalue())
        print(f"outputs written to {path}")


def add_parsers(sub, count) -> None:
    from tilecraft.models.zoo import MODELS

    models = sub.add_parser("models", help="networks built in the repo").add_subparsers()
    write = models.add_parser("write", help="write a zoo network as ONNX (seeded weights)")
    write.add_argument("name", choices=list(MODELS))
    write.add_argument("-o", "--output", required=True, help="ONNX file to write")
    write.add_argument("--seed", type=count, default=0)
    write.set_defaults(func=cmd_models_write)

    part = sub.add_parser("partition", help="where each node of an ONNX model runs, and why")
    part.add_argument("model", help="an ONNX file (opset >= 13)")
    shape_option(part)
    part.add_argument(
        "--config",
        help="also place what the config decides (compile's "
        "placement on that config; default: what holds on every config)",
    )
    part.add_argument("--json", help="write the placements as JSON here")
    part.set_defaults(func=cmd_partition)

    comp = sub.add_parser(
        "compile-model",
        help="(tilecraft compile MODEL.onnx ...) an ONNX network to a compiled int8 model",
    )
    comp.add_argument("model", help="an ONNX file (opset >= 13)")
    comp.add_argument("--config", default="default")
    comp.add_argument("--calib", help="calibration inputs: .npz by input name, or .npy")
    comp.add_argument("--calib-random", type=count, metavar="N", help="N random inputs (smoke)")
    comp.add_argument("--observer", choices=["minmax", "percentile", "entropy"], default="minmax")
    comp.add_argument("--seed", type=count, default=0, help="of --calib-random")
    comp.add_argument(
        "--report",
        type=count,
        default=10,
        metavar="N",
        help="print the N worst layers' error against float (0: none)",
    )
    comp.add_argument(
        "--dram-budget",
        type=byte_count,
        default=DEFAULT_BUDGET,
        metavar="BYTES",
        help="refuse a network whose DRAM exceeds this (default 128M, PYNQ's CMA; "
        "suffixes K, M, G)",
    )
    comp.add_argument(
        "--requant",
        choices=["auto", "exact", "fast", "onnxruntime"],
        default="auto",
        help="exact: accumulator bounds and a two-stage multiply, reproducing a "
        "quantized model's float32 rounding (4 more ALU passes per tile; on a config with a "
        "requantization unit, onnxruntime's own rounding for convs and the average pool); "
        "fast: one multiplier; onnxruntime: every rounding onnxruntime's x86 kernels make "
        "(a config with requant_lanes; the Adds on the host); auto: exact for a model with "
        "its own scales (QDQ)",
    )
    comp.add_argument(
        "--records",
        help="tuning records (tilecraft tune): each layer they cover takes the best schedule found",
    )
    comp.add_argument(
        "--host-target",
        metavar="TARGET",
        help="also build the model's host "
        "kernels for a board (pynq-z1, ultra96-v2, ... or armv7, aarch64, x86_64) "
        "beside the output: NAME.kernels.so + NAME.kernels.json",
    )
    shape_option(comp)
    comp.add_argument(
        "--jobs",
        type=count,
        metavar="N",
        help="worker processes the layers are compiled on (default: one per core)",
    )
    comp.add_argument("-o", "--output", required=True, help="compiled model to write (.tcm)")
    comp.add_argument("--json", help="write what was built (programs, modeled cycles) here")
    comp.set_defaults(func=cmd_compile_model)

    run = sub.add_parser("run", help="run a compiled model on an input")
    run.add_argument(
        "model",
        help="a compiled model (.tcm), or an ONNX model (.onnx: float, "
        "or fake-quantized as its Q/DQ nodes say, on --device cpu)",
    )
    run.add_argument("--input", required=True, help="float input: .npy, or .npz by input name")
    run.add_argument(
        "--device",
        default="sim",
        help="sim, rtl, cpu (every step on the host's generated kernels), gpu, pynq (on a "
        "board, with --bitfile), or reference (no device)",
    )
    run.add_argument("--bitfile", help="pynq: the overlay's .bit (its .hwh beside it)")
    run.add_argument(
        "--kernels",
        metavar="FILE.json",
        help="a prebuilt kernel library (tilecraft "
        "compile ... --host-target): host steps, and the cpu device, run from it",
    )
    run.add_argument("--config", help="refuse a model compiled for another config")
    run.add_argument("--top-k", type=positive, default=5)
    shape_option(run)
    run.add_argument("-o", "--output", help="write the float outputs here (.npz)")
    run.set_defaults(func=cmd_run_model)


def shape_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input-shape",
        action="append",
        metavar="NAME=D0,D1,...",
        help="fix a dynamic input's shape (repeat per input)",
    )
