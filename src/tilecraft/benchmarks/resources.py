"""resources: each preset config through yosys `synth_xilinx` (benchmarks/README.md): LUT,
FF, DSP48E1 and BRAM36 on the xc7z020, and their share of the part."""

from __future__ import annotations

from tilecraft.boards.flows.resources import synthesize
from tilecraft.hw.config import preset

CONFIGS = ("default", "1x8x8", "2x16x16")


def run(cfg=None, part: str = "xc7z020") -> dict:
    """The sweep presets (`cfg` is ignored: this suite compares configs)."""
    return {
        "suite": "resources",
        "configs": [synthesize(preset(n), part).to_dict() for n in CONFIGS],
    }


def format_table(result: dict) -> str:
    lines = ["resources (yosys synth_xilinx)"]
    for r in result["configs"]:
        f = r["fractions"]
        lines.append(
            f"  {r['config']:28s} LUT {r['lut']:>7,} ({f['lut']:5.1%})  FF {r['ff']:>7,} "
            f"({f['ff']:5.1%})  DSP {r['dsp']:>4} ({f['dsp']:5.1%})  BRAM36 {r['bram36']:>5} "
            f"({f['bram36']:5.1%})  {r['seconds']:.0f} s"
        )
    return "\n".join(lines)
