"""The whole-network commands: `tilecraft models`, `tilecraft partition`."""

from __future__ import annotations

import argparse

from tilecraft.errors import ModelError


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
        shapes[name] = shape
    return shapes


def cmd_models_write(args) -> int:
    from tilecraft.models.zoo import write_model

    path = write_model(args.name, args.output, seed=args.seed)
    print(f"{args.name} written to {path}")
    return 0


def cmd_partition(args) -> int:
    from tilecraft.compiler.frontend import import_model
    from tilecraft.compiler.graph.partition import partition, report, to_json
    from tilecraft.files import write_atomic

    graph = import_model(args.model, input_shapes(args.input_shape))
    placements = partition(graph)
    print(report(placements))
    if args.json:
        write_atomic(args.json, to_json(placements).encode())
        print(f"JSON written to {args.json}")
    return 0


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
    _shape_option(part)
    part.add_argument("--json", help="write the placements as JSON here")
    part.set_defaults(func=cmd_partition)


def _shape_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input-shape", action="append", metavar="NAME=D0,D1,...",
        help="fix a dynamic input's shape (repeat per input)",
    )  # fmt: skip
