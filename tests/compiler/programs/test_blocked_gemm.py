"""The hand-scheduled blocked GEMM: legality errors, tiling choice, and its reference check."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft.compiler.programs.blocked_gemm import blocked_gemm
from tilecraft.compiler.programs.gemm_schedule import choose_tiles
from tilecraft.errors import ProgramError, ScheduleError
from tilecraft.hw.config import preset
from tilecraft.ops import Gemm, GemmTiles
from tilecraft.ops.reference import gemm
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import pack_inputs, unpack_outputs


def test_shapes_must_be_block_multiples():
    with pytest.raises(ScheduleError, match="K = 100 must be a positive multiple of 16"):
        blocked_gemm(preset("default"), 16, 100, 16)


def test_tiles_must_divide_and_fit():
    cfg = preset("default")
    with pytest.raises(ScheduleError, match="tile tk = 3 must divide 4 blocks"):
        blocked_gemm(cfg, 16, 64, 64, tiles=GemmTiles(16, 4, 3))
    with pytest.raises(ScheduleError, match="do not fit the scratchpads"):
        blocked_gemm(cfg, 2048, 64, 64, tiles=GemmTiles(2048, 4, 4))


@pytest.mark.parametrize("name", ["default", "1x8x8", "2x16x16", "1x32x32"])
def test_chosen_tiles_fit_and_run_exactly(name):
    cfg = preset(name)
    m, k, n = 4 * cfg.batch * 8, cfg.block_in * 6, cfg.block_out * 4
    t = choose_tiles(cfg, m // cfg.batch, k // cfg.block_in, n // cfg.block_out, True)
    assert t.tm * t.tk <= cfg.depth("inp") // 2 and t.tm * t.tn <= cfg.acc_bank_rows
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    program = blocked_gemm(cfg, m, k, n, shift=6)
    assert program.schedule == t
    inputs = {"a": a, "b": b}
    result = get_device("sim").run(program, pack_inputs(program, inputs))
    outputs = unpack_outputs(program, result.outputs)
    np.testing.assert_array_equal(outputs["c"], gemm(Gemm(m, k, n, 6), a, b))
    ok, message = check_outputs(program, inputs, outputs)
    assert ok and "bit-exact" in message


def test_the_check_reports_mismatches_and_needs_a_computation():
    cfg = preset("default")
    program = blocked_gemm(cfg, 16, 32, 32)
    rng = np.random.default_rng(0)
    inputs = {"a": rng.integers(-128, 128, (16, 32), dtype=np.int8)}
    inputs["b"] = rng.integers(-128, 128, (32, 32), dtype=np.int8)
    outputs = unpack_outputs(
        program, get_device("sim").run(program, pack_inputs(program, inputs)).outputs
    )
    outputs["c"].flat[3] ^= 1
    ok, message = check_outputs(program, inputs, outputs)
    assert not ok and "1 of 512 values differ" in message
    with pytest.raises(ProgramError, match="does not say what it computes"):
        check_outputs(program.replace(computation=None), inputs, outputs)
