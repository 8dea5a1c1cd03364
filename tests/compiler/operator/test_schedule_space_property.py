"""Every schedule `schedule.space()` calls legal compiles, verifies and runs bit-exact against
the reference: random operators (odd channels, rectangular kernels, strides, padding as large as
the kernel or larger, uneven last tiles), random epilogues, random legal schedules, several
configs. The size bound the compiler refuses huge layers by holds for every program. An
operator no schedule fits is refused with a clear error before anything is built."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tilecraft.compiler.mapping.blocks import map_conv2d
from tilecraft.compiler.operator.builder import MAX_INSNS
from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.compiler.operator.params import random_params
from tilecraft.compiler.operator.schedule import (
    candidate_sizes,
    instruction_bound,
    space,
    violations,
)
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d, ConvSchedule, Epilogue, LoopOrder
from tilecraft.ops.schedules import ACC_SLOTS
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs


@st.composite
def cases(draw):
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    ph, pw = draw(st.integers(0, 7)), draw(st.integers(0, 7))  # often >= the kernel
    h, w = draw(st.integers(1, 11)), draw(st.integers(1, 11))
    assume(h + 2 * ph >= kh and w + 2 * pw >= kw)
    op = Conv2d(
        draw(st.integers(1, 2)),
        draw(st.integers(1, 40)),
        h,
        w,
        draw(st.integers(1, 40)),
        kernel=(kh, kw),
        stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
        pad=(ph, pw),
    )
    ep = Epilogue(
        bias=draw(st.booleans()),
        multiplier=draw(st.sampled_from(["none", "tensor", "channel"])),
        shift=draw(st.sampled_from([0, 3, 9, 17])),
        residual=draw(st.booleans()),
        relu=draw(st.booleans()),
    )
    config = draw(st.sampled_from(["default", "1x8x8", "1x16x8"]))
    return op, ep, config, draw(st.integers(0, 2**31)), draw(st.integers(0, 2**31))


def _check(case):
    op, ep, config, pick, seed = case
    cfg = preset(config)
    rng = np.random.default_rng(seed)
    low = map_conv2d(cfg, op, ep)
    legal = list(space(cfg, low))
    params = random_params(op, ep, rng)
    if not legal:
        with pytest.raises(ScheduleError, match="no schedule fits"):
            conv2d(cfg, op, ep, **params)
        return
    schedule = legal[pick % len(legal)]
    if instruction_bound(cfg, low, schedule) > MAX_INSNS:  # legal, but refused as too large
        with pytest.raises(ScheduleError, match="too large"):
            conv2d(cfg, op, ep, schedule=schedule, **params)
        return
    program = conv2d(cfg, op, ep, schedule=schedule, **params)  # verified
    assert len(program.insns) <= instruction_bound(cfg, low, schedule)
    inputs = random_inputs(program, rng)
    result = get_device("sim").run(program, pack_inputs(program, inputs))
    ok, message = check_outputs(program, inputs, unpack_outputs(program, result.outputs))
    assert ok, f"{op.describe()} [{ep.describe()}] on {config}, {schedule.describe()}: {message}"


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_legal_schedule_is_bit_exact(case):
    _check(case)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_every_legal_schedule_is_bit_exact_long_sweep(case):
    _check(case)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_space_is_every_legal_point_of_the_candidate_sizes_in_order(case):
    """`space` checks each tiling's limits once for both loop orders: it yields exactly the
    points `violations` passes, in the product's order (the ranking's tie-break)."""
    op, ep, config, _, _ = case
    cfg = preset(config)
    low = map_conv2d(cfg, op, ep)
    sizes = candidate_sizes(cfg, low)
    expected = []
    for db in (True, False):
        for oc, ic, oh, ow, order, acc in itertools.product(
            *sizes, LoopOrder, ACC_SLOTS if db else ACC_SLOTS[:1]
        ):
            single = oc == low.ocb or (oh == low.oh and ow == low.ow)
            if order == LoopOrder.SPATIAL_OUTER and single:
                continue
            s = ConvSchedule(oc, ic, oh, ow, order, db, acc)
            if not violations(cfg, low, s):
                expected.append(s)
    assert list(space(cfg, low)) == expected
