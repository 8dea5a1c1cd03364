"""Endpoint slack from a routed SDF (boards/flows/sta.py), on small hand-written netlists whose
longest paths are worked out here by hand."""

from __future__ import annotations

import pytest

from tilecraft.boards.flows.sta import signal_name, summarize


def _ff(name: str, clk_to_q: int = 500, setup: int = 300) -> str:
    return f"""
  (CELL (CELLTYPE "TRELLIS_FF") (INSTANCE {name})
    (DELAY (ABSOLUTE (IOPATH CLK Q ({clk_to_q}:{clk_to_q}:{clk_to_q}) (0:0:0))))
    (TIMINGCHECK (SETUPHOLD (posedge DI) (posedge CLK) ({setup}:{setup}:{setup}) (0:0:0))))"""


def _lut(name: str, delay: int = 200) -> str:
    return f"""
  (CELL (CELLTYPE "TRELLIS_COMB") (INSTANCE {name})
    (DELAY (ABSOLUTE (IOPATH A F ({delay}:{delay}:{delay}) (0:0:0))
                     (IOPATH B F ({delay}:{delay}:{delay}) (0:0:0)))))"""


def _wire(a: str, b: str, ps: int) -> str:
    return f"    (INTERCONNECT {a} {b} (0:0:{ps}) (0:0:{ps}))\n"


# a (FF) -> lut1 -> lut2 -> c (FF);  b (FF) -> lut2;  ram (block RAM, 5.8 ns clock-to-out) -> d
NETLIST = (
    '(DELAYFILE (SDFVERSION "3.0") (TIMESCALE 1ps)\n'
    '  (CELL (CELLTYPE "top") (INSTANCE ) (DELAY (ABSOLUTE\n'
    + _wire("dut.x.a_TRELLIS_FF_Q/Q", "dut.x.c_TRELLIS_FF_Q_DI_LUT4_Z_1/A", 3000)
    + _wire("dut.x.c_TRELLIS_FF_Q_DI_LUT4_Z_1/F", "dut.x.c_TRELLIS_FF_Q_DI_LUT4_Z/A", 4000)
    + _wire("dut.x.b_TRELLIS_FF_Q_7/Q", "dut.x.c_TRELLIS_FF_Q_DI_LUT4_Z/B", 1000)
    + _wire("dut.x.c_TRELLIS_FF_Q_DI_LUT4_Z/F", "dut.x.c_TRELLIS_FF_Q/DI", 2000)
    + _wire("dut.mem.0.3/DOA0", "dut.x.d$12_TRELLIS_FF_Q/DI", 1500)
    + _wire("dut.x.a_TRELLIS_FF_Q/Q", "dut.x.e_TRELLIS_FF_Q/DI", 500)
    + "  )))"
    + _ff("dut.x.a_TRELLIS_FF_Q")
    + _ff("dut.x.b_TRELLIS_FF_Q_7")
    + _ff("dut.x.c_TRELLIS_FF_Q")
    + _ff("dut.x.d$12_TRELLIS_FF_Q")
    + _ff("dut.x.e_TRELLIS_FF_Q")
    + _lut("dut.x.c_TRELLIS_FF_Q_DI_LUT4_Z_1")
    + _lut("dut.x.c_TRELLIS_FF_Q_DI_LUT4_Z")
    + """
  (CELL (CELLTYPE "DP16KD") (INSTANCE dut.mem.0.3)
    (DELAY (ABSOLUTE (IOPATH CLKA DOA0 (5800:5800:5800) (5800:5800:5800)))))
)"""
)
# a -> c: 0.5 + 3.0 + 0.2 + 4.0 + 0.2 + 2.0 + setup 0.3 = 10.2 ns; b -> c is shorter (4.2 ns)
# mem -> d: 5.8 + 1.5 + 0.3 = 7.6 ns; a -> e: 0.5 + 0.5 + 0.3 = 1.3 ns


def test_every_endpoint_gets_its_longest_path():
    s = summarize(NETLIST, period_ns=10.0)
    assert s.endpoints == 3  # c, d, e (their DI pins)
    assert s.worst_ns == pytest.approx(10.2)
    assert s.failing == 1 and s.total_negative_slack_ns == pytest.approx(0.2)
    [g] = s.groups
    assert (g.start, g.end, g.endpoints) == ("dut.x.a", "dut.x.c", 1)
    assert g.worst_ns == pytest.approx(10.2)
    assert "1 of 3 endpoints miss 10 ns" in s.format() and "dut.x.a -> dut.x.c" in s.format()
    # 0.5 ns bins: e at 1.3 ns, d at 7.6, c at 10.2
    assert len(s.histogram) == 21 and sum(s.histogram) == 3
    assert s.histogram[2] == s.histogram[15] == s.histogram[20] == 1


def test_a_tighter_period_fails_more_endpoints_and_groups_them_by_signal():
    s = summarize(NETLIST, period_ns=5.0)
    assert s.failing == 2
    assert [(g.start, g.end) for g in s.groups] == [("dut.x.a", "dut.x.c"), ("dut.mem", "dut.x.d")]
    assert s.total_negative_slack_ns == pytest.approx(5.2 + 2.6)
    assert summarize(NETLIST, period_ns=20.0).groups == []


def test_cell_names_map_back_to_rtl_signals():
    assert signal_name("dut.core.alu.b_hit0_TRELLIS_FF_Q_3/Q") == "dut.core.alu.b_hit0"
    assert signal_name("dut.core.wgt_mem.0.20/DOB9") == "dut.core.wgt_mem"
    assert signal_name("dut.core.fetch.client.fifo.storage.0.28$DPRAM_COMB0/WRE") == (
        "dut.core.fetch.client.fifo.storage"
    )
    assert signal_name("dut.core.gemm.$signal$21_LUT4_Z/A") == "dut.core.gemm.$signal"


def test_an_empty_or_foreign_file_gives_no_endpoints():
    s = summarize('(DELAYFILE (SDFVERSION "3.0"))', period_ns=10.0)
    assert (s.endpoints, s.failing, s.worst_ns, s.groups) == (0, 0, 0.0, [])
