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
