"""The design-space sweep: its configs, the Pareto fronts, fits, the synthesis cache and the
Dask plumbing (synthesis and the network compile stand in here; the real sweep's figures are
in the benchmarks README)."""

from __future__ import annotations

import json

import pytest

from tilecraft.errors import ConfigError, TilecraftError
from tilecraft.explore import evaluate as evaluation
from tilecraft.explore import sweep
from tilecraft.explore.pareto import dominates, front, fronts
from tilecraft.explore.space import sweep_configs
from tilecraft.hw.config import preset


def test_the_sweep_visits_distinct_valid_configs_smallest_first():
    points = sweep_configs()
    digests = [c.digest for _, c in points]
    assert len(digests) == len(set(digests)) >= 12
    assert points[0][0] == "1x8x8" and points[0][1] == preset("1x8x8")
    macs = [c.batch * c.block_in * c.block_out for _, c in points]
    assert macs == sorted(macs)
    assert [n for n, _ in sweep_configs(3)] == ["1x8x8", "1x8x8+requant", "1x8x8+half-buffers"]
    with pytest.raises(ConfigError, match="at least one config, not 0"):
        sweep_configs(0)


def test_every_config_is_swept_without_and_with_the_requantization_unit():
    points = dict(sweep_configs())
    for name, cfg in points.items():
        if name.endswith("+dw3"):
            continue  # the next test's
        if name.endswith("+requant"):
            base = points[name.removesuffix("+requant")]
            assert not base.requant_lanes and cfg == base.with_requant_unit()
            assert cfg.requant_lanes == min(cfg.axi_bytes, cfg.batch * cfg.block_out)
        else:
            assert not cfg.requant_lanes and f"{name}+requant" in points
    assert points["default+axi128+requant"].requant_lanes == 16  # the wider bus's pace


def test_each_preset_is_swept_with_the_depthwise_mode_where_the_rtl_builds_it():
    points = dict(sweep_configs())
    modes = {n: c for n, c in points.items() if c.depthwise_window}
    assert sorted(modes) == [
        "1x32x32+requant+dw3",
        "2x16x16+axi128+requant+dw3",
        "2x16x16+requant+dw3",
        "default+axi128+requant+dw3",
        "default+requant+dw3",
    ]  # each as the preset is and with the 128-bit port (1x32x32 has no 128-bit variant)
    for name, cfg in modes.items():  # beside the same point without the mode
        assert cfg == points[name.removesuffix("+dw3")].with_depthwise_mode(3)
    # 1x16x8's blocks are not square; 1x8x8's packed core needs 4 passes an output, past 3 reads
    assert preset("1x8x8").with_depthwise_mode(3).depthwise_passes * 2 > 3
    with pytest.raises(ConfigError, match="BLOCK_IN == BLOCK_OUT"):
        preset("1x16x8").with_depthwise_mode(3)


def test_pareto_fronts():
    a = {"name": "a", "latency_ms": 10, "lut": 5, "dsp": 5, "bram36": 5}
    b = {"name": "b", "latency_ms": 20, "lut": 2, "dsp": 9, "bram36": 2}
    c = {"name": "c", "latency_ms": 30, "lut": 6, "dsp": 9, "bram36": 6}  # worse than a on all
    assert dominates(a, c, ("latency_ms", "lut")) and not dominates(a, b, ("latency_ms", "lut"))
    assert [p["name"] for p in front([a, b, c], ("latency_ms", "lut"))] == ["a", "b"]
    f = fronts([a, b, c])
    assert f["dsp"] == ["a"] and f["joint"] == ["a", "b"]


def _fakes(monkeypatch, calls):
    class Synth:
        def __init__(self, cfg):
            n = cfg.batch * cfg.block_in * cfg.block_out
            self.lut, self.ff, self.dsp, self.bram36, self.uram = 100 * n, 50 * n, n // 2, n, 0
            self.lut += 1000 if cfg.requant_lanes else 0
            self.seconds = 1.0

    def synthesize(cfg, part, workdir):
        calls.append(cfg.tag)
        return Synth(cfg)

    def latency(cfg, model, **tuning):  # the unit: 20% faster, for 1,000 LUTs (Synth)
        n = cfg.batch * cfg.block_in * cfg.block_out * (1.25 if cfg.requant_lanes else 1)
        return {"accelerator_cycles": 10**7 // n, "latency_ms": 10**4 / n, "compile_seconds": 0,
                "host_layers": [], "host_macs": 0}  # fmt: skip

    import tilecraft.boards.flows.resources as resources

    def design(cfg):  # elaborating the Verilog takes seconds: a digest of the config, and of
        calls.append(f"elaborated {cfg.tag}")  # `variant` (what an edit of the RTL changed)
        return f"{cfg.digest}{variant[0]}"

    variant = [""]
    monkeypatch.setattr(resources, "synthesize", synthesize)
    monkeypatch.setattr(resources, "design", design)
    monkeypatch.setattr(evaluation, "network_latency", latency)
    return variant


def test_a_sweep_caches_synthesis_and_marks_fits(tmp_path, monkeypatch):
    calls = []
    variant = _fakes(monkeypatch, calls)

    def sweep_of(limit):
        calls.clear()
        r = sweep.run_sweep("xc7z020", limit=limit, workers=0, cache=cache, workdir=tmp_path)
        return r, sum(not c.startswith("elaborated") for c in calls), len(calls)

    cache = tmp_path / "cache.json"
    r, synthesized, _ = sweep_of(5)
    assert synthesized == 5 and r["synthesized"] == 5
    assert {p["name"] for p in r["points"]} >= {"1x8x8", "1x16x8"}
    small = r["points"][0]
    assert small["fits"] == ["pynq-z1", "pynq-z2"] and small["fractions"]["dsp"] == 32 / 220
    assert r["fronts"]["joint"] and json.loads(cache.read_text())
    unit = {p["name"] for p in r["points"] if p["requant_lanes"]}
    assert unit == {"1x8x8+requant", "1x8x8+half-buffers+requant"}
    assert unit & set(r["fronts"]["joint"])  # faster for a few LUTs: on the front
    plain = r["fronts_without_unit"]
    assert plain["joint"] and not unit & {n for names in plain.values() for n in names}
    assert plain["lut"] == [n for n in r["fronts"]["lut"] if n not in unit]
    assert set(plain["lut"]) == {"1x8x8", "1x8x8+half-buffers", "1x16x8"}
    again, synthesized, work = sweep_of(6)
    assert synthesized == again["synthesized"] == 1 and work == 2  # the new config alone
    assert [p["lut"] for p in again["points"][:5]] == [p["lut"] for p in r["points"]]
    # sources edited, the designs unchanged: each config elaborated again, none synthesized
    import tilecraft.hw.rtl as rtl

    monkeypatch.setattr(rtl, "elaboration_digest", lambda: "edited sources")
    edited, synthesized, work = sweep_of(2)
    assert synthesized == edited["synthesized"] == 0 and work == 2
    assert [p["lut"] for p in edited["points"]] == [p["lut"] for p in r["points"][:2]]
    variant[0] = " another design"  # the same sources: the design remembered, not elaborated
    assert sweep_of(2)[1] == 0
    monkeypatch.setattr(rtl, "elaboration_digest", lambda: "edited again")
    changed, synthesized, _ = sweep_of(2)
    assert synthesized == changed["synthesized"] == 2  # a changed design is synthesized again
    assert {p["design"] for p in changed["points"]} == {
        c.digest + " another design" for _, c in sweep_configs(2)
    }
    kept = json.loads(cache.read_text())
    assert len(kept["figures"]) == 8 and len(kept["designs"]) == 6 + 2 + 2


def test_a_point_that_leaves_more_layers_on_the_host_is_off_the_fronts(tmp_path, monkeypatch):
    """Its latency is its accelerator's alone: 1x16x8 leaves MobileNetV2's depthwise convs and
    the pools to the host (blocks not square), and would look faster than it is."""
    from tilecraft.benchmarks.tables import _dse
    from tilecraft.cli.dse import format_table

    _fakes(monkeypatch, [])
    fake = evaluation.network_latency

    def latency(cfg, model, **tuning):
        out = fake(cfg, model, **tuning)
        if cfg.block_in != cfg.block_out:  # faster than any: its host work is not counted
            out |= {"latency_ms": 0.1, "host_layers": ["pool", "dw"], "host_macs": 9}
        return out

    monkeypatch.setattr(evaluation, "network_latency", latency)
    r = sweep.run_sweep("xc7z020", limit=8, workers=0, cache=tmp_path / "c.json", workdir=tmp_path)
    off = {p["name"] for p in r["points"] if not p["compared"]}
    wide = {p["name"] for p in r["points"] if p["name"].startswith("1x16x8")}
    assert off == wide and len(wide) == 4 and r["host_layers_compared"] == []
    on = {n for names in (*r["fronts"].values(), *r["fronts_without_unit"].values()) for n in names}
    assert on and not on & off  # the fastest points, yet on no front
    assert "1x16x8" not in r["fronts"]["joint"] and "1x8x8" in r["fronts"]["lut"]
    text = format_table(r).splitlines()
    row = next(x for x in text if x.split()[0] == "1x16x8")
    assert row.endswith("off the fronts: 2 layers on the host") and "none on the host" in text[0]
    assert "0.1 (not compared: 2 layers on the host)" in _dse(r | {"related": {}})
    # where every point leaves the same layers there, all are compared
    assert sweep.compared_host_layers([{"host_layers": ["b", "a"]}] * 2) == ["a", "b"]
    few = [{"host_layers": ["a", "b"]}, {"host_layers": ["c"]}]
    assert sweep.compared_host_layers(few) == ["c"] and sweep.compared_host_layers([]) == []


def test_a_failing_point_is_reported_not_raised(tmp_path, monkeypatch):
    _fakes(monkeypatch, [])

    def broken(cfg, model, **tuning):
        raise TilecraftError("the tiles do not fit")

    monkeypatch.setattr(evaluation, "network_latency", broken)
    r = sweep.run_sweep("xczu7ev", limit=2, workers=0, cache=tmp_path / "c.json", workdir=tmp_path)
    assert all(p["error"] == "TilecraftError: the tiles do not fit" for p in r["points"])
    assert r["fronts"] == {}


def test_bad_input(tmp_path):
    with pytest.raises(ConfigError, match="unknown part 'xc9z999' for a sweep; known: xc7z010"):
        sweep.run_sweep("xc9z999", cache=tmp_path / "c.json")
    bad = tmp_path / "bad.json"
    for text in ("{not json", '{"figures": []}', "[]"):
        bad.write_text(text)
        with pytest.raises(TilecraftError, match="synthesis cache .* is unreadable"):
            sweep.SynthCache(bad)


def _square(name, config, part, model, cached, workdir):
    return {"name": name, "value": config * config, "error": None}


def test_the_points_run_as_dask_tasks():
    pytest.importorskip("distributed")
    jobs = [(f"p{k}", k, "xc7z020", "m", None, ".") for k in range(4)]
    got = sweep._evaluate_all(jobs, workers=2, scheduler=None, function=_square, processes=False)
    assert sorted(p["value"] for p in got) == [0, 1, 4, 9]


def _fails_on_two(name, config, part, model, cached, workdir):
    if config == 2:
        raise RuntimeError("worker lost")
    return {"name": name, "value": config, "error": None}


def test_a_task_that_raises_is_a_failed_point_not_a_failed_sweep():
    pytest.importorskip("distributed")
    jobs = [(f"p{k}", k, "xc7z020", "m", None, ".") for k in range(3)]
    got = {
        p["name"]: p
        for p in sweep._evaluate_all(
            jobs, workers=1, scheduler=None, function=_fails_on_two, processes=False
        )
    }
    assert got["p2"]["error"] == "RuntimeError: worker lost"
    assert got["p0"]["error"] is None and got["p1"]["value"] == 1


def test_the_space_leaves_out_configs_the_rtl_cannot_build():
    from tilecraft.hw.isa import isa_for

    for _, cfg in sweep_configs():
        assert cfg.elem_bytes("out") % cfg.axi_bytes == 0
        assert isa_for(cfg).config == cfg
    names = [n for n, _ in sweep_configs()]
    assert "1x8x8+axi128" not in names and "1x8x8+double-buffers" not in names


def test_a_point_with_tuned_schedules_tunes_each_layer_once(tmp_path):
    pytest.importorskip("xgboost", reason="the tuner's cost model needs xgboost (tune extra)")
    from tilecraft.compiler.tune.records import Records, tool_version

    cfg = preset("1x8x8")
    tuned = evaluation.network_latency(cfg, "digits", trials=2, records_dir=tmp_path)
    assert tuned["schedules"] == "tuned (2 trials a layer)" and tuned["latency_ms"] > 0
    path = tmp_path / f"{cfg.tag}-{cfg.digest}.jsonl"
    records = Records(path, cfg.digest, tool_version("cycle-model"))
    lines = path.read_text().splitlines()
    layers = {r.task for r in records.records}
    assert len(layers) >= 2 and len(lines) == 2 * len(layers)
    again = evaluation.network_latency(cfg, "digits", trials=2, records_dir=tmp_path)
    assert path.read_text().splitlines() == lines  # resumed: nothing measured again
    assert again["accelerator_cycles"] == tuned["accelerator_cycles"]
    plain = evaluation.network_latency(cfg, "digits")
    assert plain["schedules"] == "heuristic" and plain["accelerator_cycles"] > 0
    assert plain["host_layers"] == [] and plain["host_macs"] == 0


def test_a_point_names_the_layers_its_config_leaves_on_the_host():
    """1x16x8 cannot widen its rows through the GEMM (BLOCK_IN != BLOCK_OUT): the digits CNN's
    pools run on the host there, and its accelerator cycles leave them out."""
    wide = evaluation.network_latency(preset("1x16x8"), "digits")
    assert wide["host_layers"] == ["pool", "gap"] and wide["host_macs"] == 0


def test_a_point_with_the_unit_compiles_its_epilogues_onto_it():
    cfg = preset("1x8x8")
    plain = evaluation.network_latency(cfg, "digits")
    unit = evaluation.network_latency(cfg.with_requant_unit(), "digits")
    assert 0 < unit["accelerator_cycles"] < 0.9 * plain["accelerator_cycles"]
