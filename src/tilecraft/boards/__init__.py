"""Board presets: the part, processing system, clocks, memory and PYNQ release of each supported
board, plus the HwConfig overrides it needs. One TOML file per board in `presets/`.
`resolve_config` names any config: a sweep preset (`hw.config.preset`), a board, or a
.toml/.json file. Pure data: this module imports on a board (Python 3.10, numpy, no Amaranth)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from tilecraft.errors import ConfigError
from tilecraft.hw.config import HwConfig, preset_names, resolve, toml_loads

PS_IPS = {"zynq7000": "processing_system7", "zynqmp": "zynq_ultra_ps_e"}
OPEN_FAMILIES = ("ecp5",)  # boards built with the open flow: no processing system, no PYNQ


@dataclass(frozen=True)
class ProcessingSystem:
    """How the accelerator hangs off the board's ARM processing system."""

    ip: str  # the Vivado IP: processing_system7 or zynq_ultra_ps_e
    control_port: str  # the PS master the accelerator's registers sit behind
    data_port: str  # the PS slave port the accelerator's AXI4 master reaches DDR through
    register_base: int  # physical address of the registers
    pll_mhz: float  # the PLL the fabric clock is divided from
    interrupt: str  # the PS interrupt input (the accelerator's `interrupt` reaches it through
    # an AXI interrupt controller, as PYNQ's Interrupt needs)


@dataclass(frozen=True)
class Memory:
    dram_mib: int  # the PS's DDR
    cma_mib: int  # the contiguous memory the kernel reserves (pynq.allocate's pool)
    address_bits: int  # what the data port can address


@dataclass(frozen=True)
class PynqRelease:
    release: str  # the PYNQ image this board runs
    python: str  # its Python
    vivado: str  # the Vivado its overlays are built with


@dataclass(frozen=True)
class OpenBoard:
    """An FPGA board of the open flow (yosys, nextpnr): its package, speed grade, oscillator
    and the pins the bitstream uses."""

    package: str
    speed: int
    oscillator_mhz: float
    pins: dict[str, str]  # clk, din, dout -> package pin


@dataclass(frozen=True)
class Board:
    """A board preset. `config` is the HwConfig the board's bitstream is built for. A Zynq board
    has `ps`, `memory` and `pynq`; an open-flow board (ECP5) has `open` instead."""

    name: str
    description: str
    part: str
    family: str
    board_part: str
    host: str  # the host CPU's kernel target (compiler.llvm.targets); "" without one
    ps: ProcessingSystem | None
    memory: Memory | None
    pynq: PynqRelease | None
    config: HwConfig
    open: OpenBoard | None = None

    @property
    def register_base(self) -> int:
        return self.ps.register_base if self.ps else 0

    @property
    def part_family(self) -> str:
        """The part without package and speed grade (`xc7z020`), as resource tables name it."""
        found = re.match(r"xc7z\d{3}|xczu\d+[a-z]{2}|xck\d+|LFE5U-\d+F", self.part)
        return found.group(0) if found else self.part.split("-")[0]


def _preset_dir():
    return resources.files(__name__).joinpath("presets")


def board_names() -> list[str]:
    return sorted(p.name[:-5] for p in _preset_dir().iterdir() if p.name.endswith(".toml"))


def board(name: str) -> Board:
    """Load one board preset by name (e.g. `pynq-z1`)."""
    names = board_names()
    if name not in names:
        raise ConfigError(f"unknown board {name!r}; valid: {', '.join(names)}")
    data = toml_loads(_preset_dir().joinpath(f"{name}.toml").read_text())
    if data.get("board", {}).get("family") in OPEN_FAMILIES:
        return _open_board(name, data)
    try:
        info, ps, memory, pynq = data["board"], data["ps"], data["memory"], data["pynq"]
        made = Board(
            name=name,
            description=info["description"],
            part=info["part"],
            family=info["family"],
            board_part=info.get("board_part", ""),
            host=info["host"],
            ps=ProcessingSystem(
                ip=ps["ip"],
                control_port=ps["control_port"],
                data_port=ps["data_port"],
                register_base=int(ps["register_base"]),
                pll_mhz=float(ps["pll_mhz"]),
                interrupt=ps["interrupt"],
            ),
            memory=Memory(
                int(memory["dram_mib"]), int(memory["cma_mib"]), int(memory["address_bits"])
            ),
            pynq=PynqRelease(str(pynq["release"]), str(pynq["python"]), str(pynq["vivado"])),
            config=HwConfig.from_dict(data.get("hw", {})),
        )
    except KeyError as exc:
        raise ConfigError(f"board preset {name!r} lacks field {exc.args[0]!r}") from exc
    if PS_IPS.get(made.family) != made.ps.ip:
        raise ConfigError(
            f"board preset {name!r}: family {made.family!r} needs the PS IP "
            f"{PS_IPS.get(made.family)!r}, not {made.ps.ip!r}"
        )
    return made


def _open_board(name: str, data: dict) -> Board:
    try:
        info, pins = data["board"], data["pins"]
        return Board(
            name=name,
            description=info["description"],
            part=info["part"],
            family=info["family"],
            board_part="",
            host="",
            ps=None,
            memory=None,
            pynq=None,
            config=HwConfig.from_dict(data.get("hw", {})),
            open=OpenBoard(
                info["package"],
                int(info["speed"]),
                float(info["oscillator_mhz"]),
                {k: str(pins[k]) for k in ("clk", "din", "dout")},
            ),
        )
    except KeyError as exc:
        raise ConfigError(f"board preset {name!r} lacks field {exc.args[0]!r}") from exc


def config_names() -> list[str]:
    """Every named config: the sweep presets, then the boards."""
    return preset_names() + board_names()


def resolve_config(spec: str | HwConfig | None) -> HwConfig:
    """A config from a sweep preset or board name, a .toml/.json path, an HwConfig, or None
    (the default)."""
    if isinstance(spec, str) and spec in board_names():
        return board(spec).config
    is_name = isinstance(spec, str) and not spec.endswith((".toml", ".json"))
    if is_name and spec not in preset_names():
        raise ConfigError(f"unknown config {spec!r}; valid: {', '.join(config_names())}")
    return resolve(spec)
