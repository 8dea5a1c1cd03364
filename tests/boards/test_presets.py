"""Board presets (boards/presets/*.toml) and naming any config by name or file."""

from __future__ import annotations

import pytest

from tilecraft.boards import board, board_names, config_names, resolve_config
from tilecraft.errors import ConfigError
from tilecraft.hw.config import HwConfig, preset, preset_names


def test_config_names_are_the_presets_then_the_boards():
    names = config_names()
    assert set(board_names()) == {
        "kv260",
        "pynq-z1",
        "pynq-z2",
        "ulx3s-85f",
        "ultra96-v2",
        "zcu104",
    }
    assert names == preset_names() + board_names()
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(
    ("name", "part", "family", "clock", "axi", "cma", "pynq", "host"),
    [
        ("pynq-z1", "xc7z020clg400-1", "zynq7000", 100.0, 64, 128, "3.1", "armv7"),
        ("pynq-z2", "xc7z020clg400-1", "zynq7000", 100.0, 64, 128, "3.1", "armv7"),
        ("ultra96-v2", "xczu3eg-sbva484-1-i", "zynqmp", 300.0, 128, 128, "3.0", "aarch64"),
        ("zcu104", "xczu7ev-ffvc1156-2-e", "zynqmp", 300.0, 128, 512, "3.1", "aarch64"),
        ("kv260", "xck26-sfvc784-2LV-c", "zynqmp", 300.0, 128, 1000, "3.0", "aarch64"),
    ],
)
def test_board_presets(name, part, family, clock, axi, cma, pynq, host):
    b = board(name)
    assert (b.name, b.part, b.family, b.host) == (name, part, family, host)
    assert b.config.clock_mhz == clock
    assert b.config.axi_data_bits == axi
    assert (b.memory.cma_mib, b.pynq.release, b.pynq.python) == (cma, pynq, "3.10")
    zynqmp = family == "zynqmp"
    assert b.register_base == (0xA0000000 if zynqmp else 0x43C00000)
    assert b.ps.ip == ("zynq_ultra_ps_e" if zynqmp else "processing_system7")
    assert b.memory.address_bits == (40 if zynqmp else 32)
    assert resolve_config(name) == b.config
    # Boards change timing only: a default-config program runs on every one of them.
    assert b.config.arch_digest == HwConfig().arch_digest


def test_unknown_names_list_the_valid_ones(tmp_path):
    with pytest.raises(
        ConfigError, match=r"unknown config 'nosuch'; valid: default, 1x8x8, .*zcu104"
    ):
        resolve_config("nosuch")
    with pytest.raises(ConfigError, match=r"unknown board 'nosuch'; valid: kv260, pynq-z1, "):
        board("nosuch")


def test_a_preset_missing_a_field_or_with_the_wrong_ps_is_refused(tmp_path, monkeypatch):
    import tilecraft.boards as boards

    text = (boards._preset_dir() / "pynq-z1.toml").read_text()
    (tmp_path / "bad-a.toml").write_text(text.replace("cma_mib = 128", ""))
    (tmp_path / "bad-b.toml").write_text(text.replace('"processing_system7"', '"zynq_ultra_ps_e"'))
    monkeypatch.setattr(boards, "_preset_dir", lambda: tmp_path)
    with pytest.raises(ConfigError, match="board preset 'bad-a' lacks field 'cma_mib'"):
        board("bad-a")
    with pytest.raises(ConfigError, match="family 'zynq7000' needs the PS IP 'processing_system7'"):
        board("bad-b")


def test_part_families_name_the_resource_tables_parts():
    from tilecraft.boards.fit import PARTS

    assert {board(n).part_family for n in board_names()} <= set(PARTS)


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


def test_an_open_flow_board_has_pins_and_no_processing_system():
    b = board("ulx3s-85f")
    assert b.family == "ecp5" and b.ps is None and b.pynq is None and b.memory is None
    assert (b.open.package, b.open.speed, b.open.oscillator_mhz) == ("CABGA381", 6, 25.0)
    assert b.open.pins == {"clk": "G2", "din": "R1", "dout": "B2"}
    assert b.part_family == "LFE5U-85F" and b.config.clock_mhz == 100.0
    assert b.config.arch_digest == preset("1x8x8").arch_digest  # 16x16 takes every MULT18
