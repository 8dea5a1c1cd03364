"""The resnet18-layers suite's roofline plot (the `plot` extra)."""

from __future__ import annotations

import pytest

from tilecraft.benchmarks import resnet18_layers as bench
from tilecraft.cli import main

LAYERS = [
    {"name": "A", "H": 16, "W": 16, "IC": 3, "OC": 16, "K": 7, "S": 2, "P": 3},
    {"name": "B", "H": 8, "W": 8, "IC": 32, "OC": 32, "K": 3, "S": 1, "P": 1},
]


def test_the_roofline_plot_is_a_png_of_every_layer(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    result = bench.run(layers=LAYERS, check=False)
    assert result["macs_per_cycle"] == 256 and result["dram_bytes_per_cycle"] == 8
    path = tmp_path / "roofline.png"
    bench.plot(result, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_plot_is_only_for_the_cycle_model_suite(tmp_path, capsys):
    assert main(["bench", "sim-speed", "--plot", str(tmp_path / "x.png")]) == 1
    assert "--plot is for resnet18-layers and rtl-speed, not sim-speed" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_on_a_config_with_the_unit_the_layers_requantize_on_it():
    """The layers' epilogue is what the compiler lowers a quantized layer to on the config: a
    rounding shift on the ALU, or a bias and float32 multipliers on the requantization unit;
    either is bit-exact with the reference."""
    from tilecraft.hw.config import preset

    unit = preset("1x8x8").with_requant_unit()
    plain = bench.run(cfg=preset("1x8x8"), layers=LAYERS)
    result = bench.run(cfg=unit, layers=LAYERS)
    assert "float32 scale (requantization unit)" in result["epilogue"]
    assert "float32" not in plain["epilogue"]
    assert result["all_bit_exact"] and plain["all_bit_exact"]
    assert result["config"] == unit.tag


def test_the_roofline_is_taken_over_the_reduction_padded_to_the_array():
    """Layer A's folded reduction, 3 x 7 x 7 = 147 channels, takes 160 of the array's lanes (10
    blocks of 16): its compute bound is 8x8 pixels x 16 outputs x 160 / 256 = 640 cycles, not
    the 588 its MACs alone would give; B's 32 channels fill two blocks, so its bound is its
    MACs'."""
    result = bench.run(layers=LAYERS, check=False)
    a, b = result["layers"]
    assert a["folded"] and a["ideal_cycles"] == 8 * 8 * 16 * 147 / 256
    assert a["padded_ideal_cycles"] == 640
    assert b["padded_ideal_cycles"] == b["ideal_cycles"] == 8 * 8 * 32 * 32 * 9 / 256
    for x in (a, b):
        dram = sum(x["dram_bytes"].values()) / 8
        assert x["roofline_cycles"] == max(x["padded_ideal_cycles"], dram)
        assert x["roofline_fraction"] == x["roofline_cycles"] / x["cycles"]
    macs = a["macs"] + b["macs"]
    weighted = (a["macs"] * a["roofline_fraction"] + b["macs"] * b["roofline_fraction"]) / macs
    assert result["mac_weighted_roofline_fraction"] == pytest.approx(weighted)


def test_a_config_without_the_unit_is_measured_with_its_twin_with_the_unit():
    """One record holds what the unit buys: the same layers and data on the twin, whose own run
    has no twin."""
    result = bench.run(layers=LAYERS)
    twin = result["with_unit"]
    assert twin["config"] == bench.HwConfig().with_requant_unit().tag
    assert [x["name"] for x in twin["layers"]] == ["A", "B"]
    assert twin["all_bit_exact"] and result["ok"]
    assert "with_unit" not in bench.run(cfg=bench.HwConfig().with_requant_unit(), layers=LAYERS)
    assert f"resnet18-layers on {twin['config']} (epilogue: bias" in bench.format_table(result)
