"""`tilecraft compile MODEL.onnx`, `tilecraft run`: the whole-network commands, and their
errors on bad input."""

import json

import numpy as np
import pytest
from network_models import quantized_by_onnxruntime, small_cnn, tiny_resnet

from tilecraft.cli import main


def test_compile_then_run(tmp_path, capsys):
    onnx_file = tmp_path / "tiny.onnx"
    onnx_file.write_bytes(tiny_resnet().SerializeToString())
    model = tmp_path / "tiny.tcm"
    summary = tmp_path / "tiny.json"
    argv = [
        "compile",
        str(onnx_file),
        "--config",
        "1x8x8",
        "--calib-random",
        "4",
        "--report",
        "3",
        "--requant",
        "exact",
        "-o",
        str(model),
        "--json",
        str(summary),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "1 accelerator program(s), 2 host step(s)" in out and "SQNR dB" in out
    # what it built, on the cycle model: the count `run` gives on the simulator
    built = json.loads(summary.read_text())
    cycles = built["modeled_cycles"]
    assert f"modeled: {cycles:,} accelerator cycles = {cycles / 1e5:.3f} ms at 100 MHz" in out
    assert built["programs"] == 1 and built["host_steps"] == 2 and built["clock_mhz"] == 100
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32))
    result = tmp_path / "y.npz"
    assert main(["run", str(model), "--input", str(x), "--top-k", "2", "-o", str(result)]) == 0
    out = capsys.readouterr().out
    assert f"accelerator: {cycles:,} cycles" in out and "top-2" in out
    assert np.load(result)["gemm_55_out"].shape == (1, 10)


def test_bad_input_is_named(tmp_path, capsys):
    onnx_file = tmp_path / "tiny.onnx"
    onnx_file.write_bytes(tiny_resnet().SerializeToString())
    assert main(["compile", str(onnx_file), "-o", str(tmp_path / "m.tcm")]) == 1
    assert "give calibration data" in capsys.readouterr().err
    bad = tmp_path / "calib.npy"
    np.save(bad, np.zeros((4, 3, 8, 8), np.float32))
    argv = ["compile", str(onnx_file), "--calib", str(bad), "-o", str(tmp_path / "m.tcm")]
    assert main(argv) == 1
    assert "calibration input 'input' has shape (4, 3, 8, 8)" in capsys.readouterr().err
    assert not (tmp_path / "m.tcm").exists()
    assert main(["run", str(tmp_path / "none.tcm"), "--input", str(bad)]) == 1


def test_dram_budget(tmp_path, capsys):
    onnx_file = tmp_path / "tiny.onnx"
    onnx_file.write_bytes(tiny_resnet().SerializeToString())
    argv = ["compile", str(onnx_file), "--calib-random", "1", "-o", str(tmp_path / "m.tcm")]
    assert main([*argv, "--dram-budget", "8K"]) == 1
    assert "bytes of DRAM" in capsys.readouterr().err and not (tmp_path / "m.tcm").exists()
    assert main([*argv, "--dram-budget", "1M"]) == 0


@pytest.mark.slow
def test_the_cpu_device_and_a_prebuilt_kernel_library(tmp_path, capsys, monkeypatch):
    """`compile --host-target x86_64` writes the model's kernels beside it; `run --device cpu`
    gives the reference's outputs, JIT-compiled or from that library."""
    import pytest

    pytest.importorskip("ziglang", reason="linking needs ziglang (the cross extra)")
    from tilecraft.runtime.cpu import this_machine

    monkeypatch.setenv("TILECRAFT_CACHE", str(tmp_path / "cache"))
    onnx_file = tmp_path / "tiny.onnx"
    onnx_file.write_bytes(tiny_resnet().SerializeToString())
    model = tmp_path / "tiny.tcm"
    argv = [
        "compile",
        str(onnx_file),
        "--calib-random",
        "1",
        "--report",
        "0",
        "--host-target",
        "x86_64",
        "-o",
        str(model),
    ]
    assert main(argv) == 0
    assert "host kernels for x86_64-unknown-linux-gnu" in capsys.readouterr().out
    assert (tmp_path / "tiny.kernels.so").exists() and (tmp_path / "tiny.kernels.json").exists()
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32))
    outs = {}
    library = ["--kernels", str(tmp_path / "tiny.kernels.json")]
    runs = {"reference": [], "cpu": [], "library": library}
    for name, extra in runs.items():
        device = "reference" if name == "reference" else "cpu"
        if name == "library" and this_machine() != "x86_64":
            continue
        out = tmp_path / f"{name}.npz"
        assert (
            main(["run", str(model), "--input", str(x), "--device", device, *extra, "-o", str(out)])
            == 0
        )
        outs[name] = np.load(out)["gemm_55_out"]
    assert "steps on the host's generated kernels" in capsys.readouterr().out
    for name, y in outs.items():
        np.testing.assert_array_equal(y, outs["reference"], err_msg=name)
    floats = tmp_path / "float.npz"  # the float network itself, on the float kernels
    assert (
        main(["run", str(onnx_file), "--input", str(x), "--device", "cpu", "-o", str(floats)]) == 0
    )
    assert "nodes on the host's kernels" in capsys.readouterr().out
    assert np.load(floats)["gemm_55_out"].shape == (1, 10)
    assert main(["run", str(onnx_file), "--input", str(x)]) == 1
    assert "runs in float on --device cpu, not 'sim'" in capsys.readouterr().err


def test_compile_conv2d_says_its_modeled_cycles(tmp_path, capsys):
    out_json = tmp_path / "c.json"
    argv = [
        "compile",
        "conv2d",
        "--H",
        "8",
        "--W",
        "8",
        "--IC",
        "16",
        "--OC",
        "32",
        "--relu",
        "-o",
        str(tmp_path / "c.tcp"),
        "--json",
        str(out_json),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    built = json.loads(out_json.read_text())
    assert f"modeled: {built['modeled_cycles']:,} accelerator cycles" in out
    assert main(["sim", str(tmp_path / "c.tcp"), "--json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["cycles"] == built["modeled_cycles"]


def test_a_quantized_models_float_path_is_onnxruntimes(tmp_path, capsys):
    """`run Q.onnx --device cpu` on a model onnxruntime quantized (uint8: its ReLUs dropped)
    prints onnxruntime's top classes, its Q/DQ nodes rounding as they say."""
    pytest.importorskip("llvmlite")
    ort = pytest.importorskip("onnxruntime")
    path = quantized_by_onnxruntime(small_cnn(), tmp_path / "q.onnx", "uint8")
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "y.npz"
    assert (
        main(
            [
                "run",
                str(path),
                "--input",
                str(tmp_path / "x.npy"),
                "--device",
                "cpu",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert "fake-quantized (" in capsys.readouterr().out
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(str(path), options).run(None, {"input": x})[0]
    (got,) = np.load(out).values()
    assert got.argmax() == want.argmax()
    from tilecraft.compiler.frontend import import_model

    graph = import_model(str(path))
    step = graph.scales[graph.outputs[0]]
    assert np.abs(got - want).max() <= 2.001 * step  # a float32 sum across a rounding edge


def test_run_takes_the_shape_options_and_says_where_they_belong(tmp_path, capsys):
    onnx_file = tmp_path / "tiny.onnx"
    onnx_file.write_bytes(tiny_resnet().SerializeToString())
    model = tmp_path / "tiny.tcm"
    assert (
        main(["compile", str(onnx_file), "--calib-random", "1", "--report", "0", "-o", str(model)])
        == 0
    )
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 3, 16, 16), np.float32))
    assert main(["run", str(model), "--input", str(x), "--input-shape", "input=1,3,16,16"]) == 1
    assert "give --input-shape to tilecraft compile" in capsys.readouterr().err


def test_bad_calibration_data_and_options_are_refused_before_the_compile(tmp_path, capsys):
    """Calibration data that is not finite, or holds no sample, is refused naming the file; a
    host target that does not exist or a records file that is missing is refused before the
    compile runs, and no model is left behind; a random calibration too large to hold is
    refused with its size."""
    onnx_file = tmp_path / "tiny.onnx"
    onnx_file.write_bytes(tiny_resnet().SerializeToString())
    model = tmp_path / "m.tcm"
    argv = ["compile", str(onnx_file), "-o", str(model)]
    for name, data, message in (
        ("nan.npy", np.full((2, 1, 3, 16, 16), np.nan, np.float32), "1,536 values that are NaN"),
        ("inf.npy", np.full((1, 3, 16, 16), np.inf, np.float32), "NaN or infinite"),
        ("empty.npy", np.zeros((0, 1, 3, 16, 16), np.float32), "holds no samples"),
    ):
        np.save(tmp_path / name, data)
        assert main([*argv, "--calib", str(tmp_path / name)]) == 1
        err = capsys.readouterr().err
        assert f"'{tmp_path / name}': calibration" in err and message in err, err
    assert main([*argv, "--calib-random", "1000000000"]) == 1
    assert "would take 5,722.0 GiB of float64 samples; at most 2 GiB" in capsys.readouterr().err
    assert main([*argv, "--calib-random", "1", "--host-target", "bogus"]) == 1
    assert "unknown kernel target 'bogus'; valid: host" in capsys.readouterr().err
    assert main([*argv, "--calib-random", "1", "--records", str(tmp_path / "no.jsonl")]) == 1
    assert "records file" in capsys.readouterr().err
    assert not model.exists()
    assert main([*argv, "--input-shape", "input=1,3,16,16", "--input-shape", "input=2,3,16,16"])
    assert "gives 'input' twice" in capsys.readouterr().err


def test_run_names_its_devices_and_the_pynq_overlay(tmp_path, capsys):
    onnx_file = tmp_path / "tiny.onnx"
    onnx_file.write_bytes(tiny_resnet().SerializeToString())
    model = tmp_path / "m.tcm"
    assert main(["compile", str(onnx_file), "--calib-random", "1", "-o", str(model)]) == 0
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 3, 16, 16), np.float32))
    capsys.readouterr()
    run = ["run", str(model), "--input", str(x)]
    assert main([*run, "--device", "bogus"]) == 1
    err = capsys.readouterr().err
    assert "unknown device 'bogus'; available:" in err and "pynq" in err and "reference" in err
    assert main([*run, "--device", "pynq"]) == 1
    assert "--device pynq needs --bitfile" in capsys.readouterr().err
    assert main([*run, "--bitfile", "x.bit"]) == 1
    assert "--bitfile is the pynq device's overlay, not the sim device's" in capsys.readouterr().err
