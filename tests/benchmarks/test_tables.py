"""The benchmarks README's figures are data: each suite's last result is recorded with its
provenance (`benchmarks/results/`), the README's tables are made from it, and this test fails
while a table and its data disagree (`tilecraft figures` makes them again)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tilecraft.benchmarks import SUITES, results, tables
from tilecraft.cli import main
from tilecraft.errors import FormatError


def test_the_readme_tables_agree_with_the_recorded_results():
    stale = tables.check()
    assert not stale, f"run `tilecraft figures`: the tables of {stale} disagree with their data"


def test_every_suite_has_a_section_made_from_data():
    text = tables.README.read_text()
    blocks = {m.group(2) for m in tables.BLOCK.finditer(text)}
    assert set(SUITES) | {"timing", "dse"} <= blocks <= set(tables.RENDER)


def test_every_recorded_result_says_where_it_came_from():
    for path in sorted(results.FOLDER.glob("*.json")):
        entry = results.load(path.stem)
        assert entry is not None and path.stem in tables.RENDER, path
        assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", entry["commit"]), (path, entry["commit"])
        assert entry["command"].startswith("tilecraft ") and entry["date"][:4].isdigit()
        assert entry["machine"].get("processor"), path


def test_no_table_cell_keeps_history():
    """A cell says what was measured, not every value it had: history is git's."""
    for line in tables.README.read_text().splitlines():
        if line.startswith("|"):
            for cell in line.strip("|").split("|"):
                assert len(cell) <= 140, cell


def test_a_changed_result_shows_in_its_table(tmp_path):
    folder = tmp_path / "results"
    shutil.copytree(results.FOLDER, folder)
    readme = tmp_path / "README.md"
    readme.write_text(tables.README.read_text())
    assert tables.check(readme, folder) == []
    entry = json.loads((folder / "resnet18.json").read_text())
    entry["result"]["modeled_latency_ms"] += 1.0
    (folder / "resnet18.json").write_text(json.dumps(entry))
    assert tables.check(readme, folder) == ["resnet18"]
    readme.write_text(tables.render(readme.read_text(), folder))
    assert tables.check(readme, folder) == []
    entry["result"]["accelerator_ms"] += 1.0  # set beside the Cortex-A9's estimate too
    (folder / "resnet18.json").write_text(json.dumps(entry))
    assert tables.check(readme, folder) == ["resnet18", "cpu-fallback"]


def test_recording_keeps_the_result_with_its_provenance(tmp_path):
    path = results.record("digits", {"int8_accuracy": 0.99}, "tilecraft bench digits", tmp_path)
    entry = results.load("digits", tmp_path)
    assert (
        entry["result"] == {"int8_accuracy": 0.99} and entry["command"] == "tilecraft bench digits"
    )
    assert set(results.KEYS) <= set(entry) and path.name == "digits.json"
    path.write_text(json.dumps({"suite": "digits", "result": {}}))
    with pytest.raises(FormatError, match=r"missing \['commit', 'date', 'machine', 'command'\]"):
        results.load("digits", tmp_path)
    path.write_text("{not json")
    with pytest.raises(FormatError, match="not JSON"):
        results.load("digits", tmp_path)


def test_figures_check_says_when_the_readme_disagrees(monkeypatch, tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(tables.README.read_text().replace("| **0.970** |", "| **0.99** |", 1))
    monkeypatch.setattr(tables, "README", readme)
    assert main(["figures", "--check"]) == 1
    assert "disagree with the recorded results of" in capsys.readouterr().out
    assert main(["figures"]) == 0
    assert main(["figures", "--check"]) == 0


def test_recording_a_result_leaves_the_commit_clean(tmp_path):
    """A suite recorded first must not mark the next one as measured on a modified tree:
    the results and the README made from them do not count; any other tracked file does."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    package = tmp_path / "benchmarks"
    (package / "results").mkdir(parents=True)
    (package / "results" / "a.json").write_text("{}")
    (package / "README.md").write_text("tables")
    (package / "suite.py").write_text("x = 1")

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    clean = results.commit(package)
    assert re.fullmatch(r"[0-9a-f]{40}", clean), clean
    (package / "results" / "a.json").write_text('{"new": 1}')
    (package / "README.md").write_text("new tables")
    assert results.commit(package) == clean
    (package / "suite.py").write_text("x = 2")
    assert results.commit(package) == clean + "+dirty"


def test_the_dse_table_marks_both_fronts_and_says_why_a_point_failed():
    fractions = {"lut": 0.5, "ff": 0.2, "dsp": 0.3, "bram36": 0.1}
    point = {"fractions": fractions, "error": None, "fits": ["pynq-z1"], "latency_ms": 12.5}
    point.update(lut=100, ff=40, dsp=6, bram36=2)
    result = {
        "points": [
            {**point, "name": "a"},
            {**point, "name": "a+requant", "latency_ms": 10.0},
            {"name": "b+requant", "error": "ScheduleError: no tile fits: needs 9 rows, has 8"},
        ],
        "fronts": {"joint": ["a+requant"]},
        "fronts_without_unit": {"joint": ["a"]},
    }
    text = tables.RENDER["dse"](result)
    assert "| o a | 12.5 |" in text and "| * a+requant | 10.0 |" in text
    assert "| b+requant | failed (ScheduleError): needs 9 rows, has 8 |" in text
    # a MobileNetV2 sweep of the same points on the same part: its latency beside ResNet-18's
    other = {"part": "xc7z020", "model": "mobilenet_v2", "points": [{**point, "name": "a"}]}
    other["points"][0]["latency_ms"] = 30.25
    result.update(part="xc7z020", model="resnet18", related={"dse-mobilenet-v2": other})
    text = tables.RENDER["dse"](result)
    assert "| ResNet-18 accelerator ms | MobileNetV2 accelerator ms | LUT |" in text
    assert "| o a | 12.5 | 30.2 | 100 (50%) |" in text and "| * a+requant | 10.0 | — |" in text
    assert tables.RELATED["dse"] == ("dse-mobilenet-v2",)


def test_a_seed_row_says_whether_it_routed():
    """The README's seed table: a route's Fmax; a placement's estimate, where routing ran out of
    time (placed) or was stopped by hand (placed; stopped); no figure where no route came back.
    The rows in seed order, the default first, whatever order they were routed in."""
    cell = tables._seed_fmax
    assert cell({"fmax_mhz": 103.14, "routed": True}) == "103.1"
    assert cell({"fmax_mhz": 75.1, "routed": False, "error": None}) == "75.1 (placed)"
    stopped = {"fmax_mhz": 68.2, "routed": False, "error": "stopped", "stopped": True}
    assert cell(stopped) == "68.2 (placed; stopped)"
    early = {"fmax_mhz": None, "routed": False, "error": "stopped", "stopped": True}
    assert cell(early) == tables.value(None) + " (stopped)"
    failed = {"fmax_mhz": None, "routed": False, "error": "Unable to route", "stopped": False}
    assert cell(failed) == tables.value(None) + " (no route)"
    route = {"fmax_mhz": 90.0, "routed": True, "failing_endpoints": 3}
    data = dict(results.load("timing")["result"])
    data["seeds"] = [{**route, "seed": s} for s in (2, "default", 5, 1)]
    text = tables.RENDER["timing"](data)
    seeds = re.findall(r"^\| (default|\d) \| 90\.0 \| 3 \|$", text, flags=re.M)
    assert seeds == ["default", "1", "2", "5"]
    rows = [{"seed": s} for s in (2, "7", None, "default")]  # not what hw timing writes
    assert [x["seed"] for x in sorted(rows, key=tables._seed_order)] == ["default", 2, "7", None]
