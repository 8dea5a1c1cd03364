"""The second zoo network end to end: MobileNetV2 (ReLU6 clips, inverted residuals, 17
depthwise convs as diagonal weight blocks), one accelerator program, bit-exact on sim; on a
config without square blocks its depthwise convs run on the host kernel."""

import numpy as np
import pytest

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.hw.config import preset
from tilecraft.hw.isa import Opcode, decode, isa_for
from tilecraft.models.zoo import mobilenet_v2
from tilecraft.ops import host as H
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model, steady_host_seconds
from tilecraft.runtime.model import AcceleratorStep, HostStep


@pytest.mark.parametrize(
    ("config", "programs", "host_depthwise"), [("default", 1, 0), ("1x16x8", 36, 17)]
)
@pytest.mark.slow
def test_mobilenet_v2_on_sim(config, programs, host_depthwise):
    graph = import_model(mobilenet_v2(seed=1, size=64))
    model = compile_network(graph, preset(config), random_calibration(graph, 1)).model
    host = [s for s in model.steps if isinstance(s, HostStep)]
    assert sum(isinstance(s.op, H.DepthwiseConv) for s in host) == host_depthwise
    # (1x16x8: split at each host step, and where a layer reads a tensor in another layout)
    assert sum(isinstance(s, AcceleratorStep) for s in model.steps) == programs
    x = {"input": np.random.default_rng(2).standard_normal((1, 3, 64, 64)).astype(np.float32)}
    sim = run_model(model, x, get_device("sim"), keep=True)
    ref = run_model(model, x, keep=True)
    for name, value in sim.tensors.items():
        np.testing.assert_array_equal(value, ref.tensors[name], err_msg=name)
    assert 0 < steady_host_seconds(model, sim, repeats=1) < np.inf  # every step re-timed


@pytest.mark.parametrize("config", ["default", "1x8x8"])
def test_a_network_on_the_requantization_unit(config):
    """On a config with the unit every conv without a residual requantizes on it (FLOAT32:
    no ALU pass but the zeroing), and every tensor of the network is the reference's on the
    simulator and on the cpu device; the same network without the unit takes more cycles."""
    from network_models import tiny_resnet

    from tilecraft.ops import Multiplier

    graph = import_model(tiny_resnet(seed=5, depthwise=True))
    calib = random_calibration(graph, 1)
    cfg = preset(config).replace(requant_lanes=8)
    model = compile_network(graph, cfg, calib).model
    eps = [c.epilogue for c in model.computations() if c.epilogue is not None]
    assert any(e.multiplier == Multiplier.FLOAT32 for e in eps)
    assert all(e.multiplier == Multiplier.FLOAT32 or e.residual for e in eps)
    x = {"input": np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    ref = run_model(model, x, keep=True)
    for device in ("sim", "cpu"):
        got = run_model(model, x, get_device(device), keep=True)
        assert set(model.outputs) <= set(got.tensors)
        for name, value in got.tensors.items():
            np.testing.assert_array_equal(value, ref.tensors[name], err_msg=f"{device}: {name}")
    plain = compile_network(graph, preset(config), calib).model
    with_unit = run_model(model, x, get_device("sim")).accelerator_cycles
    without = run_model(plain, x, get_device("sim")).accelerator_cycles
    assert with_unit < without


def test_onnxruntimes_rounding_everywhere_puts_the_adds_on_the_host(tmp_path):
    """exact_requant "onnxruntime" on a model onnxruntime quantized (uint8 activations): the
    convs and the average pool on the unit, the Adds on the host in QLinearAdd's x86 form (a
    `fixed` constant); the logits equal onnxruntime's own, on the simulator and the cpu
    device; refused on a config without the unit, naming it."""
    ort = pytest.importorskip("onnxruntime")
    from network_models import quantized_by_onnxruntime, tiny_resnet

    from tilecraft.errors import ModelError

    path = quantized_by_onnxruntime(tiny_resnet(seed=5), tmp_path / "q.onnx", "uint8")
    graph = import_model(str(path))
    cfg = preset("default").replace(requant_lanes=8)
    model = compile_network(graph, cfg, None, exact_requant="onnxruntime").model
    adds = [s.op for s in model.steps if isinstance(s, HostStep) and isinstance(s.op, H.Add)]
    assert adds and all(a.fixed is not None for a in adds)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options)
    rng = np.random.default_rng(6)
    for k in range(4):
        x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
        theirs = session.run(None, {"input": x})[0]
        for device in ("sim", "cpu"):
            ours = run_model(model, {"input": x}, get_device(device)).outputs[graph.outputs[0]]
            assert np.array_equal(ours, theirs), (k, device)
    with pytest.raises(ModelError, match=r"'onnxruntime' runs the convs on the requantization "
                       r"unit: config 1x16x16_i8w8a32_15_15_17_17 has none"):  # fmt: skip
        compile_network(graph, preset("default"), None, exact_requant="onnxruntime")


def _unit_twins() -> list[str]:
    """Every sweep and board preset whose twin with the unit is a config of its own."""
    from tilecraft.boards import board_names, resolve_config
    from tilecraft.hw.config import preset_names

    tags, names = set(), []
    for name in preset_names() + board_names():
        tag = resolve_config(name).with_requant_unit().tag
        if tag not in tags:
            tags.add(tag)
            names.append(name)
    return names


@pytest.mark.parametrize("name", _unit_twins())
def test_every_presets_twin_with_the_unit_is_bit_exact(name):
    """Each preset (sweep and board) with the requantization unit at its bus's pace: a
    residual network with a depthwise conv, every tensor the reference's on the simulator,
    in fewer cycles than on the preset itself."""
    from network_models import tiny_resnet

    from tilecraft.boards import resolve_config

    base = resolve_config(name)
    cfg = base.with_requant_unit()
    graph = import_model(tiny_resnet(seed=5, depthwise=True))
    calib = random_calibration(graph, 1)
    model = compile_network(graph, cfg, calib).model
    x = {"input": np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    ref = run_model(model, x, keep=True)
    got = run_model(model, x, get_device("sim"), keep=True)
    assert set(model.outputs) <= set(got.tensors)
    for tensor, value in got.tensors.items():
        np.testing.assert_array_equal(value, ref.tensors[tensor], err_msg=f"{cfg.tag}: {tensor}")
    plain = compile_network(graph, base, calib).model
    assert got.accelerator_cycles < run_model(plain, x, get_device("sim")).accelerator_cycles


@pytest.mark.parametrize("name", ["default", "1x8x8", "2x16x16"])
def test_the_depthwise_mode_runs_a_network_bit_exact_in_fewer_cycles(name):
    """A preset's twin with the unit and the depthwise mode for 3x3 windows: the network's
    depthwise conv on the mode, every tensor the reference's, in fewer cycles than on the
    twin with the unit alone."""
    from network_models import tiny_resnet

    unit = preset(name).with_requant_unit()
    cfg = unit.with_depthwise_mode(3)
    graph = import_model(tiny_resnet(seed=5, depthwise=True))
    calib = random_calibration(graph, 1)
    model = compile_network(graph, cfg, calib).model
    ops = np.concatenate([decode(isa_for(cfg), p.insns)["opcode"] for p in model.programs])
    assert (ops == Opcode.DEPTHWISE).sum() >= 1
    x = {"input": np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    ref = run_model(model, x, keep=True)
    got = run_model(model, x, get_device("sim"), keep=True)
    for tensor, value in got.tensors.items():
        np.testing.assert_array_equal(value, ref.tensors[tensor], err_msg=f"{cfg.tag}: {tensor}")
    plain = compile_network(graph, unit, calib).model
    assert got.accelerator_cycles < run_model(plain, x, get_device("sim")).accelerator_cycles


@pytest.mark.slow
def test_a_classifier_whose_unit_parameters_do_not_fit_requantizes_on_the_alu():
    """On 1x8x8 with half its buffers and the unit, a bank holds 256 accumulator rows and a
    1,000-class classifier's unit parameters take 375: that layer requantizes on the ALU (two
    rows per block), the convs stay on the unit, and the network runs bit-exact."""
    from tilecraft.hw.isa.requant import param_rows
    from tilecraft.models.zoo import resnet18
    from tilecraft.ops import Multiplier

    cfg = preset("1x8x8").replace(log_inp_buff=14, log_wgt_buff=15, log_acc_buff=14)
    cfg = cfg.replace(requant_lanes=8)
    assert param_rows(1000, cfg.block_out) == 375 > cfg.acc_bank_rows == 256
    graph = import_model(resnet18(seed=0, size=32))
    model = compile_network(graph, cfg, random_calibration(graph, 1)).model
    kinds = {
        (c.op.kind, c.epilogue.multiplier, c.epilogue.residual)
        for c in model.computations()
        if c.epilogue is not None
    }
    assert ("dense", Multiplier.CHANNEL, False) in kinds  # the classifier, on the ALU
    assert ("conv2d", Multiplier.FLOAT32, False) in kinds  # the convs, on the unit
    x = {"input": np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    got = run_model(model, x, get_device("sim"))
    want = run_model(model, x)
    for name in model.outputs:
        np.testing.assert_array_equal(got.outputs[name], want.outputs[name])
