"""Where the lowering puts a tile's epilogue: the compute stage issues in order, so the ALU
passes placed between two reduction steps of the next tile hold back the second step until
the last of them starts; the GEMM core should not wait on them when it is the busier unit."""

import numpy as np
import pytest

from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.hw.config import preset
from tilecraft.hw.isa import Opcode
from tilecraft.hw.timing import Timing, busy_cycles
from tilecraft.ops import Conv2d, ConvSchedule, Epilogue
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs

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
    largest_pass = max(
        busy_cycles(Timing.from_config(cfg), r)
        for r in [dict(zip(program.table().dtype.names, x)) for x in program.table().tolist()]
        if r["opcode"] == Opcode.ALU
    )
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


def _exact(program, seed: int) -> None:
    inputs = random_inputs(program, np.random.default_rng(seed))
    result = get_device("sim").run(program, pack_inputs(program, inputs))
    ok, message = check_outputs(program, inputs, unpack_outputs(program, result.outputs))
    assert ok, message


def _units(program) -> list[tuple[str, int, int, int]]:
    """(lane, index, start, end) of every instruction on the cycle model, by start."""
    from tilecraft.sim.simulator import run_image

    report, _ = run_image(
        program.config,
        program.dram_image(),
        program.insn_offset,
        len(program.insns),
        trace=True,
        functional=False,
    )
    spans = [(e["tid"], e["args"]) for e in report.trace["traceEvents"] if e["ph"] == "X"]
    lanes = {1: "load", 2: "compute", 3: "gemm", 4: "alu", 5: "store"}
    return sorted(
        ((lanes[t], a["index"], a["start_cycle"], a["end_cycle"]) for t, a in spans),
        key=lambda span: span[2],
    )


def test_the_last_tile_is_stored_one_channel_block_at_a_time():
    """Nothing comes after the last tile to hide its epilogue behind: its channel blocks go
    through the ALU and out one by one, so the store stage writes a block while the ALU works
    on the next, and the layer ends sooner than the tile's passes and stores one after the
    other (ResNet-18's C7: a 1,593-cycle tail became 1,033)."""
    cfg = preset("default")
    op = Conv2d(1, 64, 28, 28, 128, kernel=1, stride=2)
    program = conv2d(cfg, op, Epilogue(shift=8, relu=True), schedule=ConvSchedule(8, 4, 7, 7))
    spans = _units(program)
    last_gemm = max(end for lane, _, _, end in spans if lane == "gemm")
    by_index = sorted((k, lane, start, end) for lane, k, start, end in spans)
    stores = [(s, e) for _, lane, s, e in by_index if lane == "store"][-8:]  # the last tile's
    passes = [(s, e) for _, lane, s, e in by_index if lane == "alu"][-8 * 3 :]  # ADD SHR CLIP
    tail = stores + passes
    serial = sum(e - s for s, e in stores) + sum(e - s for s, e in passes)
    ends = max(e for _, e in tail)
    assert min(s for s, _ in stores) < max(s for s, _ in passes)  # stores overlap the passes
    assert ends - last_gemm < 0.8 * serial, (ends - last_gemm, serial)  # 1,971 of 2,538
    _exact(program, 5)


def test_the_first_step_starts_on_its_first_input_block():
    """The layer's first step, where its window takes a LOAD per input-channel block anyway,
    runs its GEMM block by block behind those LOADs: the GEMM core starts after one block's
    LOAD, not all four (ResNet-18's C4: first GEMM at cycle 1,112 instead of 2,406)."""
    cfg = preset("default")
    op = Conv2d(1, 64, 28, 28, 64, kernel=1, stride=2)
    program = conv2d(cfg, op, Epilogue(shift=8, relu=True), schedule=ConvSchedule(4, 4, 7, 7))
    spans = _units(program)
    first_gemm = min(start for lane, _, start, _ in spans if lane == "gemm")
    windows = [(s, e) for lane, k, s, e in spans if lane == "load" and _mem(program, k) == "INP"]
    assert windows[0][1] <= first_gemm < windows[1][1]  # after the first block's LOAD alone
    rows = _rows(program)
    gemms = [k for k, r in enumerate(rows) if r["opcode"] == Opcode.GEMM and not r["reset"]]
    assert [rows[k - 1]["opcode"] for k in gemms[:4]] == [Opcode.LOAD] * 4  # one per block
    _exact(program, 6)


def _rows(program) -> list[dict]:
    return [dict(zip(program.table().dtype.names, r)) for r in program.table().tolist()]


def _mem(program, k: int) -> str:
    from tilecraft.hw.isa import MemId

    return MemId(_rows(program)[k]["mem"]).name


def test_a_first_step_of_many_blocks_is_not_split():
    """52 input blocks in one step (a 5x5 kernel's taps folded into the reduction), one tile a
    pixel: split block by block, each part's tokens filled the dependence queues of 16 both
    ways and the stages deadlocked (found by the schedule-space property test). It compiles,
    verified, with the first step whole, and is exact."""
    cfg = preset("default")
    op = Conv2d(1, 33, 7, 6, 1, kernel=(5, 5), pad=(4, 0))
    program = conv2d(cfg, op, Epilogue(), schedule=ConvSchedule(1, 52, 1, 1))
    rows = _rows(program)
    first = next(k for k, r in enumerate(rows) if r["opcode"] == Opcode.GEMM and not r["reset"])
    assert rows[first]["uop_end"] - rows[first]["uop_bgn"] > 1  # the whole step's kernel
    _exact(program, 7)
