"""Depthwise conv2d on the accelerator (one diagonal weight block per channel block and tap):
compiled, verified and run on the simulator, bit-exact against the reference and against the
host kernel, which computes it another way."""

import dataclasses

import numpy as np
import pytest

from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.operator.pipeline import compile_operator
from tilecraft.errors import ProgramError, ScheduleError
from tilecraft.hw.config import preset
from tilecraft.hw.isa import MemId, Opcode, decode, encode, isa_for
from tilecraft.ops import DepthwiseConv2d, Epilogue
from tilecraft.ops import host as H
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs

EPILOGUES = [
    Epilogue(bias=True, multiplier="channel", shift=12, relu=True),
    Epilogue(bias=True, multiplier="channel", shift=20, acc_bounds=True, pre_shift=6),
    Epilogue(shift=6, residual=True),
]


def _case(seed: int):
    rng = np.random.default_rng(seed)
    k = int(rng.choice([1, 3, 3, 5]))
    op = DepthwiseConv2d(
        int(rng.integers(1, 3)),
        int(rng.integers(1, 50)),
        int(rng.integers(k, 12)),
        int(rng.integers(k, 12)),
        k,
        int(rng.choice([1, 2])),
        int(rng.integers(0, k // 2 + 1)),
        pad_value=(0, -128, 57)[seed % 3],
    )
    return op, EPILOGUES[seed % len(EPILOGUES)], rng


@pytest.mark.parametrize("config", ["default", "1x8x8", "2x16x16"])
@pytest.mark.parametrize("seed", range(6))
def test_random_depthwise_is_bit_exact(config, seed):
    op, ep, rng = _case(seed)
    w = rng.integers(-128, 128, op.weight_shape, dtype=np.int8)
    program = compile_operator(preset(config), op, ep, weight=w).program
    inputs = random_inputs(program, rng)
    result = get_device("sim").run(program, pack_inputs(program, inputs))
    outputs = unpack_outputs(program, result.outputs)
    ok, message = check_outputs(program, inputs, outputs)
    assert ok, f"{op.describe()} [{ep.describe()}] on {config}: {message}"
    if not ep.residual:  # the host kernel: windows and a per-channel einsum
        pads = (op.pad[0], op.pad[1], op.pad[0], op.pad[1])
        params = {k: v for k, v in inputs.items() if k not in ("input", "weight")}
        want = H.run(
            H.DepthwiseConv(op.kernel, op.stride, pads, ep, op.pad_value),
            [inputs["input"]],
            {"weight": w, **params},
        )
        np.testing.assert_array_equal(outputs["output"], want)


def test_each_tile_takes_one_channel_block_and_the_array_is_honestly_underused():
    from tilecraft.sim.simulator import model_report

    cfg = preset("default")
    op = DepthwiseConv2d(1, 64, 28, 28, 3, 1, 1)
    comp = compile_operator(cfg, op, EPILOGUES[0])
    assert comp.schedule.tile_oc == 1
    utilization = op.macs / (model_report(comp.program).cycles * cfg.block_in * cfg.block_out)
    assert 0.02 < utilization < 1 / cfg.block_out  # the diagonal: at most 1 product in 16


def test_a_config_without_square_blocks_is_refused_by_name():
    with pytest.raises(ScheduleError, match="BLOCK_IN == BLOCK_OUT.*has 16 and 8"):
        compile_operator(preset("1x16x8"), DepthwiseConv2d(1, 16, 6, 6, 3, 1, 1))
    with pytest.raises(ScheduleError, match="depthwise layer's taps are not folded"):
        compile_operator(preset("default"), DepthwiseConv2d(1, 16, 6, 6, 3, 1, 1), fold=True)


def _block_1_read_from_block_0(cfg):
    """A 32-channel 6x6 depthwise program whose first window of channel block 1 is loaded
    from block 0's plane."""
    program = compile_operator(cfg, DepthwiseConv2d(1, 32, 6, 6, 3, 1, 1), EPILOGUES[0]).program
    spec = isa_for(cfg)
    table = decode(spec, program.insns)
    plane = 6 * 6
    first = program.buffer("input").offset // cfg.elem_bytes("inp")
    loads = (table["opcode"] == Opcode.LOAD) & (table["mem"] == MemId.INP)
    k = int(np.flatnonzero(loads & (table["dram_base"] >= first + plane))[0])
    table[k]["dram_base"] -= plane
    return dataclasses.replace(program, insns=encode(spec, table))


def test_the_verifier_catches_a_block_read_from_the_wrong_channels():
    bad = _block_1_read_from_block_0(preset("default"))
    with pytest.raises(
        ProgramError,
        match="multiplies input channel block 0 with weights for input channel block 1",
    ):
        verify(bad)


# ---- on the GEMM core's depthwise mode (configs with `depthwise_window`) ---------------------
UNIT_EPILOGUE = Epilogue(bias=True, multiplier="float32", relu=True)


@pytest.mark.parametrize("config", ["default", "1x8x8", "2x16x16"])
@pytest.mark.parametrize("seed", range(6))
def test_random_depthwise_on_the_depthwise_mode_is_bit_exact(config, seed):
    """3x3 layers run on the mode (one DEPTHWISE a tile), the others as diagonal blocks."""
    op, ep, rng = _case(seed)
    cfg = preset(config).with_depthwise_mode(3)
    w = rng.integers(-128, 128, op.weight_shape, dtype=np.int8)
    program = compile_operator(cfg, op, ep, weight=w).program
    ops = decode(isa_for(cfg), program.insns)["opcode"]
    windowed = op.kernel == (3, 3)
    assert (ops == Opcode.DEPTHWISE).any() == windowed
    inputs = random_inputs(program, rng)
    result = get_device("sim").run(program, pack_inputs(program, inputs))
    ok, message = check_outputs(program, inputs, unpack_outputs(program, result.outputs))
    assert ok, f"{op.describe()} [{ep.describe()}] on {cfg.tag}: {message}"


@pytest.mark.parametrize("stride", [1, 2])
def test_the_mode_with_the_unit_runs_a_layer_in_fewer_cycles(stride):
    """MobileNetV2's 28x28 depthwise layer with its epilogue on the requantization unit: the
    mode needs no zeroing and streams each window once, where the diagonal blocks take 9
    micro-ops an output. The layer alone is bound by its DRAM traffic (docs/DEPTHWISE.md), so
    the gain is less than the array's: with the mode it is within a quarter of that bound."""
    from tilecraft.sim.simulator import model_report

    unit = preset("default").with_requant_unit()
    op = DepthwiseConv2d(1, 144, 56 // stride, 56 // stride, 3, stride, 1)
    cycles = {}
    for cfg in (unit, unit.with_depthwise_mode(3)):
        rng = np.random.default_rng(3)
        comp = compile_operator(
            cfg,
            op,
            UNIT_EPILOGUE,
            weight=rng.integers(-9, 9, op.weight_shape).astype(np.int8),
            bias=rng.integers(-999, 999, op.c),
            multiplier=rng.uniform(1e-3, 1e-2, op.c).astype(np.float32),
        )
        report = model_report(comp.program)
        cycles[cfg.depthwise_window] = report.cycles
        dram = sum(report.dram_bytes.values()) / cfg.axi_bytes  # the port's cycles
    assert cycles[3] < cycles[0] and cycles[3] < 1.25 * dram, (cycles, dram)
    if stride == 1:  # stride 2 reads four input pixels an output: the DRAM bound is near
        assert cycles[3] < 0.6 * cycles[0], cycles


def test_the_verifier_catches_a_depthwise_over_the_wrong_rows():
    bad = _block_1_read_from_block_0(preset("default").with_depthwise_mode(3))
    with pytest.raises(
        ProgramError,
        match="runs DEPTHWISE with channel block 1's weights over input channel block 0",
    ):
        verify(bad)
