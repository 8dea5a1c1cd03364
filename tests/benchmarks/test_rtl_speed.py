"""rtl-speed's comparison of two runs (the check a timing cut needs): a run against an earlier one
of the same config says which programs moved a cycle or an output, and refuses a result it
cannot compare with. The runs themselves are the rtl tier's (tests/sim/test_rtl.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from tilecraft.benchmarks.rtl_speed import comparable, compare, outputs_digest
from tilecraft.errors import TilecraftError
from tilecraft.hw.config import preset


def result(cfg, runs: dict, layer=(1000, "aa")) -> dict:
    return {
        "suite": "rtl-speed",
        "config": cfg.tag,
        "rtl_cycles": layer[0],
        "outputs_digest": layer[1],
        "random": {
            "runs": [
                {"program": name, "rtl_cycles": c, "model_cycles": c, "outputs_digest": d}
                for name, (c, d) in runs.items()
            ]
        },
    }


def test_the_same_runs_are_the_same():
    cfg = preset("1x8x8")
    before = result(cfg, {"random-0": (500, "d0"), "out-of-order": (700, "d1")})
    x = compare(before, copy.deepcopy(before))
    assert x == {"runs": 3, "same_cycles": 3, "same_outputs": 3, "changed": [], "same": True}


def test_a_moved_cycle_or_output_is_named():
    cfg = preset("1x8x8")
    before = result(cfg, {"random-0": (500, "d0"), "random-1": (600, "d2"), "ooo": (700, "d1")})
    after = result(cfg, {"random-0": (501, "d0"), "random-1": (600, "d9"), "ooo": (700, "d1")})
    x = compare(before, after)
    assert not x["same"] and x["same_cycles"] == 3 and x["same_outputs"] == 3
    assert x["changed"] == [
        {"program": "random-0", "rtl_cycles_before": 500, "rtl_cycles": 501, "same_outputs": True},
        {"program": "random-1", "rtl_cycles_before": 600, "rtl_cycles": 600, "same_outputs": False},
    ]
    layer_moved = copy.deepcopy(before)
    layer_moved["rtl_cycles"] = 999
    assert [c["program"] for c in compare(before, layer_moved)["changed"]] == ["layer"]


def test_other_programs_are_refused():
    cfg = preset("1x8x8")
    before = result(cfg, {"random-0": (500, "d0"), "ooo": (700, "d1")})
    after = result(cfg, {"random-7": (500, "d0"), "ooo": (700, "d1")})
    with pytest.raises(
        TilecraftError, match=r"only there: \['random-0'\], only here: \['random-7'\]"
    ):
        compare(before, after)


def test_an_earlier_result_it_cannot_compare_with_is_refused_before_any_run():
    cfg = preset("1x8x8")
    before = result(cfg, {"random-0": (500, "d0"), "random-1": (5, "d"), "ooo": (700, "d1")})
    comparable(before, cfg, 2)  # two random programs and the out-of-order one
    with pytest.raises(TilecraftError, match="ran 2 random programs, this run 3: give --random 2"):
        comparable(before, cfg, 3)
    with pytest.raises(TilecraftError, match="this run 0: give --random 2"):
        comparable(before, cfg, 0)
    with pytest.raises(TilecraftError, match=f"measured on {cfg.tag}, this run is on "):
        comparable(before, preset("default"), 2)
    with pytest.raises(TilecraftError, match="no recorded runs.*--random N --json FILE"):
        comparable({"suite": "rtl-speed", "config": cfg.tag, "random": {"programs": 3}}, cfg, 2)
    with pytest.raises(TilecraftError, match="no recorded runs"):
        comparable([1, 2], cfg, 2)
    unit = cfg.replace(requant_lanes=8)  # the unit's two pace programs run too
    paced = result(unit, {f"p{k}": (1, "d") for k in range(5)})
    comparable(paced, unit, 2)


def test_the_outputs_digest_sees_values_names_and_shapes():
    a = {"out": np.arange(6, dtype=np.int8)}
    assert outputs_digest(a) == outputs_digest({"out": np.arange(6, dtype=np.int8)})
    assert outputs_digest(a) != outputs_digest({"out": np.arange(6, dtype=np.int8)[::-1]})
    assert outputs_digest(a) != outputs_digest({"y": np.arange(6, dtype=np.int8)})
    assert outputs_digest(a) != outputs_digest({"out": np.arange(6, dtype=np.int8).reshape(2, 3)})
    assert outputs_digest(a) != outputs_digest({"out": np.arange(6, dtype=np.uint8)})
