"""Board presets (boards/presets/*.toml) and naming any config by name or file."""

from __future__ import annotations

import pytest

from tilecraft.boards import board, board_names, config_names, resolve_config
from tilecraft.errors import ConfigError
from tilecraft.hw.config import HwConfig, preset, preset_names


def test_config_names_are_the_presets_then_the_boards():
    names = config_names()
    assert set(board_names()) == {"pynq-z1", "pynq-z2", "ultra96-v2", "zcu104"}
    assert names == preset_names() + board_names()
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(
    ("name", "part", "family", "clock", "axi"),
    [
        ("pynq-z1", "xc7z020clg400-1", "zynq7000", 100.0, 64),
        ("pynq-z2", "xc7z020clg400-1", "zynq7000", 100.0, 64),
        ("ultra96-v2", "xczu3eg-sbva484-1-i", "zynqmp", 333.0, 128),
        ("zcu104", "xczu7ev-ffvc1156-2-e", "zynqmp", 333.0, 128),
    ],
)
def test_board_presets(name, part, family, clock, axi):
    b = board(name)
    assert (b.name, b.part, b.family) == (name, part, family)
    assert b.config.clock_mhz == clock
    assert b.config.axi_data_bits == axi
    assert b.register_base in (0x43C00000, 0xA0000000)
    assert resolve_config(name) == b.config
    # Boards change timing only: a default-config program runs on every one of them.
    assert b.config.arch_digest == HwConfig().arch_digest


def test_unknown_names_list_the_valid_ones(tmp_path):
    with pytest.raises(
        ConfigError, match=r"unknown config 'nosuch'; valid: default, 1x8x8, .*zcu104"
    ):
        resolve_config("nosuch")
    with pytest.raises(ConfigError, match=r"unknown board 'nosuch'; valid: pynq-z1, "):
        board("nosuch")


def test_resolve_config_takes_every_kind(tmp_path):
    assert resolve_config(None) == HwConfig()
    assert resolve_config("1x8x8") == preset("1x8x8")
    cfg = preset("1x16x8")
    assert resolve_config(cfg) is cfg
    path = tmp_path / "c.toml"
    cfg.save(path)
    assert resolve_config(str(path)) == cfg
    with pytest.raises(ConfigError, match="cannot read config file"):
        resolve_config(str(tmp_path / "missing.toml"))
