"""A real bitstream with tools anyone can pip install: `tilecraft build --board ulx3s-85f`.

The board has no processor to drive the accelerator, so the bitstream holds the accelerator in
the two-pin timing harness (`ecp5.harness`): the oscillator through the ECP5 PLL (`ecppll`) at
the config's clock, the shift chain fed from a button, the folded outputs on an LED. It proves
the RTL goes through synthesis, placement, routing and `ecppack` on a real part and package
with real pins, and reports whether it meets the clock there.

No bitstream is written for a clock its route misses unless the caller asks for one
(`allow_timing_failure`): a route short of the config's clock is placed and routed again with
the PLL at 95% of the Fmax it reached (each route is its own placement), up to `ROUTES` routes
in all; the clock that met is the bitstream's, recorded in its `.json` and in a config file
beside it (`tilecraft.toml`: the config at that clock, for every modeled figure of the board).
A clock the caller names (`clock_mhz`) is not lowered: missed, it is an error naming the Fmax.
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
from tilecraft.hw.config import HwConfig, check_rtl

ROUTES = 3  # the asked clock, then up to two lower ones
MARGIN = 0.95  # a re-route's PLL against the Fmax the route before it reached


@dataclass
class Bitstream:
    path: Path
    pll_mhz: float  # the clock the PLL makes: the accelerator's clock on the board
    timing: TimingReport  # the route the bitstream holds
    config_mhz: float  # the clock the config asked for
    routes: tuple[tuple[float, float | None], ...] = ()  # every route: (PLL MHz, routed Fmax)

    @property
    def config_file(self) -> Path:
        return self.path.with_suffix(".toml")

    def to_dict(self) -> dict:
        return {
            "bitstream": str(self.path),
            "pll_mhz": self.pll_mhz,
            "clock_mhz": self.pll_mhz,
            "config_clock_mhz": self.config_mhz,
            "config": str(self.config_file),
            "routes": [{"pll_mhz": p, "fmax_mhz": f} for p, f in self.routes],
            **self.timing.to_dict(),
        }

    def describe(self) -> str:
        """What the bitstream's clock is and why."""
        met = "meets" if self.timing.met else "does NOT meet (--allow-timing-failure)"
        text = f"PLL {self.pll_mhz:g} MHz: the route {met} it (Fmax {self.timing.fmax_mhz:.1f} MHz)"
        if len(self.routes) > 1:
            missed = ", ".join(f"{f:.1f} MHz at {p:g}" for p, f in self.routes[:-1])
            text += (
                f"; the config's {self.config_mhz:g} MHz was missed ({missed}), so the "
                f"PLL was lowered and the design routed again"
            )
        return text


def pll(oscillator_mhz: float, mhz: float, work: Path) -> float:
    """`pll.v` from ecppll (an EHXPLLL making `mhz` from the oscillator); the MHz it makes."""
    ecppll = find_tool("yowasp-ecppll", "ecppll", extra="rtl")
    done = subprocess.run(
        [ecppll, "-i", f"{oscillator_mhz:g}", "-o", f"{mhz:g}", "-f", "pll.v"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    found = re.search(r"clkout0 frequency: ([\d.]+) MHz", done.stdout)
    if done.returncode != 0 or not found:
        raise DeviceError(
            f"ecppll cannot make {mhz:g} MHz from {oscillator_mhz:g} MHz: "
            f"{(done.stdout + done.stderr)[-1000:]}"
        )
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
    *,
    clock_mhz: float | None = None,
    allow_timing_failure: bool = False,
    seed: int | None = None,
) -> Bitstream:
    """`folder/tilecraft.bit` (and its report, and its config at the bitstream's clock) for an
    open-flow board, at `clock_mhz` (default: the config's, lowered until a route meets it; see
    the module's docstring). `folder` must not be under /tmp (the YoWASP tools cannot open paths
    there). Nothing is written in `folder` but the flow's work files unless a route is taken."""
    if board.open is None:
        raise ConfigError(f"{board.name} is a PYNQ board: its bitstream comes from Vivado")
    device = next((k for k, v in DEVICES.items() if v == board.part), None)
    if device is None:
        raise ConfigError(f"{board.part} is not an ECP5 part the flow knows ({DEVICES})")
    cfg = config or board.config
    asked = cfg.clock_mhz if clock_mhz is None else float(clock_mhz)
    if not 1.0 <= asked <= 2000.0:
        raise ConfigError(f"clock {asked:g} MHz is out of range: give 1 to 2000 MHz")
    check_rtl(cfg)
    from tilecraft.hw.rtl.top import verilog

    work = Path(folder)
    work.mkdir(parents=True, exist_ok=True)
    write_atomic(work / "board.lpf", constraints(board))
    want, routes, top = asked, [], None
    while True:
        made = pll(board.open.oscillator_mhz, want, work)
        top = top or verilog(cfg, "tilecraft_top", ECP5_PACKED)
        sources = {
            "top.v": top,
            "harness.v": harness(cfg),
            "board.v": board_top(),
            "pll.v": (work / "pll.v").read_text(),
        }
        timing = place_and_route(
            cfg,
            work,
            sources,
            "board_top",
            device=device,
            package=board.open.package,
            speed=board.open.speed,
            target_mhz=made,
            route_timeout_s=route_timeout_s,
            nextpnr_args=("--lpf", "board.lpf", "--textcfg", "board.config"),
            seed=seed,
        )
        if not timing.routed:
            raise DeviceError(
                f"routing did not finish within {route_timeout_s} s: no bitstream (the estimate "
                f"after placement was {timing.fmax_mhz} MHz)"
            )
        routes.append((made, timing.fmax_mhz))
        if timing.met or allow_timing_failure:
            break
        tried = ", ".join(f"{f:.1f} MHz at {p:g}" for p, f in routes)
        if clock_mhz is not None or len(routes) == ROUTES:
            raise DeviceError(
                f"no bitstream: the route reached {timing.fmax_mhz:.1f} MHz, short of its "
                f"{made:g} MHz PLL (routes: {tried}); ask for a clock it meets (--clock-mhz "
                f"{int(timing.fmax_mhz * MARGIN)}), or write one for a clock it misses with "
                f"--allow-timing-failure"
            )
        want = int(timing.fmax_mhz * MARGIN * 10) / 10
    ecppack = find_tool("yowasp-ecppack", "ecppack", extra="rtl")
    done = subprocess.run(
        [ecppack, "--compress", "board.config", "tilecraft.bit.tmp"],
        cwd=work,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise DeviceError(f"ecppack failed ({done.returncode}): {done.stderr[-1000:]}")
    (work / "tilecraft.bit.tmp").replace(work / "tilecraft.bit")
    result = Bitstream(work / "tilecraft.bit", made, timing, cfg.clock_mhz, tuple(routes))
    write_atomic(result.config_file, cfg.replace(clock_mhz=made).to_toml())
    write_atomic(work / "tilecraft.json", json.dumps(result.to_dict(), indent=2) + "\n")
    return result
