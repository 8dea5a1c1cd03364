"""The highest-fanout nets of a yosys JSON netlist (boards/flows/fanout.py), as `hw timing`
reports them."""

from __future__ import annotations

import json

from tilecraft.boards.flows.fanout import Fanout, highest_fanouts


def _cell(inputs: dict, outputs: dict) -> dict:
    return {
        "type": "X",
        "port_directions": {p: "input" for p in inputs} | {p: "output" for p in outputs},
        "connections": inputs | outputs,
    }


def test_sinks_are_counted_per_cell_input_and_named_by_the_shortest_name(tmp_path):
    module = {
        "netnames": {
            "dut.core.rst": {"bits": [2]},
            "rst": {"bits": [2]},
            "bus": {"bits": [3, 4]},
            "q": {"bits": [5]},
        },
        "cells": {
            "a": _cell({"LSR": [2], "D": [3]}, {"Q": [5]}),
            "b": _cell({"LSR": [2], "D": [4]}, {"Q": [6]}),
            "c": _cell({"A": [2], "B": [2], "C": [5], "D": ["0"]}, {"Z": [7]}),  # a constant
        },
    }
    path = tmp_path / "synth.json"
    path.write_text(json.dumps({"modules": {"top": module, "other": {"cells": {}}}}))
    assert highest_fanouts(path, "top", count=2) == [Fanout("rst", 4), Fanout("bus[0]", 1)]
    every = highest_fanouts(path, "top", count=10)
    assert (
        [f.sinks for f in every] == [4, 1, 1, 1]
        and Fanout("q", 1) in every
        and Fanout("bus[1]", 1) in every
    )
    assert highest_fanouts(path, "missing") == []  # no such design: nothing to report
