"""Board presets: the part, clocks, AXI port and register base of each supported board, plus the
HwConfig overrides it needs. One TOML file per board in `presets/`."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from tilecraft.errors import ConfigError


@dataclass(frozen=True)
class Board:
    """A board preset. `config` is the HwConfig the board's bitstream is built for."""

    name: str
    part: str
    family: str
    axi_port: str
    register_base: int
    description: str
    config: Any  # HwConfig (typed loosely to keep this module free of an import cycle)


def _preset_dir():
    return resources.files(__name__).joinpath("presets")


def board_names() -> list[str]:
    return sorted(p.name[:-5] for p in _preset_dir().iterdir() if p.name.endswith(".toml"))


def board(name: str) -> Board:
    """Load one board preset by name (e.g. `pynq-z1`)."""
    from tilecraft.hw.config import HwConfig, toml_loads

    names = board_names()
    if name not in names:
        raise ConfigError(f"unknown board {name!r}; valid: {', '.join(names)}")
    data = toml_loads(_preset_dir().joinpath(f"{name}.toml").read_text())
    try:
        info = data["board"]
        return Board(
            name=name,
            part=info["part"],
            family=info["family"],
            axi_port=info["axi_port"],
            register_base=int(info["register_base"]),
            description=info.get("description", ""),
            config=HwConfig.from_dict(data.get("hw", {})),
        )
    except KeyError as exc:
        raise ConfigError(f"board preset {name!r} lacks field {exc.args[0]!r}") from exc
