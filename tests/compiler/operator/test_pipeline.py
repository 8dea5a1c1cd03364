"""The compile pipeline runs one way: every candidate is lowered, given tokens and assembled
once, the chosen one is the program returned (not built again), and each step is timed. A layer
too large for any program is refused before anything is built, and the schedule space stays
bounded."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tilecraft.compiler.mapping.blocks import map_conv2d
from tilecraft.compiler.operator import pipeline
from tilecraft.compiler.operator.conv2d import compile_conv2d, compile_dense
from tilecraft.compiler.operator.pipeline import compile_operator
from tilecraft.compiler.operator.schedule import MAX_SPACE, candidate_sizes
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d, ConvSchedule, Epilogue
from tilecraft.sim import simulator

CFG = preset("default")
OP = Conv2d(1, 32, 14, 14, 32, kernel=3, pad=1)


def _counted_timer():
    """A cycle-model timer that keeps every program it measures."""
    measured = []

    def timer(program):
        measured.append(program)
        return simulator.model_report(program).cycles

    return timer, measured


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_each_step_runs_once_per_candidate(monkeypatch):
    monkeypatch.setattr(pipeline, "MEASURE_BUDGET", 10**9)  # only MEASURED bounds the count
    maps = _counting(monkeypatch, pipeline, "map_conv2d")
    lowers = _counting(monkeypatch, pipeline, "lower_conv")
    tokens = _counting(monkeypatch, pipeline, "insert_tokens")
    verifies = _counting(monkeypatch, pipeline, "verify")
    timer, measures = _counted_timer()  # the measurer is the caller's: the cycle model, counted
    comp = compile_conv2d(
        CFG, OP, Epilogue(shift=8), weight=np.zeros(OP.weight_shape, np.int8), timer=timer
    )
    n = len(comp.candidates)
    assert n == pipeline.MEASURED
    assert (len(maps), len(lowers), len(tokens), len(measures), len(verifies)) == (1, n, n, n, 1)
    assert verifies[0][0] is comp.program  # the measured program itself, verified once
    chosen = min(comp.candidates, key=lambda c: c.cycles)
    assert comp.schedule == chosen.schedule
    assert comp.program.computation.op == OP
    assert set(comp.seconds) == {
        "map",
        "rank",
        "lower",
        "tokens",
        "assemble",
        "measure",
        "verify",
        "notes",
    }
    assert "compiled in" in comp.format()


def test_a_given_schedule_is_checked_built_once_and_not_measured(monkeypatch):
    measures = _counting(monkeypatch, simulator, "run_image")
    s = ConvSchedule(1, 1, 7, 14)
    comp = compile_conv2d(CFG, OP, Epilogue(), schedule=s)
    assert comp.program.schedule == s
    assert [(c.schedule, c.estimate, c.cycles) for c in comp.candidates] == [(s, None, None)]
    assert "check" in comp.seconds and "rank" not in comp.seconds and "measure" not in comp.seconds
    assert measures == []


def test_the_program_records_what_it_computes():
    comp = compile_dense(CFG, 7, 40, 24, Epilogue(multiplier="tensor", shift=4), multiplier=9)
    c = comp.program.computation
    assert (c.op.m, c.op.k, c.op.n, c.multiplier) == (7, 40, 24, 9)
    assert comp.mapped.op.kernel == (1, 1)


def test_parameters_are_checked_before_anything_is_built(monkeypatch):
    lowers = _counting(monkeypatch, pipeline, "lower_conv")
    with pytest.raises(Exception, match=r"weight has shape \(3, 3\); expected \(32, 32, 3, 3\)"):
        compile_conv2d(CFG, OP, weight=np.zeros((3, 3), np.int8))
    with pytest.raises(Exception, match="bias was given but the epilogue adds none"):
        compile_conv2d(CFG, OP, bias=np.zeros(32, np.int32))
    assert lowers == []


def test_a_layer_too_large_for_any_program_is_refused_before_building(monkeypatch):
    lowers = _counting(monkeypatch, pipeline, "lower_conv")
    huge = Conv2d(1, 4096, 224, 224, 64, kernel=3, pad=1)
    with pytest.raises(ScheduleError, match=r"too large: .* more than max_insns = 32,768.*split"):
        compile_conv2d(CFG, huge)
    small = Conv2d(1, 64, 28, 28, 64, kernel=3, pad=1)
    with pytest.raises(ScheduleError, match=r"with any schedule, more than max_insns = 20 "):
        compile_conv2d(CFG, small, max_insns=20)
    with pytest.raises(ScheduleError, match=r"with this schedule"):
        compile_conv2d(CFG, small, schedule=ConvSchedule(1, 1, 1, 1), max_insns=10_000)
    assert lowers == []


def test_large_programs_measure_the_fewest_candidates(monkeypatch):
    """Past the budget, a layer takes its best estimate unmeasured, or measures its best two
    when its epilogue adds a residual (the estimate leaves out the issue order behind it)."""
    timer, measures = _counted_timer()
    monkeypatch.setattr(pipeline, "MEASURE_BUDGET", 10)
    comp = compile_conv2d(CFG, OP, Epilogue(), timer=timer)
    assert len(comp.candidates) == 1 and measures == []  # one candidate needs no measuring
    comp = compile_conv2d(CFG, OP, Epilogue(residual=True, shift=4), timer=timer)
    assert len(comp.candidates) == pipeline.MEASURE_AT_LEAST_RESIDUAL == len(measures) == 2
    assert all(c.cycles for c in comp.candidates)


def test_a_residual_layer_measures_each_count_of_reduction_steps():
    """Where the epilogue adds a residual, the estimate ranks ResNet-18's conv_19 tilings
    within 0.1% of each other, one reduction step a tile first; the cycle model finds two
    steps a tile 12% faster (the in-order compute stage waits less behind the residual's GEMM),
    so the two measured candidates are the best of each step count, and two steps win."""
    from tilecraft.compiler.mapping.blocks import map_conv2d as mapped
    from tilecraft.compiler.operator.heuristic import rank
    from tilecraft.ops import Multiplier

    cfg, op = preset("default"), Conv2d(1, 64, 56, 56, 64, kernel=3, pad=1)
    ep = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=18, residual=True, relu=True)
    low = mapped(cfg, op, ep)
    first = rank(cfg, low)[0].schedule
    assert -(-low.icb // first.tile_ic) == 1  # the estimate's favourite: one step a tile
    comp = compile_conv2d(cfg, op, ep, weight=np.zeros(op.weight_shape, np.int8))
    steps = [-(-low.icb // c.schedule.tile_ic) for c in comp.candidates]
    assert sorted(steps) == [1, 2] and len(comp.candidates) == pipeline.MEASURE_AT_LEAST_RESIDUAL
    by_steps = {k: c.cycles for k, c in zip(steps, comp.candidates)}
    assert by_steps[2] < 0.9 * by_steps[1]
    assert -(-low.icb // comp.program.schedule.tile_ic) == 2


def test_candidates_are_built_until_they_total_the_budget(monkeypatch):
    """The second candidate is built while the first alone is under the budget, and no
    third once the two reach it."""
    monkeypatch.setattr(pipeline, "MEASURE_BUDGET", 10**9)
    every = compile_conv2d(CFG, OP, Epilogue(), weight=np.zeros(OP.weight_shape, np.int8))
    sizes = [
        len(
            pipeline.compile_operator(
                CFG, OP, Epilogue(), schedule=c.schedule, check=False
            ).program.insns
        )
        for c in every.candidates[:2]
    ]
    monkeypatch.setattr(pipeline, "MEASURE_BUDGET", sizes[0] + sizes[1])
    timer, measures = _counted_timer()
    two = compile_conv2d(
        CFG, OP, Epilogue(), weight=np.zeros(OP.weight_shape, np.int8), timer=timer
    )
    assert [c.schedule for c in two.candidates] == [c.schedule for c in every.candidates[:2]]
    assert len(measures) == 2
    monkeypatch.setattr(pipeline, "MEASURE_BUDGET", sizes[0] + sizes[1] + 1)
    three = compile_conv2d(CFG, OP, Epilogue(), weight=np.zeros(OP.weight_shape, np.int8))
    assert len(three.candidates) == 3


def test_the_schedule_space_stays_bounded_for_many_divisors():
    op = Conv2d(1, 16, 720, 5040, 16, kernel=1)  # 30 x 60 divisors of the output rows/columns
    low = map_conv2d(CFG, op, Epilogue())
    sizes = candidate_sizes(CFG, low)
    assert math.prod(len(s) for s in sizes) <= MAX_SPACE
    for dim, tried in zip((low.ocb, low.icb, low.oh, low.ow), sizes):
        assert tried[0] == 1 and all(dim % t == 0 for t in tried)
        assert tried == sorted(set(tried))
    assert sizes[2][-1] == 720  # the whole dimension still tried where it fits a scratchpad


def test_a_network_layer_leaves_verification_to_its_chain(monkeypatch):
    verified = _counting(monkeypatch, pipeline, "verify")
    comp = compile_conv2d(CFG, OP, Epilogue())
    assert len(verified) == 1 and "verify" in comp.seconds
    comp = compile_operator(CFG, OP, Epilogue(), check=False)
    assert len(verified) == 1 and "verify" not in comp.seconds


def test_configs_the_compiler_does_not_build_for_are_refused():
    """The ISA, simulator and RTL take 16-bit data, the compiler's lowering does not: such a
    config compiled and ran, giving wrong values. A name where the config object goes is
    refused saying how to make one."""
    from tilecraft.errors import ConfigError
    from tilecraft.hw.config import HwConfig

    op = Conv2d(1, 16, 8, 8, 16, kernel=3, pad=1)
    weight = np.ones(op.weight_shape, np.int8)
    for field in ("log_inp_width", "log_wgt_width", "log_acc_width"):
        with pytest.raises(ConfigError, match="the compiler builds programs for int8 inputs"):
            compile_conv2d(HwConfig(**{field: 4}), op, Epilogue(shift=8), weight=weight)
    with pytest.raises(ConfigError, match=r"must be an HwConfig \(tilecraft.boards.resolve_config"):
        compile_conv2d("default", op, Epilogue(shift=8), weight=weight)
    with pytest.raises(ScheduleError, match="a program's name is a non-empty string, not 5"):
        compile_conv2d(preset("default"), op, Epilogue(shift=8), weight=weight, name=5)
