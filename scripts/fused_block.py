"""What running each of MobileNetV2's inverted residual blocks as one pass buys on the cycle
model, as the hardware is built and with three changes it is not (docs/DEPTHWISE.md).

Each block whose expand is a 1x1 conv (16 of 17) is built as one program with its expanded
tensors on chip (`tilecraft.compiler.programs.inverted_residual`: STORE into INP), every tiling
that fits timed on the cycle model, the fastest kept, and set against the block's three layers
as the compiler compiles them (`fusion_bound.py`'s network: the PYNQ-Z1 preset's twin with the
unit and the depthwise mode). The programs carry no residual add: a block with one is timed
without it (`residual` in the JSON), so its figure flatters it. The what-ifs patch the model
(cycles only, no semantics): `window`, the depthwise mode taking one output pixel a cycle
instead of K reads of INP a column; `unit port`, the unit reading the accumulator through a
port of its own (no bank held); `no zeroing`, a GEMM that writes its first products (no ALU
pass zeroing the expand's rows); and the three together. One block (the largest plane) is run
functionally too, bit-exact against numpy.

    .venv/bin/python scripts/fused_block.py [--json FILE]   (about a minute)
"""

import argparse
import contextlib
import json
from pathlib import Path

import fusion_bound
import numpy as np

from tilecraft.boards import resolve_config
from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.programs.inverted_residual import Block, bands, build, output
from tilecraft.hw import timing
from tilecraft.hw.isa import Opcode
from tilecraft.runtime import get_device
from tilecraft.sim import engine

DEFAULT_JSON = "src/tilecraft/benchmarks/data/fused_blocks.json"


@contextlib.contextmanager
def line_window():
    """The depthwise mode taking one output pixel a cycle (its passes each)."""
    saved = timing.depthwise_steps

    def steps(window, passes, row):
        rows, cols = timing.depthwise_outputs(window, row)
        return rows * cols * passes

    timing.depthwise_steps = steps
    try:
        yield
    finally:
        timing.depthwise_steps = saved


@contextlib.contextmanager
def unit_port():
    """The unit reading the accumulator through its own port: a STORE holds no bank."""
    init, ready = engine.Engine.__init__, engine.Engine._bank_ready

    def no_banks(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.bank_of = None

    engine.Engine.__init__, engine.Engine._bank_ready = no_banks, lambda self, k, t: t
    try:
        yield
    finally:
        engine.Engine.__init__, engine.Engine._bank_ready = init, ready


CASES = {  # name: (model patches, the ALU zeroing the expand's rows)
    "as built": ((), True),
    "window": ((line_window,), True),
    "unit port": ((unit_port,), True),
    "no zeroing": ((), False),
    "all three": ((line_window, unit_port), False),
}


NOTES = {
    "as built": "the hardware as built, the ALU zeroing the expand's rows",
    "window": "the depthwise mode at one output pixel a cycle",
    "unit port": "the unit reading the accumulator through a port of its own",
    "no zeroing": "a GEMM that writes its first products (no zeroing pass)",
    "all three": "the three together",
}


def fastest(cfg, block: Block, zeroing: bool) -> tuple[int, dict]:
    """The fastest tiling's cycles, and the tiling with its GEMM core's own cycles (its GEMMs'
    and DEPTHWISEs' busy cycles, one after another)."""
    sim, model = get_device("sim"), timing.Timing.from_config(cfg)
    best = None
    for band in bands(cfg, block):
        program = build(cfg, block, band, zeroing=zeroing)[0]
        cycles = sim.cycles(program)
        if best is None or cycles < best[0]:
            if zeroing:  # without it, the what-if adds to rows nothing wrote: cycles only
                verify(program, dataflow=False)
            table = program.table()
            core = table[np.isin(table["opcode"], (Opcode.GEMM, Opcode.DEPTHWISE))]
            own = sum(timing.busy_cycles(model, row) for row in core)
            best = cycles, {**band.__dict__, "core_cycles": int(own)}
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=DEFAULT_JSON, help="write the figures here")
    args = parser.parse_args()
    # the unit without its residual add: a STORE word has no room for both it and STORE into
    # INP (docs/ARCHITECTURE.md), and the fused programs leave the residual adds out anyway
    unit = resolve_config("pynq-z1").with_requant_unit().replace(requant_residual=0)
    base = unit.with_depthwise_mode(3)
    cfg = base.with_store_to_inp()
    runs = fusion_bound._blocks(fusion_bound._layers(base))
    blocks, others = [], 0
    for run in runs:
        if len(run) != 3 or run[0]["op"].kernel != (1, 1):
            others += sum(x["cycles"] for x in run)  # as compiled
            continue
        expand, dw, project = (x["op"] for x in run)
        block = Block(expand.h, expand.ic, expand.oc, project.oc, dw.stride[0])
        row = {
            "layers": [x["name"] for x in run],
            "block": block.__dict__,
            "residual": len(run[2]["inputs"]) > 1,
            "as_compiled": sum(x["cycles"] for x in run),
        }
        for name, (patches, zeroing) in CASES.items():
            with contextlib.ExitStack() as stack:
                for patch in patches:
                    stack.enter_context(patch())
                row[name], row[f"{name} tiling"] = fastest(cfg, block, zeroing)
        blocks.append(row)
        cells = " ".join(f"{row[name]:9,}" for name in CASES)
        print(
            f"{row['layers'][0]:9s} {str(tuple(block.__dict__.values())):24s} "
            f"{'res' if row['residual'] else '   '} {row['as_compiled']:9,} {cells}",
            flush=True,
        )
    ms = 1 / (cfg.clock_mhz * 1e3)
    totals = {"as compiled": (others + sum(r["as_compiled"] for r in blocks)) * ms}
    for name in CASES:  # each block fused where that is faster, the rest as compiled
        best = sum(min(r[name], r["as_compiled"]) for r in blocks)
        totals[name] = (others + best) * ms
    plain = [r for r in blocks if not r["residual"]]
    core = sum(r["as built tiling"]["core_cycles"] for r in blocks)
    print(
        f"the GEMM core's own cycles fused, as built: {core * ms:.1f} ms against "
        f"{sum(r['as_compiled'] for r in blocks) * ms:.1f} ms for the blocks as compiled"
    )
    print(f"{'':38s} {'compiled':>9s} " + " ".join(f"{n:>9s}" for n in CASES))
    print(
        "MobileNetV2 ms (blocks fused where faster): "
        + ", ".join(f"{k} {v:.1f}" for k, v in totals.items())
    )
    ratios = {
        name: sum(r["as_compiled"] for r in plain) / sum(r[name] for r in plain) for name in CASES
    }
    print(
        "the blocks without a residual, as compiled / fused: "
        + ", ".join(f"{k} x{v:.2f}" for k, v in ratios.items())
    )
    big = max(blocks, key=lambda r: r["block"]["size"])
    block = Block(**big["block"])
    program, inputs, want = build(cfg, block, bands(cfg, block)[-1])
    got = output(get_device("sim").run(program, inputs).outputs["y"], block.cout)
    exact = bool(np.array_equal(got, want))
    print(f"{big['layers'][0]}'s block run functionally: bit-exact with numpy: {exact}")
    out = {
        "config": cfg.tag,
        "cases": NOTES,
        "ms": totals,
        "plain_blocks_speedup": ratios,
        "core_ms_as_built": core * ms,
        "bit_exact": exact,
        "blocks": blocks,
    }
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
