"""HwConfig: VTA defaults, derived sizes, identity digests, validation, files and presets."""

from __future__ import annotations

import json

import pytest

from tilecraft.errors import ConfigError, TilecraftError
from tilecraft.hw.config import ARCH_FIELDS, HwConfig, preset, preset_names, resolve

BUFFERS = ("uop", "inp", "wgt", "acc")


def test_defaults_are_vtas():
    c = HwConfig()
    assert (c.log_inp_width, c.log_wgt_width, c.log_acc_width) == (3, 3, 5)
    assert c.log_batch == 0
    assert (c.log_block_in, c.log_block_out) == (4, 4)
    assert (c.log_uop_buff, c.log_inp_buff, c.log_wgt_buff, c.log_acc_buff) == (15, 15, 17, 17)
    assert (c.inp_bits, c.wgt_bits, c.acc_bits, c.out_bits) == (8, 8, 32, 8)
    assert (c.batch, c.block_in, c.block_out) == (1, 16, 16)
    assert c.macs_per_cycle == 256
    assert c.axi_bytes == 8


def test_derived_sizes():
    c = HwConfig()
    assert c.uop_bytes == 4
    assert {b: c.depth(b) for b in BUFFERS} == {"uop": 8192, "inp": 2048, "wgt": 512, "acc": 2048}
    assert {b: c.elem_bytes(b) for b in (*BUFFERS, "out")} == {
        "uop": 4,
        "inp": 16,
        "wgt": 256,
        "acc": 64,
        "out": 16,
    }
    assert c.depth("out") == c.depth("acc")
    for b in BUFFERS:
        assert c.depth(b) * c.elem_bytes(b) == 1 << getattr(c, f"log_{b}_buff")


@pytest.mark.parametrize("method", ["depth", "elem_bytes"])
def test_unknown_buffer_name(method):
    with pytest.raises(ConfigError, match="unknown buffer 'psum'"):
        getattr(HwConfig(), method)("psum")


def test_tag():
    assert HwConfig().tag == "1x16x16_i8w8a32_15_15_17_17"
    assert preset("2x16x16").tag == "2x16x16_i8w8a32_15_16_18_18"
    assert HwConfig(log_inp_width=4, log_acc_width=5).tag.split("_")[1] == "i16w8a32"


def test_digest_stable_and_field_sensitive():
    a, b = HwConfig(), HwConfig()
    assert a.digest == b.digest
    assert len(a.digest) == 16
    int(a.digest, 16)
    assert HwConfig(clock_mhz=100).digest == a.digest  # int MHz is normalised to float
    assert HwConfig(dram_latency=33).digest != a.digest
    assert HwConfig(log_acc_buff=18).digest != a.digest


def test_arch_digest_ignores_timing_fields():
    base = HwConfig()
    for timing in (
        base.replace(clock_mhz=250.0),
        base.replace(axi_data_bits=128),
        base.replace(dram_latency=64, burst_len=8),
    ):
        assert timing.digest != base.digest
        assert timing.arch_digest == base.arch_digest
        assert base.arch_mismatches(timing) == []
    blocked = base.replace(log_block_in=3)
    assert blocked.arch_digest != base.arch_digest
    assert base.arch_mismatches(blocked) == ["log_block_in: 4 != 3"]
    assert "clock_mhz" not in ARCH_FIELDS


def test_config_is_frozen_and_hashable():
    c = HwConfig()
    with pytest.raises(AttributeError):
        c.log_batch = 1  # type: ignore[misc]
    assert {c: 1}[HwConfig()] == 1


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"log_block_in": 7}, r"log_block_in must be in \[1, 6\], not 7"),
        ({"log_acc_width": 3}, r"log_acc_width must be in \[4, 5\], not 3"),
        ({"log_uop_buff": 21}, r"log_uop_buff must be in \[8, 20\], not 21"),
        ({"dram_latency": 0}, r"dram_latency must be in \[1, 4096\], not 0"),
        ({"log_batch": 1.5}, r"log_batch must be an integer, not 1\.5"),
        ({"log_batch": "1"}, r"log_batch must be an integer, not '1'"),
        ({"log_batch": True}, r"log_batch must be an integer, not True"),
        ({"burst_len": False}, r"burst_len must be an integer, not False"),
        ({"clock_mhz": True}, r"clock_mhz must be a number of MHz, not True"),
        ({"clock_mhz": "100"}, r"clock_mhz must be a number of MHz, not '100'"),
        ({"clock_mhz": 0.5}, r"clock_mhz must be in \[1, 2000\], not 0\.5"),
        ({"clock_mhz": float("nan")}, r"clock_mhz must be in \[1, 2000\], not nan"),
        ({"axi_data_bits": 96}, r"axi_data_bits must be a power of two .*not 96"),
        ({"axi_data_bits": 2048}, r"axi_data_bits must be in \[32, 1024\], not 2048"),
    ],
)
def test_bad_value_names_field_and_value(changes, pattern):
    with pytest.raises(ConfigError, match=pattern):
        HwConfig(**changes)


def test_accumulator_must_be_wider_than_operands():
    with pytest.raises(ConfigError, match=r"log_acc_width .*\(16/8 bits\), not 16 bits"):
        HwConfig(log_inp_width=4, log_acc_width=4)
    with pytest.raises(ConfigError, match=r"log_acc_width .*\(8/16 bits\), not 16 bits"):
        HwConfig(log_wgt_width=4, log_acc_width=4)
    assert HwConfig(log_acc_width=4).acc_bits == 16  # 16 > 8: fine


def test_buffer_must_hold_two_elements():
    msg = r"log_wgt_buff=8 holds 1 element\(s\) of 256 bytes; .*\(log_wgt_buff >= 9\)"
    with pytest.raises(ConfigError, match=msg):
        HwConfig(log_wgt_buff=8)
    with pytest.raises(ConfigError, match=r"log_acc_buff=8 holds 0 element\(s\) of 512 bytes"):
        HwConfig(log_batch=1, log_block_out=6, log_acc_buff=8, log_wgt_buff=24)
    assert HwConfig(log_wgt_buff=9).depth("wgt") == 2


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        HwConfig(log_batch=9)
    assert issubclass(ConfigError, TilecraftError)


def test_from_dict_and_replace_reject_unknown_fields():
    with pytest.raises(ConfigError, match=r"unknown config field\(s\) bogus, zzz; valid: .*"):
        HwConfig.from_dict({"bogus": 1, "zzz": 2, "log_batch": 0})
    with pytest.raises(ConfigError, match=r"unknown config field\(s\) block"):
        HwConfig().replace(block=4)
    assert HwConfig.from_dict(HwConfig().to_dict()) == HwConfig()
    assert HwConfig().replace(log_batch=1).batch == 2


@pytest.mark.parametrize("suffix", [".toml", ".json"])
@pytest.mark.parametrize("name", ["default", "1x32x32", "1x16x8"])
def test_save_load_round_trip(tmp_path, suffix, name):
    cfg = preset(name)
    path = tmp_path / f"cfg{suffix}"
    cfg.save(path)
    loaded = HwConfig.load(path)
    assert loaded == cfg
    assert loaded.digest == cfg.digest
    assert not list(tmp_path.glob("*.tmp"))
    if suffix == ".json":
        assert json.loads(path.read_text()) == cfg.to_dict()
    else:
        assert cfg.tag in path.read_text()


def test_load_accepts_hw_table(tmp_path):
    path = tmp_path / "board.toml"
    path.write_text('[board]\npart = "x"\n\n[hw]\nlog_batch = 1\nclock_mhz = 200\n')
    assert HwConfig.load(path) == HwConfig(log_batch=1, clock_mhz=200.0)


def test_save_bad_suffix(tmp_path):
    with pytest.raises(ConfigError, match=r"must end in \.toml or \.json, not 'c\.yaml'"):
        HwConfig().save(tmp_path / "c.yaml")
    assert not list(tmp_path.iterdir())


def test_load_bad_suffix(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("log_batch: 1\n")
    with pytest.raises(ConfigError, match=r"must end in \.toml or \.json, not 'c\.yaml'"):
        HwConfig.load(path)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("c.toml", "log_batch = = 1\n"),
        ("c.json", '{"log_batch": 1,'),
        ("c.toml", b"\xff\xfe log_batch = 1"),
    ],
)
def test_load_unparsable(tmp_path, name, text):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ConfigError, match=r"config file '.*c\.(toml|json)' does not parse"):
        HwConfig.load(path)


def test_fields_beside_a_board_files_hw_table_are_refused(tmp_path):
    """A board preset file keeps the config under [hw] beside its own tables; a field left
    outside [hw] would not be read, so it is named, not ignored."""
    path = tmp_path / "c.toml"
    path.write_text("log_block_in = 3\ntypo = 9\n[board]\nname = 'x'\n[hw]\nclock_mhz = 200.0\n")
    with pytest.raises(ConfigError, match=r"outside its \[hw\] table.*: log_block_in, typo; move"):
        HwConfig.load(path)
    path.write_text("[board]\nname = 'x'\n[hw]\nclock_mhz = 200.0\n")
    assert HwConfig.load(path).clock_mhz == 200.0


def test_load_non_table_and_bad_values(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="must hold a table of fields"):
        HwConfig.load(path)
    path.write_text('{"log_block_out": 9}')
    with pytest.raises(ConfigError, match=r"log_block_out must be in \[1, 6\], not 9"):
        HwConfig.load(path)
    path.write_text('{"log_blok_out": 3}')
    with pytest.raises(ConfigError, match="unknown config field.*log_blok_out"):
        HwConfig.load(path)


def test_load_unreadable(tmp_path):
    with pytest.raises(ConfigError, match=r"cannot read config file '.*nope\.toml': No such file"):
        HwConfig.load(tmp_path / "nope.toml")
    folder = tmp_path / "dir.json"
    folder.mkdir()
    with pytest.raises(ConfigError, match="cannot read config file"):
        HwConfig.load(folder)


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads(name):
    cfg = preset(name)
    assert isinstance(cfg, HwConfig)
    assert resolve(name) == cfg
    assert cfg.tag in cfg.describe()
    for b in BUFFERS:
        assert cfg.depth(b) >= 2


def test_preset_names():
    names = preset_names()
    assert names[0] == "default"
    assert set(names) == {"default", "1x8x8", "2x16x16", "1x32x32", "1x16x8"}


def test_unknown_preset_lists_valid_names():
    with pytest.raises(
        ConfigError, match=r"unknown preset 'pynq-z1'; valid: default, 1x8x8, 2x16x16"
    ):
        preset("pynq-z1")


def test_sweep_presets():
    assert (preset("1x8x8").block_in, preset("1x8x8").block_out) == (8, 8)
    assert preset("2x16x16").batch == 2
    assert preset("1x32x32").axi_data_bits == 128
    assert preset("1x16x8").block_out == 8
    assert preset() == HwConfig()


def test_resolve(tmp_path):
    assert resolve(None) == HwConfig()
    assert resolve("1x8x8") == preset("1x8x8")
    cfg = HwConfig(log_batch=1, clock_mhz=150.0)
    assert resolve(cfg) is cfg
    for suffix in (".toml", ".json"):
        path = tmp_path / f"c{suffix}"
        cfg.save(path)
        assert resolve(str(path)) == cfg
    with pytest.raises(ConfigError, match="cannot read config file"):
        resolve(str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="unknown preset 'missing'"):
        resolve("missing")


def test_describe():
    text = HwConfig().describe()
    assert "1x16x16_i8w8a32_15_15_17_17" in text
    assert "256 MAC/cycle, 51.2 GOPS peak" in text
    assert "wgt buffer       128 KiB = 512 x 256 B" in text
    assert "cycle model" not in text  # the queues the model is held to the RTL at


def test_describe_says_where_the_cycle_model_drifts_from_the_rtl():
    """Short command queues fill on real layers, where the model's cycles drift from the RTL's
    (the benchmarks README's rtl-speed section): a config with them says so."""
    from dataclasses import replace

    from tilecraft.hw.config import CALIBRATED_CMD_QUEUE_DEPTH

    assert HwConfig().cmd_queue_depth == CALIBRATED_CMD_QUEUE_DEPTH
    text = replace(HwConfig(), cmd_queue_depth=4).describe()
    assert "at 4 they fill on real layers" in text
    assert "rtl-speed" in text


def test_config_file_with_a_non_table_hw_key(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"hw": 5}')
    with pytest.raises(ConfigError, match="must hold a table of fields"):
        HwConfig.load(path)


def test_the_requantization_unit_is_absent_by_default_and_leaves_identities_alone():
    cfg = HwConfig()
    unit = cfg.replace(requant_lanes=8)
    assert cfg.requant_lanes == 0 and "requant_lanes" not in cfg.to_dict()
    # the digests every config had before the knob existed (a saved program still loads)
    assert cfg.digest == "10f5588f2cf06e8d" and cfg.arch_digest == "d61880a7c7a7ae0b"
    assert unit.tag == cfg.tag + "_rq8" and unit.digest != cfg.digest
    assert unit.arch_digest != cfg.arch_digest
    assert unit.arch_mismatches(cfg) == ["requant_lanes: 8 != 0"]
    assert HwConfig.from_dict(unit.to_dict()) == unit
    assert cfg.with_requant_unit() == unit.replace(requant_residual=1)  # the bus's 8 bytes
    assert preset("1x16x8").with_requant_unit().requant_residual == 0  # (square blocks only)
    residual = unit.with_requant_residual()
    assert residual.tag == unit.tag + "_rr" and "requant_residual" not in unit.to_dict()
    assert residual.arch_mismatches(unit) == ["requant_residual: 1 != 0"]
    assert cfg.replace(axi_data_bits=32).with_requant_unit().requant_lanes == 4
    assert preset("1x32x32").replace(axi_data_bits=1024).with_requant_unit().requant_lanes == 32


@pytest.mark.parametrize(
    "lanes, message",
    [
        (3, r"0 \(no requantization unit\) or a power of two up to BATCH x BLOCK_OUT = 16"),
        (32, r"0 \(no requantization unit\) or a power of two up to BATCH x BLOCK_OUT = 16"),
        (65, r"in \[0, 64\]"),
        (-1, r"in \[0, 64\]"),
    ],
)
def test_requant_lanes_must_be_a_power_of_two_up_to_a_row(lanes, message):
    with pytest.raises(ConfigError, match=rf"requant_lanes must be {message}.*, not {lanes}"):
        HwConfig(requant_lanes=lanes)


def test_a_config_spec_of_another_type_is_named():
    from tilecraft.hw.config import require_config

    for bad in (5, ["x"], 2.0):
        with pytest.raises(ConfigError, match="a config is an HwConfig, a preset or board name"):
            resolve(bad)
    with pytest.raises(ConfigError, match="device's config must be an HwConfig"):
        require_config("1x8x8", "the device's config")
    assert require_config(preset("1x8x8")) == preset("1x8x8")
