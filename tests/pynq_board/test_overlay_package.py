"""The overlay package: PYNQ finds it through its entry point, and its example offloads a conv
and agrees with the host's result (on the simulated board)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("pynq.overlay")

from tilecraft.boards import board  # noqa: E402
from tilecraft.boards.block_design import block_design  # noqa: E402
from tilecraft.boards.flows.overlay_package import package_name, write_package  # noqa: E402
from tilecraft.compiler.operator.conv2d import conv2d  # noqa: E402
from tilecraft.hw.config import toml_loads  # noqa: E402
from tilecraft.ops import Conv2d, Epilogue  # noqa: E402


def test_the_example_offloads_a_conv_and_matches_the_host(
    tmp_path, make_board, monkeypatch, capsys
):
    design = block_design(board("pynq-z2"))
    example = conv2d(design.config, Conv2d(1, 16, 6, 6, 32, 3, 1, 1), Epilogue(shift=8))
    inner = write_package(design, tmp_path / "package", example)
    assert inner.name == package_name(design) == "tilecraft_overlay_pynq_z2"
    project = toml_loads((tmp_path / "package" / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pynq.overlays"] == {inner.name: inner.name}
    assert "*.hwh" in project["tool"]["setuptools"]["package-data"][inner.name]
    # what the build copies in after Vivado: the overlay's files
    (inner / "tilecraft.bit").write_bytes(b"")
    from tilecraft.boards.flows.hwh import write_hwh

    write_hwh(design, inner / "tilecraft.hwh")
    design.config.save(inner / "tilecraft.toml")
    fake = make_board(design)
    monkeypatch.syspath_prepend(str(tmp_path / "package"))
    monkeypatch.delitem(sys.modules, inner.name, raising=False)
    from importlib import import_module

    module = import_module(f"{inner.name}.example")
    assert module.main(seed=3) is True
    assert "cycles on the FPGA, equal to the host's result" in capsys.readouterr().out
    assert fake.accelerator.runs == 1
