"""The schedule space: legality up front, clear errors, and the heuristic's notes."""

import numpy as np
import pytest

from tilecraft.compiler.mapping.blocks import map_conv2d
from tilecraft.compiler.operator import schedule as S
from tilecraft.compiler.operator.conv2d import compile_conv2d, conv2d
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d, ConvSchedule, Epilogue

CFG = preset("default")
C2 = Conv2d(1, 64, 56, 56, 64, kernel=3, pad=1)


def test_schedules_are_hashable_and_enumerable():
    low = map_conv2d(CFG, C2, Epilogue())
    space = list(S.space(CFG, low))
    assert len(space) > 100
    assert len(set(space)) == len(space)
    assert all(not S.violations(CFG, low, s) for s in space)
    assert {s.double_buffer for s in space} == {True, False}


def test_oversized_tiles_name_the_limit_and_the_excess():
    with pytest.raises(ScheduleError) as info:
        conv2d(CFG, C2, schedule=ConvSchedule(4, 4, 56, 56))
    text = str(info.value)
    assert (
        "inp scratchpad: needs 26912 rows (2 x (13456 window)), has 2048 (exceeds by 24864)" in text
    )
    assert "acc half scratchpad: needs 12544 rows" in text


def test_tiles_outside_their_dimension_and_bad_orders():
    low = map_conv2d(CFG, C2, Epilogue())
    problems = S.violations(CFG, low, ConvSchedule(5, 0, 1, 1))
    assert "tile_oc = 5 must be in 1..4" in problems
    assert "tile_ic = 0 must be in 1..4" in problems
    with pytest.raises(ScheduleError, match="order must be one of 'oc_outer', 'spatial_outer'"):
        ConvSchedule(1, 1, 1, 1, order="diagonal")
    with pytest.raises(ScheduleError, match=r"acc_slots = 3 must be one of \(2, 4\)"):
        ConvSchedule(1, 1, 1, 1, acc_slots=3)


def test_padding_beyond_the_pad_field_is_a_clear_error():
    op = Conv2d(1, 16, 40, 40, 16, kernel=33, pad=16)
    with pytest.raises(ScheduleError, match="padding 16 exceeds the LOAD pad field"):
        conv2d(CFG, op)


def test_a_shape_no_schedule_fits():
    op = Conv2d(1, 16, 64, 64, 16, kernel=48)
    with pytest.raises(ScheduleError, match="no schedule fits .* even the smallest tiles break"):
        conv2d(CFG, op)


def test_micro_op_budget_is_checked():
    small = CFG.replace(log_uop_buff=8)  # 64 micro-ops
    op = Conv2d(1, 64, 8, 8, 64, kernel=3, pad=1)
    with pytest.raises(ScheduleError, match="micro-op buffer: needs at least 2 GEMM kernel"):
        conv2d(
            small,
            op,
            schedule=ConvSchedule(4, 4, 2, 8),
            weight=np.zeros(op.weight_shape, np.int8),
        )


def test_epilogue_parameters_take_accumulator_rows():
    low = map_conv2d(CFG, C2, Epilogue(bias=True, multiplier="channel", shift=20))
    assert low.round_row and low.param_rows() == 2 * 4 + 1
    b = S.budget(CFG, low, ConvSchedule(4, 1, 4, 56))
    assert b.acc_reserved == 9


def test_heuristic_reports_what_shaped_its_choice():
    comp = compile_conv2d(CFG, C2, Epilogue(shift=8), weight=np.zeros(C2.weight_shape, np.int8))
    assert len(comp.notes) == 4 and all(n.startswith("tile_") for n in comp.notes)
    assert len(comp.candidates) >= 2  # as many as fit the measurement budget (pipeline.py)
    assert all(c.cycles > 0 and c.estimate > 0 for c in comp.candidates)
    assert comp.schedule == min(comp.candidates, key=lambda c: c.cycles).schedule
    assert set(comp.seconds) >= {"map", "rank", "lower", "tokens", "measure", "verify"}


def test_bad_operator_shapes():
    with pytest.raises(ScheduleError, match="conv2d ic must be a positive int, not 0"):
        Conv2d(1, 0, 5, 5, 4, kernel=3)
    with pytest.raises(ScheduleError, match="larger than the padded input"):
        Conv2d(1, 4, 2, 2, 4, kernel=5)
    with pytest.raises(ScheduleError, match="shift must be in 0..31"):
        Epilogue(shift=40)
    with pytest.raises(ScheduleError, match="per-tensor multiplier must be given"):
        conv2d(CFG, Conv2d(1, 4, 4, 4, 4, kernel=1), Epilogue(multiplier="tensor"))
