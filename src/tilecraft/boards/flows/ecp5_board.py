"""A real bitstream with tools anyone can pip install: `tilecraft build --board ulx3s-85f`.

The board has no processor to drive the accelerator, so the bitstream holds the accelerator in
the two-pin timing harness (`ecp5.harness`): the oscillator through the ECP5 PLL (`ecppll`) at
the config's clock, the shift chain fed from a button, the folded outputs on an LED. It proves
the RTL goes through synthesis, placement, routing and `ecppack` on a real part and package
with real pins, and reports whether it meets the clock there.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tilecraft.boards import Board
from tilecraft.boards.flows.ecp5 import (
    DEVICES,
    ECP5_PACKED,
    TimingReport,
    harness,
    place_and_route,
)
from tilecraft.boards.flows.tools import find_tool
from tilecraft.errors import ConfigError, DeviceError
from tilecraft.files import write_atomic
from tilecraft.hw.config import HwConfig


@dataclass
class Bitstream:
    path: Path
    pll_mhz: float  # the clock the PLL makes (ecppll's nearest to the config's)
    timing: TimingReport

    def to_dict(self) -> dict:
        return {"bitstream": str(self.path), "pll_mhz": self.pll_mhz, **self.timing.to_dict()}


def pll(oscillator_mhz: float, mhz: float, work: Path) -> float:
    """`pll.v` from ecppll (an EHXPLLL making `mhz` from the oscillator); the MHz it makes."""
    ecppll = find_tool("yowasp-ecppll", "ecppll", extra="rtl")
    done = subprocess.run(
        [ecppll, "-i", f"{oscillator_mhz:g}", "-o", f"{mhz:g}", "-f", "pll.v"],
        cwd=work, capture_output=True, text=True,
    )  # fmt: skip
    found = re.search(r"clkout0 frequency: ([\d.]+) MHz", done.stdout)
    if done.returncode != 0 or not found:
        raise DeviceError(f"ecppll cannot make {mhz:g} MHz from {oscillator_mhz:g} MHz: "
                          f"{(done.stdout + done.stderr)[-1000:]}")  # fmt: skip
    return float(found.group(1))


def board_top() -> str:
    return """\
// The board's top: oscillator -> PLL -> the accelerator in its timing harness.
module board_top(input clk_in, input din, output dout);
  wire clk, locked;
  pll pll_i(.clkin(clk_in), .clkout0(clk), .locked(locked));
  timing_harness harness_i(.clk(clk), .din(din & locked), .dout(dout));
endmodule
"""


def constraints(board: Board) -> str:
    pins = board.open.pins
    return f"""\
LOCATE COMP "clk_in" SITE "{pins["clk"]}";
IOBUF PORT "clk_in" IO_TYPE=LVCMOS33;
FREQUENCY PORT "clk_in" {board.open.oscillator_mhz:g} MHZ;
LOCATE COMP "din" SITE "{pins["din"]}";
IOBUF PORT "din" IO_TYPE=LVCMOS33 PULLMODE=DOWN;
LOCATE COMP "dout" SITE "{pins["dout"]}";
IOBUF PORT "dout" IO_TYPE=LVCMOS33 DRIVE=4;
"""


def build_bitstream(
    board: Board,
    folder: str | Path,
    config: HwConfig | None = None,
    route_timeout_s: float | None = None,
) -> Bitstream:
    """`folder/tilecraft.bit` (and its report) for an open-flow board. `folder` must not be
    under /tmp (the YoWASP tools cannot open paths there)."""
    if board.open is None:
        raise ConfigError(f"{board.name} is a PYNQ board: its bitstream comes from Vivado")
    device = next((k for k, v in DEVICES.items() if v == board.part), None)
    if device is None:
        raise ConfigError(f"{board.part} is not an ECP5 part the flow knows ({DEVICES})")
    cfg = config or board.config
    from tilecraft.hw.rtl.top import verilog

    work = Path(folder)
    work.mkdir(parents=True, exist_ok=True)
    made = pll(board.open.oscillator_mhz, cfg.clock_mhz, work)
    sources = {
        "top.v": verilog(cfg, "tilecraft_top", ECP5_PACKED), "harness.v": harness(cfg),
        "board.v": board_top(), "pll.v": (work / "pll.v").read_text(),
    }  # fmt: skip
    write_atomic(work / "board.lpf", constraints(board))
    timing = place_and_route(
        cfg, work, sources, "board_top", device=device, package=board.open.package,
        speed=board.open.speed, target_mhz=made, route_timeout_s=route_timeout_s,
        nextpnr_args=("--lpf", "board.lpf", "--textcfg", "board.config"),
    )  # fmt: skip
    if not timing.routed:
        raise DeviceError(
            f"routing did not finish within {route_timeout_s} s: no bitstream (the estimate "
            f"after placement was {timing.fmax_mhz} MHz)"
        )
    ecppack = find_tool("yowasp-ecppack", "ecppack", extra="rtl")
    done = subprocess.run(
        [ecppack, "--compress", "board.config", "tilecraft.bit"],
        cwd=work, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise DeviceError(f"ecppack failed ({done.returncode}): {done.stderr[-1000:]}")
    result = Bitstream(work / "tilecraft.bit", made, timing)
    write_atomic(work / "tilecraft.json", json.dumps(result.to_dict(), indent=2) + "\n")
    return result
