"""Pooling on the accelerator: max pool and global average pool programs, bit-exact with the
reference on the simulator (random inputs, negative values included), and refused clearly where
the hardware cannot."""

import numpy as np
import pytest

from tilecraft.compiler.pool import compile_global_avgpool, compile_maxpool
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig, preset
from tilecraft.ops import Computation, GlobalAvgPool2d, MaxPool2d
from tilecraft.ops import host as H
from tilecraft.ops.reference import outputs
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs


def _run(program, seed=0):
    x = random_inputs(program, np.random.default_rng(seed))
    result = get_device("sim").run(program, pack_inputs(program, x))
    ok, message = check_outputs(program, x, unpack_outputs(program, result.outputs))
    assert ok, message
    return result.report


@pytest.mark.parametrize("config, op", [
    ("default", MaxPool2d(1, 64, 112, 112, 3, 2, (1, 1, 1, 1))),  # ResNet-18's
    ("default", MaxPool2d(1, 40, 13, 11, 2, 2)),
    ("default", MaxPool2d(1, 8, 9, 7, (3, 2), (1, 2), (2, 0, 1, 1))),
    ("1x8x8", MaxPool2d(2, 20, 10, 10, 3, 1, (1, 1, 1, 1))),
    ("2x16x16", MaxPool2d(3, 20, 8, 8, 3, 2, (1, 1, 1, 1))),
    ("default", MaxPool2d(1, 16, 9, 12, (2, 3), (1, 2))),
    ("1x8x8", MaxPool2d(1, 8, 14, 14, 4, 3, (1, 1, 1, 1))),
])  # fmt: skip
def test_maxpool_is_bit_exact(config, op):
    program = compile_maxpool(preset(config), op)
    report = _run(program)
    assert report.cycles > 0 and program.computation.op == op


@pytest.mark.parametrize("config, op", [
    ("default", GlobalAvgPool2d(1, 512, 7, 7, 669, 15)),  # ResNet-18's
    ("default", GlobalAvgPool2d(1, 40, 3, 5, 1, 0)),
    ("1x8x8", GlobalAvgPool2d(2, 64, 7, 7, 300, 12)),
    ("2x16x16", GlobalAvgPool2d(3, 20, 4, 4, 2048, 15)),
])  # fmt: skip
def test_global_avgpool_is_bit_exact(config, op):
    _run(compile_global_avgpool(preset(config), op))


def test_the_reference_pads_with_its_pad_value():
    x = np.random.default_rng(1).integers(-128, 128, (1, 3, 6, 6), dtype=np.int8)
    true = MaxPool2d(1, 3, 6, 6, 3, 2, (1, 1, 1, 1), pad_value=-128)
    want = H.run(H.MaxPool((3, 3), (2, 2), (1, 1, 1, 1)), [x], {})
    np.testing.assert_array_equal(outputs(Computation(true), {"input": x})["output"], want)
    relu = np.abs(x.astype(np.int16)).clip(0, 127).astype(np.int8)  # non-negative: 0 is -inf
    zero = MaxPool2d(1, 3, 6, 6, 3, 2, (1, 1, 1, 1), pad_value=0)
    np.testing.assert_array_equal(outputs(Computation(zero), {"input": relu})["output"],
                                  H.run(H.MaxPool((3, 3), (2, 2), (1, 1, 1, 1)), [relu], {}))


def test_what_the_hardware_cannot_is_refused():
    narrow = HwConfig(log_block_in=4, log_block_out=3, log_wgt_buff=16)
    with pytest.raises(ScheduleError, match="needs block_in == block_out"):
        compile_maxpool(narrow, MaxPool2d(1, 16, 8, 8, 2, 2))
    with pytest.raises(ScheduleError, match="pad_value must be 0, not -128"):
        compile_maxpool(preset("default"), MaxPool2d(1, 16, 8, 8, 3, 2, (1, 1, 1, 1), -128))
    with pytest.raises(ScheduleError, match="must fit the ALU immediate"):
        compile_global_avgpool(preset("default"), GlobalAvgPool2d(1, 16, 7, 7, 40000, 15))
    with pytest.raises(ScheduleError, match="exceeds an input slot"):
        compile_global_avgpool(preset("default"), GlobalAvgPool2d(1, 16, 56, 56, 3, 10))
