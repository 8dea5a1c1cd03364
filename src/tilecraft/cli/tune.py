"""`tilecraft tune conv2d|dense ...`: tune one layer's schedule, with records."""

from __future__ import annotations

from tilecraft.cli.common import add_layer_arguments, layer_of, positive, seconds
from tilecraft.errors import TilecraftError


def layer_task(args):
    """The `Task` of a `conv2d`/`dense` command's layer arguments."""
    from tilecraft.compiler.tune.task import Task

    return Task(*layer_of(args))


def cmd_tune_layer(args) -> int:
    """`tilecraft tune conv2d|dense`: one layer."""
    return _tune_one(args, layer_task(args))


def cmd_tune_resnet18(args) -> int:
    """`tilecraft tune resnet18-layers`: C1-C11 in turn."""
    return _tune_all(args, _resnet18_tasks(args))


def cmd_tune_model(args) -> int:
    """`tilecraft tune MODEL.onnx`: every distinct conv and dense layer of a network."""
    return _tune_all(args, _model_tasks(args))


def _resnet18_tasks(args) -> list:
    """ResNet-18's conv layers C1-C11 with the resnet18-layers epilogue."""
    from tilecraft.benchmarks.resnet18_layers import epilogue_for
    from tilecraft.benchmarks.workloads import layer_op, resnet18_layers
    from tilecraft.boards import resolve_config
    from tilecraft.compiler.tune.task import Task

    cfg = resolve_config(args.config)
    return [(x["name"], Task(cfg, layer_op(x), epilogue_for(cfg))) for x in resnet18_layers()]


def _model_tasks(args) -> list:
    """The distinct conv and dense layers of an ONNX model, quantized as `tilecraft compile`
    would (same calibration options), so their records match what it compiles."""
    from tilecraft.boards import resolve_config
    from tilecraft.cli.network import input_shapes
    from tilecraft.compiler.frontend import import_model
    from tilecraft.compiler.quant.calibrate import (
        calibrate,
        load_calibration,
        model_ranges,
        random_calibration,
    )
    from tilecraft.compiler.quant.quantize import quantize
    from tilecraft.compiler.tune.task import network_tasks

    cfg = resolve_config(args.config)
    if args.calib is not None and args.calib_random is not None:  # as compile refuses it
        raise TilecraftError("give --calib or --calib-random, not both")
    graph = import_model(args.model, input_shapes(args.input_shape))
    if args.calib is not None:
        ranges = calibrate(graph, load_calibration(graph, args.calib), args.observer)
    elif args.calib_random is not None:
        ranges = calibrate(
            graph, random_calibration(graph, args.calib_random, seed=args.seed), args.observer
        )
    elif graph.scales:
        ranges = model_ranges(graph)
    else:
        raise TilecraftError(
            "give calibration data (--calib FILE.npz|.npy) or --calib-random "
            "N, as for tilecraft compile"
        )
    return network_tasks(cfg, quantize(graph, ranges, cfg=cfg))


def _tune_all(args, tasks: list) -> int:
    """Each task in turn, into one records file."""
    if args.trials < 1:  # once, before the first layer's name
        raise TilecraftError(f"--trials must be at least 1, not {args.trials}")
    failed = 0
    for name, task in tasks:
        print(f"{name}: ", end="")
        failed += _tune_one(args, task, plot=False)
    return 1 if failed else 0


def _tune_one(args, task, plot: bool = True) -> int:
    from tilecraft.compiler.tune.measure import measurer

    if args.trials < 1:
        raise TilecraftError(f"--trials must be at least 1, not {args.trials}")
    if args.bitfile and args.measure != "pynq":
        raise TilecraftError(f"--bitfile is for --measure pynq, not --measure {args.measure}")
    if args.fpga and not (args.workers or args.scheduler):
        raise TilecraftError("--fpga asks a Dask cluster for FPGAs: give --workers or --scheduler")
    options = {}
    if args.measure == "pynq":
        options = {"bitfile": args.bitfile, "timeout_s": args.timeout or 10.0}
    if args.workers or args.scheduler:
        from tilecraft.compiler.tune.distributed import DaskMeasurer

        meter = DaskMeasurer(
            args.measure,
            workers=args.workers or 2,
            scheduler=args.scheduler,
            fpga=args.fpga,
            timeout_s=args.timeout,
            options=options,
        )
        print(
            f"measuring on {meter.workers} Dask worker(s)"
            + (f" at {args.scheduler}" if args.scheduler else " (a local cluster)")
        )
    else:
        meter = measurer(args.measure, **options)
    try:
        return _run(args, task, meter, plot)
    finally:
        if hasattr(meter, "close"):
            meter.close()


def _run(args, task, meter, plot: bool) -> int:
    from tilecraft.compiler.tune.records import Records, tool_version
    from tilecraft.compiler.tune.tuner import tune
    from tilecraft.progress import enabled

    records = (
        Records(args.records, task.config.digest, tool_version(meter.name))
        if args.records
        else None
    )
    print(task.describe())
    if records is not None:
        ignored = records.other_config + records.other_tool
        print(
            f"records {args.records}: {len(records.of(task.key))} of this layer"
            + (f"; {ignored} of other configs or tools ignored" if ignored else "")
        )
    show = _progress(args.trials) if enabled() else (lambda r, s: None)
    result = tune(
        task,
        meter,
        args.trials,
        records,
        strategy=args.strategy,
        seed=args.seed,
        batch=args.batch,
        progress=show,
    )
    print(
        f"\nbest {result.best_cycles:,} cycles: {result.best.describe()}"
        if result.best
        else "\nno schedule measured successfully"
    )
    print(
        f"{result.measured} measured ({result.failed} failed), {result.resumed} from the "
        f"records, in {result.seconds:.1f} s ({args.strategy})"
    )
    if args.plot and plot:
        random = tune(
            task, meter, args.trials, None, strategy="random", seed=args.seed, batch=args.batch
        )
        _plot(args.plot, task, result, random)
        print(f"plot written to {args.plot}")
    return 0 if result.best else 1


def _progress(trials: int):
    def show(result, seconds: float) -> None:
        best = f"{result.best_cycles:,}" if result.best_cycles else "-"
        rate = result.measured / seconds if seconds else 0.0
        print(
            f"\r  {result.measured}/{trials} trials, best {best} cycles, {rate:.1f} trials/s",
            end="",
            flush=True,
        )

    return show


def _plot(path: str, task, tuned, random) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TilecraftError("--plot needs matplotlib: pip install 'tilecraft[plot]'") from None
    from tilecraft.files import check_writable

    check_writable(path, "plot")
    fig, ax = plt.subplots(figsize=(6, 4))
    for r, label in ((tuned, "XGBoost tuner"), (random, "random search")):
        ys = [c for c in r.curve]
        ax.plot(range(1, len(ys) + 1), ys, label=label)
    ax.set_xlabel("trials")
    ax.set_ylabel("best cycles so far (cycle model)")
    ax.set_title(task.op.describe(), fontsize=8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def add_parsers(sub, count) -> None:
    from tilecraft.cli.network import shape_option

    tune = sub.add_parser("tune", help="tune a layer's schedule (XGBoost cost model, records)")
    ops = tune.add_subparsers(title="operator")
    conv = ops.add_parser("conv2d", help="a conv2d layer")
    dense = ops.add_parser("dense", help="a dense layer")
    for q, op in ((conv, "conv2d"), (dense, "dense")):
        add_layer_arguments(q, op)
        q.set_defaults(func=cmd_tune_layer)
    every = ops.add_parser(
        "resnet18-layers",
        help="ResNet-18's conv layers C1-C11 in turn "
        "(the resnet18-layers epilogue), into one records file",
    )
    every.set_defaults(func=cmd_tune_resnet18, op="resnet18-layers")
    model = ops.add_parser(
        "model",
        help="(tilecraft tune MODEL.onnx ...) every distinct conv "
        "and dense layer of a network, quantized as compile does",
    )
    model.add_argument("model", help="an ONNX file (opset >= 13)")
    model.add_argument("--calib", help="calibration inputs: .npz by input name, or .npy")
    model.add_argument("--calib-random", type=count, metavar="N", help="N random inputs")
    model.add_argument("--observer", choices=["minmax", "percentile", "entropy"], default="minmax")
    shape_option(model)
    model.set_defaults(func=cmd_tune_model, op="model")
    for q in (every, model):
        q.add_argument("--config", default="default", help="config name or .toml/.json")
    for q in (conv, dense, every, model):
        q.add_argument("--trials", type=count, default=64, help="schedules to measure")
        q.add_argument("--records", help="append-only JSONL: resumes from it, appends to it")
        q.add_argument(
            "--measure",
            default="sim",
            help="sim (the cycle model), rtl, or pynq "
            "(the board this runs on, or each board's Dask worker)",
        )
        q.add_argument(
            "--bitfile",
            help="pynq: the overlay's .bit (a fleet's workers: their TILECRAFT_BITFILE)",
        )
        q.add_argument(
            "--timeout",
            type=seconds,
            metavar="S",
            help="a measurement not back in "
            "S seconds is recorded as timed out (Dask; pynq: the device's limit)",
        )
        q.add_argument("--strategy", choices=["model", "random"], default="model")
        q.add_argument("--batch", type=positive, default=8, help="schedules per model update")
        q.add_argument("--seed", type=count, default=0)
        q.add_argument("--plot", help="PNG: best-so-far against random search")
        q.add_argument(
            "--workers",
            type=count,
            default=0,
            metavar="N",
            help="measure on a local Dask cluster of N worker processes",
        )
        q.add_argument(
            "--scheduler",
            metavar="ADDRESS",
            help="measure on the Dask cluster at ADDRESS (tcp://host:8786)",
        )
        q.add_argument(
            "--fpga",
            action="store_true",
            help="each measurement takes one FPGA "
            "resource (a board's worker: dask worker ... --resources FPGA=1)",
        )
