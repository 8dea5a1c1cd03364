"""The overlay's block design: fabric clock divisors, PS settings, refusals."""

from __future__ import annotations

import pytest

from tilecraft.boards import board
from tilecraft.boards.block_design import block_design, fabric_clock
from tilecraft.errors import ConfigError
from tilecraft.hw.config import preset


@pytest.mark.parametrize(
    ("pll", "mhz"),
    [(1000.0, 100.0), (1000.0, 50.0), (1500.0, 300.0), (1500.0, 100.0), (1000.0, 142.857)],
)
def test_fabric_clock_divides_the_pll(pll, mhz):
    c = fabric_clock(pll, mhz)
    assert 1 <= c.divisor0 <= 63 and 1 <= c.divisor1 <= 63
    assert c.mhz == pytest.approx(pll / (c.divisor0 * c.divisor1))
    assert abs(c.mhz - mhz) <= 0.01 * mhz


def test_an_unreachable_clock_names_the_nearest():
    with pytest.raises(
        ConfigError, match=r"333.0 MHz .* 1500.0 MHz PLL; the nearest are .*300, 375 MHz"
    ):
        fabric_clock(1500.0, 333.0)
    with pytest.raises(ConfigError, match="must be positive"):
        fabric_clock(1000.0, 0)


@pytest.mark.parametrize("name", ["pynq-z1", "zcu104"])
def test_ps_settings_carry_the_clock_and_ports(name):
    d = block_design(board(name))
    s = d.ps_settings()
    c = d.clock
    if d.zynqmp:
        assert d.ps_instance == "zynq_ultra_ps_e_0" and d.clock_pin == "pl_clk0"
        assert s["PSU__CRL_APB__PL0_REF_CTRL__DIVISOR0"] == str(c.divisor0)
        assert s["PSU__CRL_APB__PL0_REF_CTRL__SRCSEL"] == "IOPLL"
        assert s["PSU__SAXIGP2__DATA_WIDTH"] == "128"
    else:
        assert d.ps_instance == "processing_system7_0" and d.clock_pin == "FCLK_CLK0"
        assert s["PCW_FCLK0_PERIPHERAL_DIVISOR1"] == str(c.divisor1)
        assert s["PCW_S_AXI_HP0_DATA_WIDTH"] == "64"
    assert c.mhz == pytest.approx(d.config.clock_mhz)


def test_bad_designs_are_refused():
    z1 = board("pynq-z1")
    with pytest.raises(ConfigError, match="must be an identifier"):
        block_design(z1, name="my overlay")
    wide = preset("default").replace(axi_data_bits=128)
    with pytest.raises(
        ConfigError, match="S_AXI_HP0 is 64 bits wide; the config's AXI master is 128"
    ):
        block_design(z1, wide)
    fast = z1.config.replace(clock_mhz=140.0)
    with pytest.raises(ConfigError, match="cannot be divided"):
        block_design(z1, fast)
