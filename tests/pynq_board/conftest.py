"""The PYNQ tests run PYNQ's own code (pynq 3.1, numpy 1.x) in a venv of their own
(`make test` makes `.venv-pynq`); where pynq is missing each module skips (its first line is
`pytest.importorskip("pynq.overlay")`: this folder is not named `pynq`, so it cannot pass for
the package). A `SimulatedBoard` stands in for the board: the overlay's
registers are served by the simulator, or by the Verilator model (test_pynq_rtl.py)."""

from __future__ import annotations

import pytest

from tilecraft.boards import board
from tilecraft.boards.block_design import block_design


def write_overlay(design, folder):
    """What a build leaves in an overlay folder: `.bit` (empty here: only a real download reads
    it), `.hwh` and the config `.toml`; returns the `.bit`'s path."""
    folder.mkdir(parents=True, exist_ok=True)
    bit = folder / f"{design.name}.bit"
    bit.write_bytes(b"")
    from tilecraft.boards.flows.hwh import write_hwh

    write_hwh(design, bit.with_suffix(".hwh"))
    design.config.save(bit.with_suffix(".toml"))
    return bit


@pytest.fixture
def make_board():
    """`make_board(design, **options)`: a SimulatedBoard, made PYNQ's active device."""
    import pynq

    from tilecraft.sim.pynq_board import SimulatedBoard

    had = "_active_device" in vars(pynq.Device)
    previous = vars(pynq.Device).get("_active_device")
    clocks = vars(pynq.Clocks).get("_real_instance")

    def forget_clocks():  # pynq.Clocks keeps the first device it drives (pynq/ps.py)
        if "_real_instance" in vars(pynq.Clocks):
            del pynq.Clocks._real_instance

    def make(design, **options):
        forget_clocks()
        fake = SimulatedBoard(
            design.config,
            design.register_base,
            zynqmp=design.zynqmp,
            pll_mhz=design.board.ps.pll_mhz,
            **options,
        )
        pynq.Device.active_device = fake
        return fake

    yield make
    forget_clocks()
    if clocks is not None:
        pynq.Clocks._real_instance = clocks
    if had:
        pynq.Device.active_device = previous
    else:
        del pynq.Device._active_device


@pytest.fixture
def overlay_of(tmp_path):
    """`overlay_of(board_name, config=None)`: that board's overlay design (of the board's
    config, or `config`) and its `.bit` path."""

    def make(name, config=None):
        design = block_design(board(name), config)
        return design, write_overlay(design, tmp_path / name)

    return make


@pytest.fixture
def pynq_z1(overlay_of):
    """The PYNQ-Z1 overlay's design and its `.bit` path."""
    return overlay_of("pynq-z1")


def pytest_collection_modifyitems(items):
    """PYNQ's driver for the accelerator tries to open its interrupt pin's UIO device, which
    only a board has: that warning says nothing about the code under test."""
    quiet = pytest.mark.filterwarnings("ignore:Interrupt interrupt not created:UserWarning")
    for item in items:
        item.add_marker(quiet)
