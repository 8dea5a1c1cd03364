"""The `tilecraft` command, run in-process, and the sim-speed benchmark's result shape."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from tilecraft.benchmarks import sim_speed
from tilecraft.boards import config_names
from tilecraft.cli import main
from tilecraft.compiler.programs.blocked_gemm import blocked_gemm
from tilecraft.hw.config import HwConfig
from tilecraft.runtime import Program
from tilecraft.runtime.layout import logical_shape


@pytest.fixture
def program_file(tmp_path):
    return str(blocked_gemm(HwConfig(), 16, 32, 32).save(tmp_path / "p.tcp"))


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "usage: tilecraft" in capsys.readouterr().out


def test_unknown_command_exits():
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2


def test_config_show_default(capsys):
    assert main(["config", "show"]) == 0
    out = capsys.readouterr().out
    assert "tag     1x16x16_i8w8a32_15_15_17_17" in out
    assert f"digest  {HwConfig().digest}" in out
    assert "LOAD/STORE:" not in out


def test_config_show_board(capsys):
    assert main(["config", "show", "pynq-z1"]) == 0
    out = capsys.readouterr().out
    assert "clock_mhz        100.0" in out
    assert "axi_data_bits    64" in out


def test_config_show_file(tmp_path, capsys):
    path = tmp_path / "c.toml"
    HwConfig(log_batch=1, log_acc_buff=18).save(path)
    assert main(["config", "show", str(path)]) == 0
    assert "tag     2x16x16_" in capsys.readouterr().out


def test_config_show_list(capsys):
    assert main(["config", "show", "--list"]) == 0
    assert capsys.readouterr().out.split() == config_names()


def test_config_show_isa(capsys):
    assert main(["config", "show", "--isa"]) == 0
    out = capsys.readouterr().out
    for title in ("LOAD/STORE:", "GEMM:", "ALU:", "FINISH:", "micro-op (32 bits):"):
        assert title in out
    assert "[  2:  0] opcode" in out


def test_config_show_unknown(capsys):
    assert main(["config", "show", "nosuch"]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("error: unknown config 'nosuch'; valid: default")
    assert captured.out == ""


def test_example(tmp_path, capsys):
    prog, figures, trace = tmp_path / "p.tcp", tmp_path / "e.json", tmp_path / "t.json"
    argv = ["example", "--M", "32", "--K", "64", "--N", "64", "-o", str(prog)]
    assert main([*argv, "--json", str(figures), "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "blocked GEMM 32x64 . 64x64 int8 on 1x16x16_i8w8a32_15_15_17_17" in out
    assert out.count("bit-exact vs numpy") == 2
    assert "MISMATCHES" not in out
    assert f"program written to {prog}" in out

    data = json.loads(figures.read_text())
    for label in ("overlap", "serial"):
        assert data[label]["bit_exact"] is True
        assert data[label]["mismatches"] == 0
        assert data[label]["cycles"] > 0
        assert data[label]["report"]["cycles"] == data[label]["cycles"]
    assert data["overlap"]["cycles"] <= data["serial"]["cycles"]
    assert data["speedup"] == pytest.approx(data["serial"]["cycles"] / data["overlap"]["cycles"])
    assert (data["M"], data["K"], data["N"]) == (32, 64, 64)
    assert "programs" not in data

    events = json.loads(trace.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert slices
    assert {e["tid"] for e in slices} <= {1, 2, 3, 4, 5}
    assert all(e["dur"] >= 0 for e in slices)
    assert Program.load(prog).computation.op.m == 32


def test_example_bad_config(capsys):
    assert main(["example", "--config", "nosuch"]) == 1
    assert "error: unknown config 'nosuch'" in capsys.readouterr().err


def test_example_bad_shape(capsys):
    assert main(["example", "--M", "32", "--K", "60", "--N", "64"]) == 1
    assert "error: K = 60 must be a positive multiple of 16" in capsys.readouterr().err


def test_disasm(program_file, capsys):
    assert main(["disasm", program_file, "--uops"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    program = Program.load(program_file)
    assert lines[0].startswith(f"# {program.name}: config {program.config.tag}, ")
    assert "# input    a: int8[16, 2, 1, 16] at byte 0 (matrix of [16, 32])" in lines
    assert "# computes gemm M=16 K=32 N=32 >>8" in lines
    numbered = [line for line in lines if re.match(r"\s*\d+: ", line)]
    assert len(numbered) == len(program.insns)
    assert [int(line.split(":")[0]) for line in numbered] == list(range(len(program.insns)))
    assert numbered[0].startswith(" 0: ")  # right-aligned to the widest number
    assert "FINISH" in numbered[-1]
    assert "LOAD   UOP" in numbered[0]
    assert sum(line.startswith("uop ") for line in lines) == len(program.uops)


def test_sim_check(program_file, tmp_path, capsys):
    report, trace = tmp_path / "r.json", tmp_path / "t.json"
    assert main(["sim", program_file, "--check", "--json", str(report), "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "check c: bit-exact vs the reference" in out
    assert out.startswith("cycles ")
    data = json.loads(report.read_text())
    assert data["cycles"] > 0
    assert data["instructions"] == len(Program.load(program_file).insns)
    assert 0 < data["gemm_utilization"] <= 1
    assert any(e["ph"] == "X" for e in json.loads(trace.read_text())["traceEvents"])


def test_sim_with_inputs_file(program_file, tmp_path, capsys):
    program = Program.load(program_file)
    rng = np.random.default_rng(5)
    arrays = {
        b.name: rng.integers(-128, 128, logical_shape(b), dtype=np.int8) for b in program.inputs
    }
    path = tmp_path / "in.npz"
    np.savez(path, **arrays)
    assert main(["sim", program_file, "--inputs", str(path), "--check"]) == 0
    assert "bit-exact vs the reference" in capsys.readouterr().out
    np.savez(path, a=arrays["a"])
    assert main(["sim", program_file, "--inputs", str(path)]) == 1
    assert "missing ['b']" in capsys.readouterr().err
    assert main(["sim", program_file, "--inputs", str(tmp_path / "none.npz")]) == 1
    assert "none.npz' does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("npy"),
        pytest.param("cut"),
    ],
)
def test_sim_unreadable_inputs_file(program_file, tmp_path, capsys, kind):
    path = tmp_path / "in.npy"
    if kind == "npy":
        np.save(path, np.zeros(3, np.int8))
    else:
        np.savez(path.with_suffix(".npz"), a=np.zeros(512, np.int8))
        path.write_bytes(path.with_suffix(".npz").read_bytes()[:200])
    assert main(["sim", program_file, "--inputs", str(path)]) == 1
    assert (
        "in.npy' is not a readable input .npz (truncated or foreign file)"
        in capsys.readouterr().err
    )


def test_sim_truncated_file(program_file, capsys):
    with open(program_file, "rb") as fh:
        raw = fh.read()
    with open(program_file, "wb") as fh:
        fh.write(raw[: len(raw) // 2])
    assert main(["sim", program_file]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "truncated or foreign file" in err
    assert "Traceback" not in err


def test_sim_missing_file(tmp_path, capsys):
    assert main(["sim", str(tmp_path / "gone.tcp")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["disasm", str(tmp_path / "gone.tcp")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_sim_speed_result_shape():
    layer = {"name": "T", "H": 8, "W": 8, "IC": 16, "OC": 16, "K": 3, "S": 1, "P": 1}
    assert sim_speed.gemm_shape(layer) == (64, 144, 16)
    result = sim_speed.run(layers=[layer])
    for key in ("sim_seconds", "numpy_seconds", "ratio"):
        assert result[key] > 0, key
    assert result["suite"] == "sim-speed"
    assert result["config"] == HwConfig().tag
    (row,) = result["layers"]
    assert row["name"] == "T"
    assert row["gemm"] == [64, 144, 16]
    assert row["macs"] == 64 * 144 * 16
    assert row["instructions"] > 0
    assert result["ratio"] == pytest.approx(result["sim_seconds"] / result["numpy_seconds"])
    table = sim_speed.format_table(result)
    assert table.splitlines()[1].startswith("T ")
    assert "64x144x16" in table
    assert "(goal <= 2)" in table


def test_compile_conv2d_then_sim_check(tmp_path, capsys):
    out = str(tmp_path / "layer.tcp")
    args = [
        "compile",
        "conv2d",
        "--H",
        "9",
        "--W",
        "9",
        "--IC",
        "20",
        "--OC",
        "24",
        "--K",
        "3",
        "--S",
        "2",
        "--P",
        "1",
        "--bias",
        "--multiplier",
        "channel",
        "--relu",
        "-o",
        out,
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "schedule:" in text and "tile_oc=" in text and "verified" in text
    assert main(["sim", out, "--check", "--seed", "3"]) == 0
    assert "check output: bit-exact vs the reference" in capsys.readouterr().out


def test_compile_dense_with_inputs_and_explicit_schedule(tmp_path, capsys):
    out = str(tmp_path / "d.tcp")
    args = [
        "compile",
        "dense",
        "--M",
        "20",
        "--K",
        "40",
        "--N",
        "24",
        "--residual",
        "--params-as-inputs",
        "--schedule",
        "1,1,4,1,single",
        "-o",
        out,
    ]
    assert main(args) == 0
    assert "single buffer" in capsys.readouterr().out
    assert main(["sim", out, "--check"]) == 0
    assert "bit-exact" in capsys.readouterr().out


def test_compile_rejects_bad_schedules(tmp_path, capsys):
    out = str(tmp_path / "x.tcp")
    assert main(["compile", "conv2d", "--schedule", "4,4,56,56", "-o", out]) == 1
    err = capsys.readouterr().err
    assert "inp scratchpad: needs" in err and "exceeds by" in err
    assert main(["compile", "conv2d", "--schedule", "1,2", "-o", out]) == 1
    assert "expected TILE_OC,TILE_IC,TILE_OH,TILE_OW" in capsys.readouterr().err


def test_a_negative_schedule_reaches_the_schedule_check(tmp_path, capsys):
    out = str(tmp_path / "x.tcp")
    assert main(["compile", "conv2d", "--schedule", "-1,1,4,4", "-o", out]) == 1
    assert "tile_oc = -1 must be in 1..4" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["sim", "p.tcp", "--seed", "-1"], "--seed: expected a whole number >= 0, got '-1'"),
        (["compile", "dense", "--seed", "x", "-o", "o"], "--seed: expected a whole number >= 0"),
        (["compile", "dense", "--max-insns", "0", "-o", "o"], "--max-insns: expected a whole"),
        (["compile", "dense", "--max-insns", "-5", "-o", "o"], "a whole number >= 1, got '-5'"),
        (["tune", "dense", "--batch", "0"], "--batch: expected a whole number >= 1, got '0'"),
        (["tune", "dense", "--timeout", "0"], "--timeout: expected seconds > 0, got '0'"),
        (["tune", "dense", "--timeout", "nan"], "--timeout: expected seconds > 0, got 'nan'"),
        (
            ["run", "m.tcm", "--input", "x.npy", "--top-k", "0"],
            "--top-k: expected a whole number >= 1",
        ),
        (["bench", "rtl-speed", "--random", "-2"], "--random: expected a whole number >= 0"),
    ],
)
def test_counts_and_seeds_must_be_whole_numbers(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_output_paths_are_checked_before_any_work(tmp_path, capsys, monkeypatch):
    from tilecraft.benchmarks import sim_speed

    monkeypatch.setattr(sim_speed, "run", lambda *a, **k: pytest.fail("the benchmark ran"))
    assert main(["bench", "sim-speed", "--json", str(tmp_path)]) == 1
    assert "is a folder; give a file name inside it" in capsys.readouterr().err
    missing = str(tmp_path / "no" / "x.tcp")
    assert main(["compile", "dense", "-o", missing]) == 1
    assert f"the folder '{tmp_path / 'no'}' does not exist" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["hw", "verilog", "-o", str(tmp_path / "file")]) == 1
    assert "is a file; give a folder to write into" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_an_earlier_rtl_speed_result_is_checked_before_any_run(tmp_path, capsys, monkeypatch):
    from tilecraft.sim.rtl import device

    monkeypatch.setattr(device.RtlDevice, "run", lambda *a, **k: pytest.fail("the RTL ran"))
    missing = tmp_path / "none.json"
    assert main(["bench", "rtl-speed", "--random", "2", "--against", str(missing)]) == 1
    assert f"cannot read earlier result '{missing}'" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{not json")
    assert (
        main(["bench", "rtl-speed", "--random", "2", "--against", str(tmp_path / "bad.json")]) == 1
    )
    assert "is not JSON" in capsys.readouterr().err
    (tmp_path / "old.json").write_text('{"suite": "rtl-speed", "config": "x", "rtl_cycles": 5}')
    assert (
        main(["bench", "rtl-speed", "--random", "2", "--against", str(tmp_path / "old.json")]) == 1
    )
    assert "no recorded runs to compare with" in capsys.readouterr().err
    assert main(["bench", "sim-speed", "--against", str(tmp_path / "old.json")]) == 1
    assert "--against is for rtl-speed, not sim-speed" in capsys.readouterr().err


def test_resnet18_layers_result_shape():
    from tilecraft.benchmarks import resnet18_layers as bench

    layers = [
        {"name": "A", "H": 16, "W": 16, "IC": 3, "OC": 16, "K": 7, "S": 2, "P": 3},
        {"name": "B", "H": 8, "W": 8, "IC": 32, "OC": 32, "K": 3, "S": 1, "P": 1},
    ]
    result = bench.run(layers=layers)
    assert result["all_bit_exact"]
    a, b = result["layers"]
    assert a["folded"] and not b["folded"]
    for row in (a, b):
        assert row["on_accelerator"]
        assert row["ideal_cycles"] == row["macs"] / 256
        assert 0 < row["utilization"] <= 1
        assert row["utilization"] == pytest.approx(row["ideal_cycles"] / row["cycles"])
        assert row["utilization_no_overlap"] < row["utilization"]
        assert row["roofline_cycles"] >= row["ideal_cycles"]
        assert 0 < row["roofline_fraction"] <= 1
        assert set(row["dram_bytes"]) >= {"inp", "wgt", "out"}
    weighted = (a["macs"] * a["utilization"] + b["macs"] * b["utilization"]) / (
        a["macs"] + b["macs"]
    )
    assert result["mac_weighted_utilization"] == pytest.approx(weighted)
    assert result["min_roofline_fraction"] == min(a["roofline_fraction"], b["roofline_fraction"])
    table = bench.format_table(result)
    assert "MAC-weighted utilization" in table and "(taps folded)" in table


@pytest.mark.slow
def test_hw_verilog_writes_the_top_and_its_register_map(tmp_path, capsys):
    out = tmp_path / "rtl"
    assert main(["hw", "verilog", "--config", "1x8x8", "-o", str(out)]) == 0
    verilog = (out / "tilecraft_top.v").read_text()
    assert "module tilecraft_top" in verilog and "s_axi_control_awaddr" in verilog
    regmap = json.loads((out / "registers.json").read_text())
    assert regmap["CONTROL"]["offset"] == 0 and regmap["MAGIC"]["access"] == "r"
    assert "log_block_in = 3" in (out / "config.toml").read_text()


def test_hw_resources_refuses_an_unknown_part(capsys):
    assert main(["hw", "resources", "--config", "1x8x8", "--part", "xc9z999"]) == 1
    err = capsys.readouterr().err
    assert "unknown part 'xc9z999'; known: xc7z010, xc7z020, xc7z045, xck26, xczu3eg" in err


def test_resource_counting():
    from tilecraft.boards.flows.resources import Resources, count

    cells = {
        "LUT2": 10,
        "LUT6": 5,
        "RAM64M": 4,
        "FDRE": 30,
        "FDSE": 2,
        "DSP48E1": 3,
        "RAMB36E1": 2,
        "RAMB18E1": 3,
        "CARRY4": 9,
    }
    got = count(cells)
    assert got == {"lut": 15 + 4 * 4, "ff": 32, "dsp": 3, "bram36": 3.5, "uram": 0}
    ultrascale = count({"DSP48E2": 7, "RAMB36E2": 1, "RAMB18E2": 1, "URAM288": 2, "LUT3": 1})
    assert ultrascale == {"lut": 1, "ff": 0, "dsp": 7, "bram36": 1.5, "uram": 2}
    r = Resources("cfg", "xc7z020", **got, seconds=1.0)
    assert r.fractions()["dsp"] == 3 / 220
    assert "of     220" in r.format()


def test_resnet_on_rtl_refuses_unknown_layers(capsys):
    assert main(["bench", "resnet18-layers", "--rtl", "C4,C99"]) == 1
    assert "unknown layers ['C99']; the workload has C1..C11" in capsys.readouterr().err


def test_a_given_schedule_is_said_to_be_given(tmp_path, capsys):
    out = str(tmp_path / "x.tcp")
    layer = ["--H", "14", "--W", "14", "--IC", "32", "--OC", "32", "--K", "3", "--P", "1"]
    assert main(["compile", "conv2d", *layer, "--schedule", "1,1,2,7", "-o", out]) == 0
    text = capsys.readouterr().out
    assert "tile_oc=1: chosen by the given schedule (2 would fit)" in text
    assert "the cost model" not in text
    assert main(["compile", "conv2d", *layer, "-o", out]) == 0
    assert "chosen by the cost model" in capsys.readouterr().out


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path):
    """`tilecraft disasm P | head -1`: the pipe closes under the command's output (over 100
    KB here, more than a pipe holds, so the writes after the reader stops fail)."""
    import subprocess
    import sys

    program = tmp_path / "p.tcp"
    layer = ["--H", "112", "--W", "112", "--IC", "64", "--OC", "64", "--K", "3", "--P", "1"]
    assert main(["compile", "conv2d", *layer, "-o", str(program)]) == 0
    code = (
        f"import sys; from tilecraft.cli import main; sys.exit(main(['disasm', {str(program)!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert len(done.stdout) > 100_000  # what makes the pipe below overflow
    piped = subprocess.run(
        f'"{sys.executable}" -c "{code}" | head -1', shell=True, capture_output=True, text=True
    )
    assert piped.stdout.strip() and "Traceback" not in piped.stderr, piped.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["bench", "sim-speed", "--rtl", "C4"], "--rtl is for resnet18-layers, not sim-speed"),
        (["bench", "sim-speed", "--random", "3"], "--random is for rtl-speed, not sim-speed"),
        (["bench", "resnet18", "--layers", "C1"], "--layers is for tuner, not resnet18"),
        (["bench", "tuner", "--layers", "C99"], "unknown layers ['C99']; the workload has C1..C11"),
        (["bench", "tuner", "--layers", "C1,c2"], "unknown layers ['c2']"),
        (["bench", "tuner", "--save-tables", "t.txt"], "the tables are an .npz file"),
        (
            ["bench", "resnet18-layers", "--rtl", "C4", "--plot", "r.png"],
            "--plot draws the cycle model's figures; drop --rtl",
        ),
        (["hw", "timing", "--flow", "xilinx", "--seed", "3"], "--seed: for --flow ecp5"),
        (["hw", "timing", "--flow", "xilinx", "--seeds", "1,2"], "--seeds: for --flow ecp5"),
        (["hw", "timing", "--workers", "2"], "--workers: for --seeds (one route runs on one"),
        (["hw", "timing", "--seeds", "1,2", "--seed", "3"], "at each seed: drop --seed"),
        (["hw", "timing", "--seeds", "1", "--unit", "requant-lane"], "drop --unit"),
        (["dse", "--workers", "2", "--scheduler", "tcp://h:1"], "--workers (a local cluster) or"),
        (["dse", "--scheduler", "bogus"], "cannot reach the Dask scheduler 'bogus'"),
        (["build", "--board", "ulx3s-85f", "-o", "b", "--name", "x"], "--name: for Vivado"),
        (["build", "--board", "ulx3s-85f", "-o", "b", "--any-vivado"], "--any-vivado: for Viv"),
        (["build", "--board", "pynq-z1", "-o", "b", "--route-timeout", "5"], "for open-flow"),
    ],
)
def test_options_for_another_suite_or_flow_are_refused_before_any_work(args, message, capsys):
    assert main(args) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["hw", "timing", "--freq", "-5"], "--freq: expected a number > 0, got '-5'"),
        (["hw", "timing", "--freq", "nan"], "--freq: expected a number > 0, got 'nan'"),
        (["hw", "timing", "--route-timeout", "0"], "--route-timeout: expected seconds > 0"),
        (["hw", "timing", "--seeds", "1,-2"], "'-2' is not a seed: give whole numbers >= 0 or"),
        (["hw", "timing", "--seeds", "default,3,default"], "names a seed twice: give each once"),
        (["hw", "timing", "--seeds", "1", "--workers", "0"], "--workers: expected a whole number"),
        (["dse", "--workers", "-1"], "--workers: expected a whole number >= 0, got '-1'"),
    ],
)
def test_numbers_routes_and_sweeps_take_are_checked_by_the_parser(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_trace_is_json_and_a_schedule_has_one_order(tmp_path, capsys):
    out = str(tmp_path / "x.tcp")
    assert main(["example", "--trace", str(tmp_path / "t.png")]) == 1
    assert "a trace is JSON (Perfetto's format); name a .json file" in capsys.readouterr().err
    schedule = "1,1,2,7,spatial_outer,oc_outer"
    assert main(["compile", "conv2d", "--schedule", schedule, "-o", out]) == 1
    assert "names two loop orders, spatial_outer and oc_outer" in capsys.readouterr().err


def test_a_command_of_commands_given_none_shows_its_own_help(capsys):
    assert main(["hw"]) == 2
    assert "usage: tilecraft hw" in capsys.readouterr().out
    assert main(["models"]) == 2
    assert "usage: tilecraft models" in capsys.readouterr().out
    assert main([]) == 2
    assert "usage: tilecraft [-h]" in capsys.readouterr().out


def test_hw_restamp_names_what_it_stamped_and_what_to_measure_again(capsys, monkeypatch):
    import tilecraft.boards.fit as fit

    monkeypatch.setattr(
        fit,
        "restamp",
        lambda: [
            ("1x8x8", "ecp5", "stamped"),
            ("default", "xc7", "changed"),
            ("x", "xcup", "no design"),
        ],
    )
    assert main(["hw", "restamp"]) == 0
    out = capsys.readouterr().out
    assert "1x8x8 (ecp5): the same design: stamped with the tree's RTL" in out
    assert "default (xc7): its design changed: measure it again" in out
    assert "x (xcup): recorded without its design" in out
    assert "1 of 3 figures from other sources stamped" in out
