"""Random operators and options through the whole compile (the heuristic's choice, no schedule
given): each ends in a verified program that runs bit-exact against the reference, or in a
TilecraftError that names the bad value (with every value legal: only a ScheduleError naming
the limit the layer breaks), never another exception. Shapes reach past the legal
ranges (zero, negative, padding beyond the LOAD field, shifts past 31, huge channel counts)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tilecraft.compiler.operator.params import random_params
from tilecraft.compiler.operator.pipeline import compile_operator, plan_operator
from tilecraft.errors import ScheduleError, TilecraftError
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d, Dense, Epilogue
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs

BAD = {  # one field pushed past its legal range, and what the error must name
    "channels": st.sampled_from([0, -1, 10**6]),
    "size": st.sampled_from([0, -1]),
    "kernel": st.sampled_from([0, -3]),
    "stride": st.sampled_from([0, -2]),
    "pad": st.sampled_from([-1, -4]),
    "shift": st.sampled_from([-1, 32, 40]),
    "multiplier": st.sampled_from(["per-axis", "", "TENSOR"]),
}
NAMED = {
    "channels": r"\b(ic|k) must be|too large|no schedule fits .* K=1000000|IC=1000000",
    "size": r"\b(h|m) must be",
    "kernel": r"kernel",
    "stride": r"stride",
    "pad": r"pad",
    "shift": r"shift",
    "multiplier": r"multiplier",
}


@st.composite
def cases(draw):
    """(make the operator, epilogue options, config, seed, the field pushed out of range or
    None): legal ranges but for at most one field."""
    bad = draw(st.sampled_from([None, None, *BAD]))
    used = []

    def pick(field, legal):
        if field != bad:
            return draw(legal)
        used.append(field)
        return draw(BAD[field])

    ep = dict(
        bias=draw(st.booleans()),
        multiplier=pick("multiplier", st.sampled_from(["none", "tensor", "channel"])),
        shift=pick("shift", st.integers(0, 31)),
        residual=draw(st.booleans()),
        relu=draw(st.booleans()),
    )
    ic, oc = pick("channels", st.integers(1, 48)), draw(st.integers(1, 48))
    if draw(st.booleans()):
        m = pick("size", st.integers(1, 40))
        make = lambda: Dense(m, ic, oc)  # noqa: E731
    else:
        kernel = (pick("kernel", st.integers(1, 5)), draw(st.integers(1, 5)))
        n = draw(st.integers(1, 2))  # the image at least as large as the kernel
        h = pick("size", st.integers(max(kernel[0], 1), 12))
        w = draw(st.integers(kernel[1], 12))
        stride = (pick("stride", st.integers(1, 3)), draw(st.integers(1, 3)))
        # beyond the LOAD's pad field (15) only a folded layer (padded by the host) compiles
        pad = (pick("pad", st.integers(0, 7) | st.sampled_from([16, 40])), draw(st.integers(0, 4)))
        make = lambda: Conv2d(n, ic, h, w, oc, kernel=kernel, stride=stride, pad=pad)  # noqa: E731
    config, seed = draw(st.sampled_from(["default", "1x8x8"])), draw(st.integers(0, 2**31))
    return make, ep, config, seed, (used or [None])[0]


def _compile_and_run(make_op, ep_options, config, seed):
    cfg = preset(config)
    op = make_op()
    rng = np.random.default_rng(seed)
    epilogue = Epilogue(**ep_options)
    plan_operator(cfg, op, epilogue)  # as the CLI does: too large fails before weights exist
    params = random_params(op, epilogue, rng)
    program = compile_operator(cfg, op, epilogue, measure=1, **params).program
    inputs = random_inputs(program, rng)
    result = get_device("sim").run(program, pack_inputs(program, inputs))
    return check_outputs(program, inputs, unpack_outputs(program, result.outputs))


# What may refuse an operator whose every value is legal: a ScheduleError naming the limit it
# breaks (a scratchpad's rows, a field's width, the program's size). A verifier failure, a
# deadlock, a hazard or any other error on legal input is the bug this test exists to find.
LIMITS = r"scratchpad|rows|micro-op|field|too large|max_insns|instructions|does not fit|fits"


def _check(case):
    make_op, ep, config, seed, bad = case
    try:
        ok, message = _compile_and_run(make_op, ep, config, seed)
    except TilecraftError as exc:
        if bad is not None:
            assert re.search(NAMED[bad], str(exc)), f"{bad} out of range, but: {exc}"
        else:
            legal = type(exc) is ScheduleError and re.search(LIMITS, str(exc))
            assert legal, (
                f"{make_op().describe()} [{ep}] on {config} (seed {seed}), every "
                f"value legal: {type(exc).__name__}: {exc}"
            )
        event(f"{type(exc).__name__} ({bad or 'legal values'})")
        return
    assert bad is None, f"{bad} out of range compiled: {ep}"
    event("compiled and ran")
    assert ok, f"{make_op().describe()} [{ep}] on {config}: {message}"


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_compile_succeeds_bit_exact_or_names_the_problem(case):
    _check(case)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_compile_succeeds_bit_exact_or_names_the_problem_long_sweep(case):
    _check(case)
