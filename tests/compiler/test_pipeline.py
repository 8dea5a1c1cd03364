"""The compile pipeline runs one way: every candidate is lowered, given tokens and assembled
once, the chosen one is the program returned (not built again), and each step is timed."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft.compiler import pipeline
from tilecraft.compiler.conv2d import compile_conv2d, compile_dense
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d, ConvSchedule, Epilogue
from tilecraft.sim import simulator

CFG = preset("default")
OP = Conv2d(1, 32, 14, 14, 32, kernel=3, pad=1)


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_each_step_runs_once_per_candidate(monkeypatch):
    maps = _counting(monkeypatch, pipeline, "map_conv2d")
    lowers = _counting(monkeypatch, pipeline, "lower_conv")
    tokens = _counting(monkeypatch, pipeline, "insert_tokens")
    verifies = _counting(monkeypatch, pipeline, "verify")
    measures = _counting(monkeypatch, pipeline, "model_report")
    comp = compile_conv2d(CFG, OP, Epilogue(shift=8), weight=np.zeros(OP.weight_shape, np.int8))
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
