"""The hand-scheduled blocked GEMM: legality errors, tiling choice and its numpy oracle."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft.compiler.blocked_gemm import (
    blocked_gemm,
    choose_tiles,
    pack_a,
    pack_b,
    reference,
    run_demo,
    unpack_c,
)
from tilecraft.compiler.oracle import check_outputs
from tilecraft.errors import ProgramError, ScheduleError
from tilecraft.hw.config import preset
from tilecraft.runtime import get_device


def test_shapes_must_be_block_multiples():
    with pytest.raises(ScheduleError, match="K = 100 must be a positive multiple of 16"):
        blocked_gemm(preset("default"), 16, 100, 16)


def test_tiles_must_divide_and_fit():
    cfg = preset("default")
    with pytest.raises(ScheduleError, match="tile tk = 3 must divide 4 blocks"):
        blocked_gemm(cfg, 16, 64, 64, tiles=(16, 4, 3))
    with pytest.raises(ScheduleError, match="do not fit the scratchpads"):
        blocked_gemm(cfg, 2048, 64, 64, tiles=(2048, 4, 4))


@pytest.mark.parametrize("name", ["default", "1x8x8", "2x16x16", "1x32x32"])
def test_chosen_tiles_fit_and_run_exactly(name):
    cfg = preset(name)
    m, k, n = 4 * cfg.batch * 8, cfg.block_in * 6, cfg.block_out * 4
    tm, tn, tk = choose_tiles(cfg, m // cfg.batch, k // cfg.block_in, n // cfg.block_out, True)
    assert tm * tk <= cfg.depth("inp") // 2 and tm * tn <= cfg.depth("acc") // 2
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (k, n), dtype=np.int8)
    program = blocked_gemm(cfg, m, k, n, shift=6)
    inputs = {"a": pack_a(cfg, a), "b": pack_b(cfg, w)}
    result = get_device("sim").run(program, inputs)
    np.testing.assert_array_equal(unpack_c(cfg, result.outputs["c"]), reference(cfg, a, w, 6))
    ok, message = check_outputs(program, inputs, result.outputs)
    assert ok and "bit-exact" in message


def test_oracle_reports_mismatches():
    cfg = preset("default")
    program = blocked_gemm(cfg, 16, 32, 32)
    rng = np.random.default_rng(0)
    inputs = {b.name: rng.integers(-128, 128, b.shape, dtype=np.int8) for b in program.inputs}
    outputs = get_device("sim").run(program, inputs).outputs
    outputs["c"] = outputs["c"].copy()
    outputs["c"].flat[3] ^= 1
    ok, message = check_outputs(program, inputs, outputs)
    assert not ok and "1 of 512 values differ" in message
    program.meta["kind"] = "mystery"
    with pytest.raises(ProgramError, match="no numpy oracle"):
        check_outputs(program, inputs, outputs)


def test_demo_figures():
    r = run_demo(preset("default"), 64, 256, 128)
    assert r["overlap"]["bit_exact"] and r["serial"]["bit_exact"]
    assert r["speedup"] > 1.25
    assert r["overlap"]["gemm_utilization"] > r["serial"]["gemm_utilization"]
