"""Which accelerator configs fit which board: measured synthesis figures (yosys `synth_xilinx`,
`boards/synthesis.json`, written by `tilecraft hw resources`) against each board part's
capacity.

Figures are per config tag and yosys family (`xc7` for Zynq-7000, `xcup` for UltraScale+). An
UltraScale+ part with no `xcup` figure for a config is judged on its `xc7` figure and says so
(the DSP48E2 and RAMB36E2 hold at least what their 7-series forms do). These are synthesis
estimates before placement: above `TIGHT` of any resource, routing may still fail.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

from tilecraft.boards import Board
from tilecraft.errors import ConfigError
from tilecraft.hw.config import HwConfig, require_config

PARTS = {  # capacities from the AMD product tables (LUT6, FF, DSP slices, RAMB36, URAM288)
    "xc7z010": {"lut": 17600, "ff": 35200, "dsp": 80, "bram36": 60, "uram": 0},
    "xc7z020": {"lut": 53200, "ff": 106400, "dsp": 220, "bram36": 140, "uram": 0},
    "xc7z045": {"lut": 218600, "ff": 437200, "dsp": 900, "bram36": 545, "uram": 0},
    "xczu3eg": {"lut": 70560, "ff": 141120, "dsp": 360, "bram36": 216, "uram": 0},
    "xck26": {"lut": 117120, "ff": 234240, "dsp": 1248, "bram36": 144, "uram": 64},
    "xczu7ev": {"lut": 230400, "ff": 460800, "dsp": 1728, "bram36": 312, "uram": 96},
    # ECP5 in the same units: LUT4s, MULT18X18D, and a DP16KD (18 kbit) as half a RAMB36
    "LFE5U-85F": {"lut": 83640, "ff": 83640, "dsp": 156, "bram36": 104, "uram": 0},
}
TIGHT = 0.8  # above this share of a resource, placement and routing may fail


def family(part: str) -> str:
    """The figures' family of a part: yosys's `synth_xilinx -family` (xc7 for Zynq-7000, xcup
    for UltraScale+), or ecp5 (nextpnr's utilisation after placement)."""
    if part.startswith("LFE5U"):
        return "ecp5"
    return "xcup" if part.startswith(("xczu", "xck")) else "xc7"


def measured() -> list[dict]:
    """The committed synthesis figures (one dict per config tag and family)."""
    text = resources.files(__package__).joinpath("synthesis.json").read_text()
    return json.loads(text)["figures"]


@dataclass(frozen=True)
class Fit:
    config: str  # the config's name (a preset, a board or a file) or, unnamed, its tag
    part: str
    used: dict[str, float] | None  # None: no synthesis figure for this config
    basis: str  # which figure: "xcup", or "xc7" (a 7-series figure on an UltraScale+ part)
    current: bool = True  # the figure was measured on the tree's RTL (`_current`)
    named: bool = True  # `config` is a name --config takes (else a tag: the advice says F.toml)

    @property
    def spec(self) -> str:
        """What the advice's --config names: the config's name, or a file it is saved to."""
        return self.config if self.named else "F.toml (HwConfig.save('F.toml') writes it)"

    @property
    def fractions(self) -> dict[str, float]:
        cap = PARTS[self.part]
        if self.used is None:
            return {}
        return {
            k: self.used.get(k, 0) / cap[k] if cap[k] else float("inf")
            for k in cap
            if cap[k] or self.used.get(k, 0)
        }

    @property
    def fits(self) -> bool | None:
        return None if self.used is None else max(self.fractions.values()) <= 1.0

    @property
    def tight(self) -> bool:
        return bool(self.fits) and max(self.fractions.values()) > TIGHT

    def describe(self) -> str:
        if self.used is None:
            if family(self.part) == "ecp5":
                return f"not measured: tilecraft hw timing --config {self.spec} --record"
            return f"not measured: tilecraft hw resources --config {self.spec} --part {self.part}"
        worst = max(self.fractions, key=self.fractions.get)
        verdict = "fits" if self.fits else "does not fit"
        note = " (tight: routing may fail)" if self.tight else ""
        basis = f", judged on its {self.basis} synthesis" if self.basis != family(self.part) else ""
        old = (
            ""
            if self.current
            else (f"; measured on an earlier RTL (again: {self._command()} --record)")
        )
        return f"{verdict}: {worst} {self.fractions[worst]:.0%}{note}{basis}{old}"

    def _command(self) -> str:
        if family(self.part) == "ecp5":
            return f"tilecraft hw timing --config {self.spec}"
        return f"tilecraft hw resources --config {self.spec} --part {self.part}"


def fit(cfg: HwConfig, board: Board, name: str | None = None) -> Fit:
    """How `cfg` (called `name`: a name --config takes) fits the board's part."""
    require_config(cfg)
    if not isinstance(board, Board):
        raise ConfigError(f"board must be a Board (tilecraft.boards.board(NAME)), not {board!r}")
    named = name is not None
    name = name or cfg.tag
    part = board.part_family
    if part not in PARTS:
        return Fit(name, part, None, "", named=named)
    figures = {f["family"]: f for f in measured() if f["tag"] == cfg.tag}
    want = family(part)
    xilinx = {k: v for k, v in figures.items() if k != "ecp5"}
    basis = want if want in figures else ("" if want == "ecp5" else next(iter(xilinx), ""))
    if not basis:
        return Fit(name, part, None, "", named=named)
    used = {k: figures[basis].get(k, 0) for k in PARTS[part]}
    return Fit(name, part, used, basis, _current(cfg, figures[basis]), named)


def _current(cfg: HwConfig, figure: dict) -> bool:
    """Whether `figure` was measured on the tree's RTL: on its sources (`rtl`), or, where they
    have changed since, on the very design the config elaborates to now (`design`: a change
    to a part of the RTL this config does not have, such as a unit it leaves out, leaves its
    figures standing)."""
    rtl = _rtl_digest()
    if figure.get("rtl") == rtl:
        return True
    if rtl is None or "design" not in figure:
        return False
    return figure["design"] == design_of(cfg, figure["family"])


@functools.lru_cache(maxsize=16)
def design_of(cfg: HwConfig, family: str) -> str:
    """The digest of the design a figure of `family` is measured on for `cfg` (the Verilog
    `hw resources` synthesizes, or the ECP5 flow's, its DSPs unpacked); it elaborates the
    config, seconds to a minute."""
    from tilecraft.boards.flows.resources import design
    from tilecraft.hw.rtl.dsp import ECP5_DSP

    return design(cfg, ECP5_DSP if family == "ecp5" else None)


def restamp() -> list[tuple[str, str, str]]:
    """Stamp with the tree's RTL digest each figure in the source tree's synthesis.json whose
    config still elaborates to the design it was measured on (its `design`): after a change to
    a part of the RTL other configs do not have, their figures stand without a synthesis or a
    route. (config, family, what was done: "stamped", "changed" or "no design") per figure
    measured on other sources; a figure whose design changed, or that has none recorded, is
    left as it is, to be measured again."""
    from tilecraft.boards import resolve_config

    rtl, done = _rtl_digest(), []
    if rtl is None:
        raise ConfigError("the RTL's sources are not installed here: nothing to stamp against")
    path = _figures_path()
    data = json.loads(path.read_text())
    for f in data["figures"]:
        if f.get("rtl") == rtl:
            continue
        if "design" not in f:
            done.append((f["config"], f["family"], "no design"))
        elif f["design"] != design_of(resolve_config(f["config"]), f["family"]):
            done.append((f["config"], f["family"], "changed"))
        else:
            f["rtl"] = rtl
            done.append((f["config"], f["family"], "stamped"))
    if any(what == "stamped" for *_, what in done):
        _save(path, data)
    return done


def _rtl_digest() -> str | None:
    """The tree's RTL digest; None where its sources are not installed (a board's runtime)."""
    from tilecraft.hw.rtl import source_digest

    try:
        return source_digest()
    except OSError:
        return None


def record(figure: dict, cfg: HwConfig | None = None) -> None:
    """Add or replace one figure (config tag and family) in the source tree's synthesis.json
    (`tilecraft hw resources --record`, for developers: an installed package is read-only),
    with the RTL's digest and, given `cfg`, its design's (`design_of`)."""
    path = _figures_path()
    data = json.loads(path.read_text())
    figure = {**figure, "rtl": _rtl_digest()}  # the sources it was measured on
    if cfg is not None:  # and the design, which outlives changes elsewhere in the sources
        figure["design"] = design_of(cfg, figure["family"])
    key = (figure["tag"], figure["family"])
    kept = [f for f in data["figures"] if (f["tag"], f["family"]) != key]
    data["figures"] = sorted([*kept, figure], key=lambda f: (f["family"], f["tag"]))
    _save(path, data)


def _figures_path():
    """The source tree's synthesis.json (written by developers: an installed package is
    read-only)."""
    from pathlib import Path

    return Path(str(resources.files(__package__).joinpath("synthesis.json")))


def _save(path, data: dict) -> None:
    """synthesis.json as it is kept: a figure a line."""
    from tilecraft.files import write_atomic

    rows = ",\n".join("    " + json.dumps(f) for f in data["figures"])
    write_atomic(
        path, f'{{\n  "source": {json.dumps(data["source"])},\n  "figures": [\n{rows}\n  ]\n}}\n'
    )
