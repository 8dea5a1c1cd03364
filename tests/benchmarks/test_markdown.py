"""How the benchmarks README prints a recorded figure."""

from tilecraft.benchmarks.markdown import figures_block, lookup, md_table, schedule_text, value


def test_a_figure_prints_as_the_readme_shows_it():
    assert value(None) == "—" and value(True) == "true" and value(False) == "false"
    assert value(1234567) == "1,234,567"  # a count, with its thousands
    assert value(0.98234) == "0.982" and value(0.98234, 1) == "1.0"
    assert value(73.945) == "73.945" and value(123.46) == "123.5" and value(2609.6) == "2,610"


def test_a_key_path_reads_dicts_and_lists_and_misses_as_none():
    data = {"with_unit": {"layers": [{"cycles": 7}, {"cycles": 9}]}}
    assert lookup(data, "with_unit.layers.1.cycles") == 9
    assert lookup(data, "with_unit.missing") is None and lookup(data, "absent.cycles") is None


def test_a_block_of_figures_names_each_key_its_goal_and_its_value():
    text = figures_block({"a": {"b": 0.5}}, [("a.b", "what it is", "≥ 0.9"), ("c", "", "—")])
    assert text.splitlines() == [
        "| figure (JSON key) | goal | measured |",
        "| --- | --- | --- |",
        "| `a.b` (what it is) | ≥ 0.9 | **0.500** |",
        "| `c` | — | **—** |",
    ]
    assert md_table(["x"], []) == "| x |\n| --- |"
    schedule = {"tile_oc": 4, "tile_ic": 5, "tile_oh": 1, "tile_ow": 112, "order": "oc_outer"}
    assert schedule_text({**schedule, "double_buffer": True, "acc_slots": 2}) == (
        "4 5 1 112 oc_outer x2"
    )
    assert schedule_text({**schedule, "double_buffer": False}) == "4 5 1 112 oc_outer single"
