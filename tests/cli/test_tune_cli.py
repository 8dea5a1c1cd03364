"""`tilecraft tune`: a layer tuned with records, resumed, its best schedule applied by
`tilecraft compile --records`; and its errors on bad input."""

import json

import pytest

from tilecraft.cli import main

pytest.importorskip("xgboost", reason="the cost model needs xgboost (the tune extra)")
LAYER = ["--H", "8", "--W", "8", "--IC", "16", "--OC", "32", "--K", "3"]


def test_tune_resume_then_compile_with_the_records(tmp_path, capsys):
    records = tmp_path / "tune.jsonl"
    plot = tmp_path / "curve.png"
    assert (
        main(
            [
                "tune",
                "conv2d",
                *LAYER,
                "--trials",
                "12",
                "--records",
                str(records),
                "--plot",
                str(plot),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "best" in out and "12 measured" in out and plot.stat().st_size > 0
    assert main(["tune", "conv2d", *LAYER, "--trials", "5", "--records", str(records)]) == 0
    out = capsys.readouterr().out
    assert "12 of this layer" in out and "12 from the records" in out
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(lines) == 17 and len({r["schedule"] for r in lines}) == 17
    best = min((r for r in lines if r["cycles"]), key=lambda r: r["cycles"])
    program = tmp_path / "p.tcp"
    assert main(["compile", "conv2d", *LAYER, "--records", str(records), "-o", str(program)]) == 0
    out = capsys.readouterr().out
    assert "records: best schedule" in out
    chosen = json.loads(best["schedule"])
    assert f"tiles oc={chosen['tile_oc']} ic={chosen['tile_ic']}" in out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--trials", "0"], "--trials must be at least 1, not 0"),
        (["--measure", "fpga"], "unknown measurer 'fpga'; valid: sim, rtl"),
        (["--bitfile", "a.bit"], "--bitfile is for --measure pynq, not --measure sim"),
        (["--fpga"], "--fpga asks a Dask cluster for FPGAs: give --workers or --scheduler"),
        (["--plot", "p.txt"], "a plot is written as .png, .svg, .pdf (by the file's extension)"),
    ],
)
def test_bad_tune_requests(capsys, extra, message):
    assert main(["tune", "conv2d", *LAYER, *extra]) == 1
    assert message in capsys.readouterr().err


def test_tune_on_a_local_dask_cluster(tmp_path, capsys):
    pytest.importorskip("distributed", reason="distributed measurement needs dask")
    records = tmp_path / "tune.jsonl"
    assert (
        main(
            ["tune", "conv2d", *LAYER, "--trials", "8", "--workers", "2", "--records", str(records)]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "on 2 Dask worker(s) (a local cluster)" in out and "8 measured" in out
    assert len(records.read_text().splitlines()) == 8


def test_tune_a_model_then_compile_it_with_the_records(tmp_path, capsys):
    from network_models import tiny_resnet

    onnx_file = tmp_path / "tiny.onnx"
    onnx_file.write_bytes(tiny_resnet().SerializeToString())
    records = tmp_path / "tiny.jsonl"
    assert (
        main(
            [
                "tune",
                str(onnx_file),
                "--calib-random",
                "1",
                "--trials",
                "4",
                "--records",
                str(records),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    layers = [json.loads(line)["task"] for line in records.read_text().splitlines()]
    assert len(set(layers)) == out.count("4 measured") >= 5  # each distinct conv and dense
    assert (
        main(
            [
                "compile",
                str(onnx_file),
                "--calib-random",
                "1",
                "--report",
                "0",
                "--records",
                str(records),
                "-o",
                str(tmp_path / "m.tcm"),
            ]
        )
        == 0
    )


def test_tuning_a_model_takes_one_calibration(tmp_path, capsys):
    """As compile: --calib and --calib-random together was run on --calib alone."""
    argv = ["tune", str(tmp_path / "m.onnx"), "--calib", "c.npz", "--calib-random", "3"]
    assert main(argv) == 1
    assert "give --calib or --calib-random, not both" in capsys.readouterr().err


def test_tuning_every_layer_checks_its_trials_once(capsys):
    assert main(["tune", "resnet18-layers", "--trials", "0"]) == 1
    captured = capsys.readouterr()
    assert "--trials must be at least 1, not 0" in captured.err
    assert "C1:" not in captured.out  # said once, not as the first layer's error
