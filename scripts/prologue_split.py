"""What a prologue finer than a tile would buy ResNet-18's 1x1 stride-2 layers (C4, C7, C10),
as the benchmarks README's resnet18-layers section reports: every schedule of a layer's space
timed on the cycle model (`compiler.tune.table.measure_all`), as the compiler lowers it and with
the layer's first step split by output block (its weights LOADed and its GEMM issued one output
channel block at a time, so the array starts on the first block's weights), on the PYNQ-Z1
preset's twin with the requantization unit. The what-if patches the lowering for the run only;
where the compiler already splits the first step by input block (`_first_step`), it is kept.
With `--gather`, a third: the layer at stride 1 over only the pixels its stride reads, every
schedule of that space timed as the compiler lowers it, which is the best a LOAD that gathered
those pixels (the even rows' even columns, not whole rows) could give.

    .venv/bin/python scripts/prologue_split.py [--layers C7,C10] [--gather] [--json FILE]
    (about 4 minutes a layer on one core, 2 more with --gather)
"""

import argparse
import contextlib
import json
import time

import numpy as np

from tilecraft.benchmarks.resnet18_layers import epilogue_for
from tilecraft.benchmarks.workloads import layer_op, resnet18_layers
from tilecraft.boards import resolve_config
from tilecraft.compiler.operator import lowering
from tilecraft.compiler.operator.tensorize import gemm_loops, kernel_uops, step_dims
from tilecraft.compiler.tune.measure import CycleModel
from tilecraft.compiler.tune.table import measure_all
from tilecraft.compiler.tune.task import Task
from tilecraft.hw.isa import Gemm, Load, MemId, Uop
from tilecraft.ops import Conv2d


def _by_output_block(emitter, tile, ic0, tic, islot, wslot, a):
    """The first step's window whole, then per output block its weights and its GEMM."""
    low, kk = emitter.low, emitter.low.wgt_taps
    emitter._load_window(tile, ic0, tic, islot)
    for j in range(tile.toc):
        emitter.insns.append(
            Load(
                mem=MemId.WGT,
                sram_base=emitter.slots.wgt[wslot] + j * tic * kk,
                dram_base=emitter.dram.weight + (tile.oc0 + j) * low.icb * kk + ic0 * kk,
                y_size=1,
                x_size=tic * kk,
                x_stride=low.icb * kk,
            )
        )
        dims = step_dims(low, tile.toc, tic, tile.toh, tile.tow)
        oc = next(k for k, d in enumerate(dims) if d[0] == "oc")
        name, _, dst, src, wgt = dims[oc]
        dims[oc] = (name, 1, dst, src, wgt)
        base = (
            emitter.slots.acc[a] + j * dst,
            emitter.slots.inp[islot] + j * src,
            emitter.slots.wgt[wslot] + j * wgt,
        )
        loops, rest = gemm_loops(dims)
        bgn, end = emitter.kernels.get(
            ("gemm", base, tuple(dims)),
            lambda rest=rest, base=base: [Uop(*u) for u in kernel_uops(rest, base)],
        )
        (_, n1, d1, s1, w1), (_, n2, d2, s2, w2) = loops
        emitter.insns.append(
            Gemm(
                uop_bgn=bgn,
                uop_end=end,
                iter_out=n1,
                iter_in=n2,
                dst_out=d1,
                dst_in=d2,
                src_out=s1,
                src_in=s2,
                wgt_out=w1,
                wgt_in=w2,
            )  # fmt: skip
        )


@contextlib.contextmanager
def split_by_output_block():
    emitter = lowering._ConvEmitter
    splits, first = emitter._splits, emitter._first_step

    def _splits(self, tile, tic):
        return splits(self, tile, tic) or (tile.toc > 1 and not self.low.windowed)

    def _first_step(self, tile, ic0, tic, islot, wslot, a):
        if splits(self, tile, tic):
            return first(self, tile, ic0, tic, islot, wslot, a)
        return _by_output_block(self, tile, ic0, tic, islot, wslot, a)

    emitter._splits, emitter._first_step = _splits, _first_step
    try:
        yield
    finally:
        emitter._splits, emitter._first_step = splits, first


def only_read_pixels(task: Task) -> Task:
    """A 1x1 conv with a stride, as a conv at stride 1 over the input pixels it reads: the
    same MACs, weights and output, its input 1/stride**2 of the bytes."""
    op = task.op
    (sh, sw), (kh, kw) = op.stride, op.kernel
    if (kh, kw) != (1, 1) or any(op.pad):
        raise SystemExit(f"{op}: only a 1x1 conv without padding reads a strided subset")
    sub = Conv2d(op.n, op.ic, -(-op.h // sh), -(-op.w // sw), op.oc, kernel=1, stride=1)
    return Task(task.config, sub, task.epilogue)


def best(task: Task) -> dict:
    cycles = measure_all(task, CycleModel(), jobs=1)
    i = int(np.argmin(np.where(cycles > 0, cycles, np.iinfo(np.int64).max)))
    ideal = task.op.macs / task.config.macs_per_cycle
    return {
        "schedules": len(cycles),
        "best_cycles": int(cycles[i]),
        "utilization": ideal / int(cycles[i]),
        "schedule": task.space[i].describe(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", default="C4,C7,C10")
    ap.add_argument("--gather", action="store_true", help="also the stride's pixels alone")
    ap.add_argument("--json")
    args = ap.parse_args()
    cfg = resolve_config("pynq-z1").with_requant_unit()
    layers = {x["name"]: x for x in resnet18_layers()}
    out = {"config": cfg.tag, "layers": {}}
    for name in args.layers.split(","):
        task = Task(cfg, layer_op(layers[name]), epilogue_for(cfg))
        start = time.perf_counter()
        plain = best(task)
        with split_by_output_block():
            split = best(task)
        out["layers"][name] = {"as_lowered": plain, "first_step_by_output_block": split}
        gathered = ""
        if args.gather:
            out["layers"][name]["only_read_pixels"] = read = best(only_read_pixels(task))
            gathered = f", {read['best_cycles']:,} over only the pixels its stride reads"
        print(
            f"{name}: {plain['schedules']} schedules; best {plain['best_cycles']:,} cycles as "
            f"lowered, {split['best_cycles']:,} with the first step by output block{gathered} "
            f"({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
