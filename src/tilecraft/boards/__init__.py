"""Board presets: the part, clocks, AXI port and register base of each supported board, plus the
HwConfig overrides it needs. One TOML file per board in `presets/`. `resolve_config` names any
config: a sweep preset (`hw.config.preset`), a board, or a .toml/.json file."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from tilecraft.errors import ConfigError
from tilecraft.hw.config import HwConfig, preset_names, resolve, toml_loads


@dataclass(frozen=True)
class Board:
    """A board preset. `config` is the HwConfig the board's bitstream is built for."""

    name: str
    part: str
    family: str
    axi_port: str
    register_base: int
    description: str
    config: HwConfig


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
