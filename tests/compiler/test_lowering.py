"""Where the lowering puts a tile's epilogue: the compute stage issues in order, so the ALU
passes placed between two reduction steps of the next tile hold back the second step until
the last of them starts; the GEMM core should not wait on them when it is the busier unit."""

import numpy as np
import pytest

from tilecraft.compiler.conv2d import conv2d
from tilecraft.hw.config import preset
from tilecraft.hw.isa import Opcode
from tilecraft.ops import Conv2d, ConvSchedule, Epilogue
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs
from tilecraft.sim.timing import Timing, busy_cycles

# the quantizer's epilogue: bias, accumulator bounds, per-channel multiplier, rounding shift
EPILOGUE = Epilogue(bias=True, multiplier="channel", shift=14, acc_bounds=True)


def _alu_between_gemm_steps(program) -> tuple[int, list[int]]:
    """(one reduction step's GEMM cycles, the ALU cycles issued between each two steps)."""
    t = Timing.from_config(program.config)
    rows = [dict(zip(program.table().dtype.names, r)) for r in program.table().tolist()]
    step, between, run = 0, [], None
    for row in rows:
        if row["opcode"] == Opcode.GEMM and not row["reset"]:
            step = max(step, busy_cycles(t, row))
            if run is not None:
                between.append(run)
            run = 0
        elif row["opcode"] == Opcode.ALU and run is not None:
            run += busy_cycles(t, row)
    return step, between


@pytest.mark.parametrize("tile_ic", [1, 2])
def test_a_long_epilogue_is_split_over_the_next_tiles_steps(tile_ic):
    """ResNet-18's stride-2 3x3 layer (128 -> 256 channels, 28x28) with one or two channel
    blocks a step: the GEMM core is the busier unit, but with one block a step the epilogue's
    passes take longer than a step's GEMM; each part between two steps must fit in one."""
    cfg = preset("default")
    op = Conv2d(1, 128, 28, 28, 256, kernel=3, stride=2, pad=1)
    s = ConvSchedule(2, tile_ic, 7, 14)
    program = conv2d(cfg, op, EPILOGUE, schedule=s)
    step, between = _alu_between_gemm_steps(program)
    epilogue = max(between)
    assert step > 0 and len(between) > 16
    largest_pass = max(busy_cycles(Timing.from_config(cfg), r) for r in
                       [dict(zip(program.table().dtype.names, x)) for x in program.table().tolist()]
                       if r["opcode"] == Opcode.ALU)  # fmt: skip
    assert epilogue <= max(step, largest_pass), (step, epilogue)


def test_a_split_epilogue_is_still_exact():
    cfg = preset("default")
    op = Conv2d(1, 64, 10, 10, 64, kernel=3, stride=2, pad=1)
    program = conv2d(cfg, op, EPILOGUE, schedule=ConvSchedule(1, 1, 5, 5))
    step, between = _alu_between_gemm_steps(program)
    assert len(between) == 15  # 4 tiles of 4 steps
    assert sum(run > 0 for run in between) > 4  # the epilogues went between the steps
    rng = np.random.default_rng(4)
    inputs = random_inputs(program, rng)
    result = get_device("sim").run(program, pack_inputs(program, inputs))
    ok, message = check_outputs(program, inputs, unpack_outputs(program, result.outputs))
    assert ok, message
