"""How far the cycle model is from the RTL as the command queues shrink: on 1x8x8 with
`cmd_queue_depth` set to each depth, what `bench rtl-speed --random N --schedules S` runs (its
3x3 conv, N random programs, S random layers under random legal schedules: real layers, whose
queues fill), every run on the generated Verilog and on the model. The
benchmarks README's rtl-speed section reports the result; its output is kept in
src/tilecraft/benchmarks/data/queue_depth_model_error.json.

    .venv/bin/python scripts/queue_depth_error.py [--programs 100] [--schedules 40]
        [--depths 1,2,3,4,8,16,512] [--json FILE]
    (the rtl extra; about two minutes a depth on one core)
"""

import argparse
import json
import time
from dataclasses import replace

from tilecraft.benchmarks.rtl_speed import drawn_schedules, run
from tilecraft.hw.config import preset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=100, help="random programs a depth")
    ap.add_argument("--schedules", type=int, default=40, help="drawn layers a depth")
    ap.add_argument("--depths", default="1,2,3,4,8,16,512", help="cmd_queue_depth values")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    rows = []
    for depth in depths:
        cfg = replace(preset("1x8x8"), cmd_queue_depth=depth)
        t0 = time.perf_counter()
        whole = run(cfg, random=args.programs)
        r, layers = whole["random"], drawn_schedules(cfg, args.schedules)
        errors = [abs(x["rtl_cycles"] - x["model_cycles"]) / x["rtl_cycles"] for x in r["runs"]]
        early = sum(x["model_cycles"] < x["rtl_cycles"] for x in r["runs"])
        rows.append(
            {
                "cmd_queue_depth": depth,
                "programs": r["programs"],
                "bit_exact": r["bit_exact"],
                "max_cycle_error": r["max_cycle_error"],
                "worst": r["worst"],
                "mean_cycle_error": r["mean_cycle_error"],
                "exact_cycles": r["exact_cycles"],
                "model_early": early,
                "within_half_percent": sum(e <= 0.005 for e in errors),
                "conv_cycle_error": whole["cycle_error"],
                "schedules": layers["schedules"],
                "schedules_bit_exact": layers["bit_exact"],
                "schedules_max_cycle_error": layers["max_cycle_error"],
                "schedules_mean_cycle_error": layers["mean_cycle_error"],
                "schedules_exact": layers["exact_cycles"],
                "seconds": time.perf_counter() - t0,
            }
        )
        row = rows[-1]
        print(
            f"depth {depth:>4}: {row['bit_exact']}/{row['programs']} bit-exact, max error "
            f"{row['max_cycle_error']:.2%} ({row['worst']}), mean {row['mean_cycle_error']:.3%}, "
            f"{row['exact_cycles']} exact, {row['model_early']} with the model early; conv "
            f"{row['conv_cycle_error']:.2%}; {row['schedules']} layers: max "
            f"{row['schedules_max_cycle_error']:.2%}, {row['schedules_exact']} exact",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": "1x8x8", "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
