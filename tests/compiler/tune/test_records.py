"""Tuning records: appended line by line and read back; a cut-short last line skipped with a
warning and dropped at the next append; other configs' and tools' records ignored and counted;
a malformed line elsewhere refused with its line number."""

import json

import pytest

from tilecraft.compiler.tune.records import Record, Records
from tilecraft.errors import ArtifactError


def _record(i: int, config: str = "cfg", tool: str = "sim/t", cycles=100) -> Record:
    return Record(
        "layer", config, json.dumps({"i": i}), cycles, None if cycles else "boom", tool, 0.1
    )


def test_append_then_resume(tmp_path):
    path = tmp_path / "r.jsonl"
    records = Records(path, "cfg", "sim/t")
    for i in range(3):
        records.append(_record(i, cycles=100 - i if i != 1 else None))
    again = Records(path, "cfg", "sim/t")
    assert len(again.of("layer")) == 3 and again.best("layer").cycles == 98
    assert not again.of("layer")[json.dumps({"i": 1})].ok
    assert path.read_text().count("\n") == 3


def test_a_cut_short_last_line_is_skipped_then_dropped(tmp_path):
    path = tmp_path / "r.jsonl"
    records = Records(path, "cfg", "sim/t")
    records.append(_record(0))
    path.write_text(path.read_text() + json.dumps({"format": 1, "task": "layer"})[:20])  # killed
    with pytest.warns(UserWarning, match="last line is cut short"):
        again = Records(path, "cfg", "sim/t")
    assert len(again.records) == 1
    again.append(_record(1))
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["task"] == "layer" for line in lines)


def test_other_configs_and_tools_are_ignored_and_counted(tmp_path):
    path = tmp_path / "r.jsonl"
    Records(path, "cfg", "sim/t").append(_record(0))
    Records(path, "other", "sim/t").append(_record(1, config="other"))
    Records(path, "cfg", "rtl/t").append(_record(2, tool="rtl/t"))
    r = Records(path, "cfg", "sim/t")
    assert (len(r.records), r.other_config, r.other_tool) == (1, 1, 1)
    assert len(Records(path, "cfg", None).records) == 2  # any tool, to apply


def test_a_malformed_line_is_named(tmp_path):
    path = tmp_path / "r.jsonl"
    Records(path, "cfg", "sim/t").append(_record(0))
    path.write_text("not json\n" + path.read_text())
    with pytest.raises(ArtifactError, match=r"r.jsonl:1: not a tuning record"):
        Records(path, "cfg", "sim/t")


def test_records_given_to_apply_must_exist(tmp_path):
    """`compile --records` applies what tuning found: a missing file is a mistyped path, not
    "no records for this layer" (`tune --records` creates the file it names)."""
    from tilecraft.compiler.tune.records import applied_records
    from tilecraft.errors import PathError

    missing = tmp_path / "nofile.jsonl"
    with pytest.raises(PathError, match=r"records file '.*nofile\.jsonl' does not exist"):
        applied_records(missing, "cfg")
    Records(missing, "cfg", "sim/t").append(_record(0, cycles=100))
    assert applied_records(missing, "cfg").of("layer")  # the file tune wrote
