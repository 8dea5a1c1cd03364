"""What the `tilecraft` subcommands share: argument types, a layer's arguments (compile and
tune take the same), writing outputs, and the modeled cycles `compile` reports."""

from __future__ import annotations

import argparse
import math

LAYER_DIMS = {  # a layer's shape options and their defaults, per operator
    "conv2d": (
        ("N", 1),
        ("IC", 64),
        ("H", 56),
        ("W", 56),
        ("OC", 64),
        ("K", 3),
        ("S", 1),
        ("P", 1),
    ),
    "dense": (("M", 64), ("K", 256), ("N", 128)),
}


def add_layer_arguments(parser: argparse.ArgumentParser, op: str) -> None:
    """The options that say which layer: its shape, the config, its epilogue."""
    for name, default in LAYER_DIMS[op]:
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--config", default="default", help="config name or .toml/.json")
    parser.add_argument("--bias", action="store_true", help="add a per-channel int32 bias")
    parser.add_argument("--multiplier", choices=["none", "tensor", "channel"], default="none")
    parser.add_argument("--shift", type=int, default=8, help="rounding right shift (0..31)")
    parser.add_argument("--relu", action="store_true")
    parser.add_argument("--residual", action="store_true", help="add an int8 residual input")
    parser.set_defaults(op=op)


def layer_of(args):
    """(config, operator, epilogue) of a command's layer options (`add_layer_arguments`)."""
    from tilecraft.boards import resolve_config
    from tilecraft.ops import Conv2d, Dense, Epilogue

    ep = Epilogue(args.bias, args.multiplier, args.shift, args.residual, args.relu)
    if args.op == "conv2d":
        op = Conv2d(args.N, args.IC, args.H, args.W, args.OC, args.K, args.S, args.P)
    else:
        op = Dense(args.M, args.K, args.N)
    return resolve_config(args.config), op, ep


def write(path: str | None, write, what: str) -> None:
    if path:
        write(path)
        print(f"{what} written to {path}")


def write_json(path: str, data) -> None:
    from tilecraft.files import write_json

    write_json(path, data)


def write_trace(path: str, trace: dict) -> None:
    from tilecraft.sim.trace import write_trace

    write_trace(path, trace)


def count(text: str, least: int = 0) -> int:
    """A whole number >= `least` (seeds, counts)."""
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"expected a whole number >= {least}, got {text!r}")
    return value


def positive(text: str) -> int:
    return count(text, 1)


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    return positive_number(text, "seconds")


def positive_number(text: str, what: str = "a number") -> float:
    """A positive, finite number (a clock in MHz, a time in seconds)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected {what} > 0, got {text!r}")
    return value


def names(text: str | None) -> list[str] | None:
    return [n.strip() for n in text.split(",")] if text else None


def schedule(text: str | None):
    from tilecraft.errors import ScheduleError
    from tilecraft.ops import ConvSchedule, LoopOrder

    if not text:
        return None
    parts = [p.strip() for p in text.split(",")]
    orders = [o.value for o in LoopOrder]
    try:
        tiles = [int(p) for p in parts[:4]]
    except ValueError:
        tiles = []
    extra = parts[4:]
    order = next((p for p in extra if p in orders), LoopOrder.OC_OUTER)
    unknown = [p for p in extra if p not in orders and p != "single"]
    given = [p for p in extra if p in orders]
    if len(given) > 1:
        raise ScheduleError(f"--schedule {text!r} names two loop orders, {given[0]} and {given[1]}")
    if len(tiles) != 4 or unknown:
        raise ScheduleError(
            f"--schedule {text!r}: expected TILE_OC,TILE_IC,TILE_OH,TILE_OW[,ORDER][,single] "
            f"with ORDER one of {', '.join(orders)}"
        )
    return ConvSchedule(*tiles, order=order, double_buffer="single" not in extra)


def recorded(args, cfg, op, ep):
    """The best schedule `--records` holds for the layer (None without records or a match)."""
    if not args.records:
        return None
    from tilecraft.compiler.tune.records import applied_records
    from tilecraft.compiler.tune.task import Task
    from tilecraft.compiler.tune.tuner import best_schedule

    best = best_schedule(applied_records(args.records, cfg.digest), Task(cfg, op, ep))
    print(f"records: {'best schedule ' + best.describe() if best else 'nothing for this layer'}")
    return best


class Modeled:
    """The cycle model's count for compiled programs, run one after another at the config's
    clock: what `compile` says it built."""

    def __init__(self, cycles: list[int], clock_mhz: float):
        self.cycles, self.clock_mhz = cycles, clock_mhz

    @property
    def total(self) -> int:
        return sum(self.cycles)

    @property
    def ms(self) -> float:
        return self.total / (self.clock_mhz * 1e3)

    def format(self) -> str:
        parts = f" ({len(self.cycles)} programs)" if len(self.cycles) > 1 else ""
        return (
            f"modeled: {self.total:,} accelerator cycles = {self.ms:.3f} ms at "
            f"{self.clock_mhz:g} MHz{parts} (the cycle model)"
        )

    def to_dict(self) -> dict:
        return {
            "modeled_cycles": self.total,
            "modeled_ms": self.ms,
            "clock_mhz": self.clock_mhz,
            "program_cycles": list(self.cycles),
        }


def modeled_cycles(programs, known=None) -> Modeled:
    """`programs` on the cycle model (timing does not depend on data), each count in `known`
    taken as it is (the schedule search's measurement)."""
    from tilecraft.sim.simulator import model_report

    known = list(known or [None] * len(programs))
    cycles = [k if k is not None else model_report(p).cycles for p, k in zip(programs, known)]
    return Modeled(cycles, programs[0].config.clock_mhz if programs else 0.0)


def record_result(suite: str, result: dict) -> None:
    """Keep `result` as the suite's recorded figures, with the command line that made it."""
    import sys

    from tilecraft.benchmarks.results import record

    command = "tilecraft " + " ".join(sys.argv[1:]) if sys.argv[1:] else f"tilecraft {suite}"
    path = record(suite, result, command)
    print(f"recorded in {path} (tilecraft figures makes the README's tables from it)")
