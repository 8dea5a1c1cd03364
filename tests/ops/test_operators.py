"""Operators, epilogues, computations and schedules: validated on construction, and records
that read back exactly (and strictly) from JSON."""

from __future__ import annotations

import pytest

from tilecraft.errors import FormatError, ScheduleError
from tilecraft.ops import (
    Computation,
    Conv2d,
    ConvSchedule,
    Dense,
    Epilogue,
    Gemm,
    GemmTiles,
    LoopOrder,
    Multiplier,
)
from tilecraft.serial import from_json, to_json

RECORDS = [
    Computation(Conv2d(2, 3, 9, 7, 5, kernel=(3, 2), stride=2, pad=(1, 0)), Epilogue()),
    Computation(Dense(7, 9, 11), Epilogue(bias=True, multiplier="tensor", shift=9), multiplier=3),
    Computation(Gemm(16, 32, 64, shift=6)),
    Computation(
        Conv2d(1, 8, 4, 4, 8, kernel=1),
        Epilogue(multiplier=Multiplier.CHANNEL, shift=20, residual=True, relu=True, clip=(-9, 9)),
    ),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.op.kind)
def test_computations_read_back_exactly(record):
    data = to_json(record)
    assert data["op"]["kind"] == record.op.kind
    assert from_json(Computation, data) == record


def test_schedules_read_back_exactly_and_take_strings_for_enums():
    s = ConvSchedule(2, 1, 7, 14, "spatial_outer", acc_slots=4)
    assert s.order is LoopOrder.SPATIAL_OUTER
    assert from_json(ConvSchedule | GemmTiles, to_json(s)) == s
    t = GemmTiles(4, 2, 8, overlap=False)
    assert from_json(ConvSchedule | GemmTiles, to_json(t)) == t
    assert Epilogue(multiplier="channel").multiplier is Multiplier.CHANNEL


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["op"].update(kernel=[3, "3"]), r"c\.op\.kernel\[1\]: expected an integer"),
        (lambda d: d["op"].update(kind="pool"), r"c\.op: kind 'pool' is not one of 'conv2d'"),
        (lambda d: d["op"].update(n=0), r"c\.op: conv2d n must be a positive int, not 0"),
        (lambda d: d["op"].pop("ic"), r"c\.op: missing field 'ic'"),
        (lambda d: d["op"].update(groups=2), r"c\.op: unknown field\(s\) groups"),
        (lambda d: d["epilogue"].update(shift=40), r"c\.epilogue: shift must be in 0\.\.31"),
        (lambda d: d["epilogue"].update(relu=1), r"c\.epilogue\.relu: expected true or false"),
        (lambda d: d["epilogue"].update(multiplier="x"), r"c\.epilogue\.multiplier: 'x' is not"),
        (lambda d: d.update(multiplier=7), r"c: a per-tensor multiplier value goes with"),
        (lambda d: d.update(epilogue=None), r"c: a gemm or maxpool computation has no epilogue"),
    ],
)
def test_records_are_read_strictly_naming_the_field(mutate, message):
    data = to_json(RECORDS[0])
    mutate(data)
    with pytest.raises(FormatError, match=message):
        from_json(Computation, data, "c")


def test_reading_follows_the_type_not_the_data():
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(FormatError, match=r"x\[0\]: expected an integer, not list"):
        from_json(tuple[int, ...], deep, "x")


def test_bad_operators_and_knobs():
    with pytest.raises(ScheduleError, match="dense k must be a positive int, not -3"):
        Dense(4, -3, 2)
    with pytest.raises(ScheduleError, match="kernel must be an int or a pair of ints"):
        Conv2d(1, 1, 4, 4, 1, kernel=(2, 2, 2))
    with pytest.raises(ScheduleError, match="multiplier must be one of 'none', 'tensor'"):
        Epilogue(multiplier="per-row")
    with pytest.raises(
        ScheduleError, match="with acc_bounds and no residual the accumulator bounds are the clip"
    ):
        Epilogue(shift=3, relu=True, acc_bounds=True)
    with pytest.raises(ScheduleError, match="tile tm must be a positive int, not 0"):
        GemmTiles(0, 1, 1)
    with pytest.raises(ScheduleError, match="gemm shift must be in 0..31"):
        Gemm(16, 16, 16, shift=32)


def test_shapes_and_clips_of_the_wrong_type_are_named():
    """A float, None or a numpy scalar where an int goes: the operator's own error, naming the
    value (a TypeError from inside, or a message that contradicted itself, before)."""
    import numpy as np

    for kernel in (3.0, None, "3"):
        with pytest.raises(ScheduleError, match="kernel must be an int or a pair of ints, not"):
            Conv2d(1, 16, 8, 8, 16, kernel=kernel)
    with pytest.raises(
        ScheduleError, match=r"ic must be a positive int, not np.int64\(16\) \(a numpy"
    ):
        Conv2d(1, np.int64(16), 8, 8, 16, kernel=3)
    for clip in (5, (-1.5, 3), (1, 2, 3)):
        with pytest.raises(ScheduleError, match=r"must be two ints \(lo, hi\)"):
            Epilogue(clip=clip)
