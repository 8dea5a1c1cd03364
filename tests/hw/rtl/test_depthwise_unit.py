"""The GEMM unit's depthwise mode (hw/rtl/depthwise.py) against the simulator's semantics on
random planes, weights and strides, packed and unpacked cores; its cycles as the model counts
them; its range errors."""

from dataclasses import replace
from functools import partial

import numpy as np
import pytest
from test_units import machine_with, run_unit, words

from tilecraft.hw.config import preset
from tilecraft.hw.isa import Depthwise, Uop, insn_table
from tilecraft.hw.rtl.units import GemmUnit
from tilecraft.sim import semantics


def _insns(cfg, rng, count=3):
    k = cfg.depthwise_window
    out, acc = [], 0
    for _ in range(count):
        rows, cols = k + int(rng.integers(0, 5)), k + int(rng.integers(0, 6))
        sy, sx = (int(s) for s in rng.integers(1, 3, 2))
        oh, ow = (rows - k) // sy + 1, (cols - k) // sx + 1
        out.append(
            Depthwise(
                acc_base=acc,
                inp_base=int(rng.integers(0, 40)),
                wgt_base=int(rng.integers(0, 8)),
                in_rows=rows,
                in_cols=cols,
                stride_y=sy,
                stride_x=sx,
            )
        )
        acc += oh * ow + int(rng.integers(0, 3))
    return out


@pytest.mark.parametrize(
    "name,packed",
    [("default", None), ("default", False), ("2x16x16", None)],
)
@pytest.mark.parametrize("seed", range(2))
def test_the_depthwise_mode_matches_the_simulator(name, packed, seed):
    cfg = preset(name).with_depthwise_mode(3)
    rng = np.random.default_rng(seed)
    insns = _insns(cfg, rng)
    m = machine_with(cfg, [Uop(0, 0, 0)], seed)
    cycles = []
    acc, errors = run_unit(cfg, partial(GemmUnit, packed=packed), m, insns, cycles)
    for insn in insns:
        semantics.depthwise(m, insn_table([insn])[0])
    assert errors == [False] * len(insns)
    assert acc == words(m.acc)


@pytest.mark.parametrize("packed", [None, False])
def test_its_cycles_are_the_models_less_the_issue_as_a_gemms_are(packed):
    """The model's busy cycles of an instruction less the unit's (start to done) are the
    compute stage's issue, the same for a GEMM and for a DEPTHWISE of either stride, also
    where at stride 2 the plane's last column is past its last output's (8 - 3 odd, 6 - 3),
    and on random planes and strides."""
    from tilecraft.hw.isa import Gemm
    from tilecraft.hw.timing import Timing, busy_cycles

    cfg = preset("default").with_depthwise_mode(3)
    timing = Timing.from_config(cfg)
    if packed is False:  # the core the model counts on is the default build's (packed)
        timing = Timing.from_config(cfg, dw_passes=cfg.depthwise_passes)
    insns = [
        Gemm(uop_bgn=0, uop_end=2, iter_out=3, iter_in=4, dst_out=8, dst_in=2),
        Depthwise(acc_base=40, inp_base=3, wgt_base=1, in_rows=7, in_cols=9),
        Depthwise(
            acc_base=90, inp_base=0, wgt_base=2, in_rows=8, in_cols=7, stride_y=2, stride_x=2
        ),
        Depthwise(acc_base=110, inp_base=1, wgt_base=0, in_rows=5, in_cols=8, stride_x=2),
        Depthwise(
            acc_base=130, inp_base=2, wgt_base=1, in_rows=7, in_cols=6, stride_y=2, stride_x=2
        ),
    ]
    insns += [
        replace(i, acc_base=i.acc_base + 160) for i in _insns(cfg, np.random.default_rng(5), 16)
    ]
    m = machine_with(cfg, [Uop(0, 0, 0), Uop(1, 5, 1)], 3)
    cycles = []
    _, errors = run_unit(cfg, partial(GemmUnit, packed=packed), m, insns, cycles)
    assert errors == [False] * len(insns)
    issue = {busy_cycles(timing, insn_table([i])[0]) - c for i, c in zip(insns, cycles)}
    assert len(issue) == 1, (cycles, issue)


@pytest.mark.parametrize(
    "fields",
    [
        dict(inp_base=2040),  # the plane runs past INP's 2,048 rows
        dict(acc_base=2040),  # the outputs past the accumulator's
        dict(wgt_base=511, in_rows=3),  # fine: one weight element, the last
        dict(in_cols=2),  # narrower than the window
        dict(stride_x=3),
    ],
)
def test_a_bad_depthwise_is_an_error_as_in_the_simulator(fields):
    from tilecraft.errors import ExecutionError

    cfg = preset("default").with_depthwise_mode(3)
    insn = Depthwise(**(dict(acc_base=0, inp_base=0, wgt_base=0, in_rows=5, in_cols=5) | fields))
    m = machine_with(cfg, [Uop(0, 0, 0)], 4)
    _, errors = run_unit(cfg, GemmUnit, m, [insn])
    try:
        semantics.depthwise(m, insn_table([insn])[0])
        expected = False
    except ExecutionError:
        expected = True
    assert errors == [expected]
