"""`tilecraft build --board`: the Vivado project and block-design Tcl, and the build run through
a stand-in `vivado` on the PATH (version checks, failures, the outputs collected)."""

from __future__ import annotations

import pytest

from tilecraft.boards import board
from tilecraft.boards.block_design import block_design
from tilecraft.boards.flows.vivado import build, timing_gate, write_project
from tilecraft.errors import DeviceError
from tilecraft.hw.config import HwConfig


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pynq-z1", "zcu104"])
def test_the_project_describes_the_block_design(tmp_path, name):
    d = block_design(board(name))
    write_project(d, tmp_path)
    bd = (tmp_path / "bd.tcl").read_text()
    project = (tmp_path / "project.tcl").read_text()
    assert f"xilinx.com:ip:{d.board.ps.ip}:*" in bd
    assert "create_bd_cell -type module -reference tilecraft_top tilecraft_0" in bd
    control = f"Master /{d.ps_instance}/{d.control_port}"  # registers on the GP/HPM port
    assert f"{control} \\\n    Slave /tilecraft_0/s_axi_control " in bd
    assert f"Slave /{d.ps_instance}/{d.data_port}" in bd  # the master into DDR on HP
    # the interrupt reaches the PS only through the AXI interrupt controller PYNQ needs
    assert 'get_ipdefs "xilinx.com:ip:axi_intc:*"] end] axi_intc_0]' in bd
    assert "CONFIG.C_IRQ_CONNECTION {1}" in bd
    # its registers join the accelerator's interconnect rather than a second one on the master
    assert f"{control} \\\n    Slave /axi_intc_0/s_axi {{*}}$clocks intc_ip Auto]" in bd
    assert "[get_bd_pins tilecraft_0/interrupt] [get_bd_pins axi_intc_0/intr]\n" in bd
    assert f"[get_bd_pins axi_intc_0/irq] [get_bd_pins {d.ps_instance}/{d.interrupt_pin}]\n" in bd
    assert bd.count(f"{d.ps_instance}/{d.interrupt_pin}") == 1
    assert f"-offset 0x{d.register_base:08X} -range 64K" in bd
    intc = next(c for c in bd.split("assign_bd_address ") if "axi_intc_0/S_AXI/Reg" in c)
    assert intc.startswith(f"-offset 0x{d.intc_base:08X} -range 64K ")
    assert d.intc_base == (0xA0010000 if d.zynqmp else 0x41800000)
    assert "DIVISOR" not in bd  # Vivado derives the divisors from the frequency
    assert f"create_project -force tilecraft $here/vivado -part {d.board.part}" in project
    assert timing_gate(d) in project and "hw_handoff/tilecraft.hwh" in project
    assert project.index(timing_gate(d)) < project.index("file copy -force [lindex [glob")
    assert "set allow_timing_failure 0\n" in project
    assert HwConfig.load(tmp_path / "overlay" / "tilecraft.toml") == d.config
    assert (tmp_path / "tilecraft_top.v").read_text().count("module tilecraft_top") == 1
    assert (tmp_path / "build.sh").stat().st_mode & 0o111


@pytest.fixture
def quick_verilog(monkeypatch):
    """The runs below test the orchestration: skip generating the real Verilog (seconds)."""
    import tilecraft.boards.flows.vivado as vivado

    def export(cfg, folder):
        folder.mkdir(parents=True, exist_ok=True)
        stub = "module tilecraft_top();\nendmodule\n"
        return [vivado.write_atomic(folder / "tilecraft_top.v", stub)]

    monkeypatch.setattr(vivado, "export_verilog", export)


def _fake_vivado(folder, version, body, monkeypatch) -> None:
    """A `vivado` first on the PATH that reports `version` and otherwise runs `body` (sh) in
    its folder."""
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    folder.mkdir(exist_ok=True)
    script = folder / "vivado"
    script.write_text(
        f'#!/bin/sh\nif [ "$1" = "-version" ]; then echo "vivado v{version} (64-bit)"; exit 0; fi\n'
        f'echo "$@" > args.txt\n{body}\n'
    )
    script.chmod(0o755)


def test_without_vivado_it_stops_with_the_command(tmp_path, monkeypatch, quick_verilog):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    result = build(block_design(board("pynq-z2")), tmp_path / "p")
    assert result["ran"] is False
    assert result["reason"] == "Vivado is not on the PATH (the pynq-z2 needs 2024.1)"
    assert result["command"] == f"cd {tmp_path / 'p'} && ./build.sh"


def test_the_wrong_vivado_is_refused_unless_asked(tmp_path, monkeypatch, quick_verilog):
    made = "mkdir -p overlay && : > overlay/tilecraft.bit && : > overlay/tilecraft.hwh"
    _fake_vivado(tmp_path / "bin", "2023.2", made, monkeypatch)
    d = block_design(board("pynq-z1"))
    with pytest.raises(DeviceError, match=r"Vivado 2023.2 is on the PATH, but pynq-z1 .* 2024.1"):
        build(d, tmp_path / "p")
    result = build(d, tmp_path / "p", any_vivado=True)
    assert result["ran"] and result["vivado"] == "2023.2"
    args = (tmp_path / "p" / "args.txt").read_text()
    assert "-mode batch" in args and "-source project.tcl" in args


def test_a_failing_or_silent_vivado_is_reported(tmp_path, monkeypatch, quick_verilog):
    fails = "echo 'ERROR: [DRC 23-20] rule violation' > vivado.log; exit 1"
    _fake_vivado(tmp_path / "bin", "2024.1", fails, monkeypatch)
    d = block_design(board("pynq-z1"))
    with pytest.raises(DeviceError, match=r"(?s)Vivado failed \(1\).*DRC 23-20"):
        build(d, tmp_path / "p")
    _fake_vivado(tmp_path / "bin", "2024.1", "true", monkeypatch)
    with pytest.raises(DeviceError, match="Vivado finished but wrote no .bit, .hwh"):
        build(d, tmp_path / "q")


@pytest.mark.parametrize(
    "wns, whs, allow, handed_over",
    [
        (0.31, 0.05, 0, True),
        (-0.2, 0.1, 0, False),
        (0.2, -0.01, 0, False),
        (-0.2, 0.1, 1, True),
    ],
)
def test_the_timing_gate_hands_over_no_bit_for_a_missed_clock(
    tmp_path, wns, whs, allow, handed_over
):
    """The build script's gate, run in Tcl with Vivado's timing queries stood in for: a setup
    or hold miss stops it before the .bit is copied out, unless the build was asked to take
    it; its message names flags `tilecraft build` takes."""
    import re
    import shutil
    import subprocess

    from tilecraft.cli import build_parser

    tclsh = shutil.which("tclsh")
    if tclsh is None:
        pytest.skip("no tclsh here to run the build script's timing gate")
    d = block_design(board("pynq-z1"))
    script = tmp_path / "gate.tcl"
    script.write_text(
        f'proc get_timing_paths {{args}} {{ return [expr {{"-hold" in $args}}] }}\n'
        f"proc get_property {{name hold}} {{ expr {{$hold ? {whs} : {wns}}} }}\n"
        f"set allow_timing_failure {allow}\n{timing_gate(d)}\nputs handed-over\n"
    )
    done = subprocess.run([tclsh, str(script)], capture_output=True, text=True, timeout=60)
    assert (done.returncode == 0 and "handed-over" in done.stdout) is handed_over, done
    if wns < 0 or whs < 0:
        text = done.stdout + done.stderr
        assert f"timing is not met at 100 MHz (WNS {wns} ns, WHS {whs} ns)" in text
        build_flags = next(a for a in build_parser()._actions if a.dest != "help").choices["build"]
        known = {o for a in build_flags._actions for o in a.option_strings}
        assert set(re.findall(r"--[a-z][a-z-]*", text)) <= known
