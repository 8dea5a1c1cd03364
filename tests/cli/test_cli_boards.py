"""`tilecraft boards`, `tilecraft build` and `tilecraft dse` from the command line."""

from __future__ import annotations

import json

import pytest

from tilecraft.cli import main


@pytest.mark.slow
def test_boards_lists_every_preset_and_its_fits(tmp_path, capsys):
    out = tmp_path / "boards.json"
    assert main(["boards", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "pynq-z1     xc7z020clg400-1" in text and "none: the open flow" in text
    rows = {r["board"]: r for r in json.loads(out.read_text())["boards"]}
    assert rows["zcu104"]["fits"]["2x16x16"]["fits"] is True
    assert rows["pynq-z1"]["fits"]["2x16x16"]["fits"] is False
    assert rows["ulx3s-85f"]["pynq"] is None and rows["kv260"]["cma_mib"] == 1000


@pytest.mark.slow
def test_build_writes_into_an_existing_folder_and_says_how_to_finish(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    folder = tmp_path / "overlay-project"
    folder.mkdir()
    assert main(["build", "--board", "pynq-z2", "--config", "1x8x8", "-o", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "Vivado is not on the PATH (the pynq-z2 needs 2024.1)" in text
    assert f"cd {folder} && ./build.sh" in text
    for name in (
        "bd.tcl",
        "project.tcl",
        "build.sh",
        "tilecraft_top.v",
        "overlay/tilecraft.toml",
        "package/pyproject.toml",
        "package/tilecraft_overlay_pynq_z2/conv.tcp",
    ):
        assert (folder / name).is_file(), name


def test_build_refuses_an_unknown_board(capsys):
    assert main(["build", "--board", "arty", "-o", "x"]) == 1
    assert "unknown board 'arty'; valid: kv260, pynq-z1" in capsys.readouterr().err


def test_dse_prints_the_front_and_writes_json_and_a_plot(tmp_path, capsys, monkeypatch):
    import tilecraft.boards.flows.resources as resources
    from tilecraft.explore import evaluate

    class Synth:
        def __init__(self, cfg):
            n = cfg.batch * cfg.block_in * cfg.block_out
            self.lut, self.ff, self.dsp, self.bram36, self.uram, self.seconds = (
                100 * n, 10 * n, n // 2, n // 4, 0, 1.0)  # fmt: skip

    monkeypatch.setattr(resources, "synthesize", lambda cfg, part, workdir: Synth(cfg))
    monkeypatch.setattr(
        evaluate,
        "network_latency",
        lambda cfg, model, **tuning: {
            "accelerator_cycles": 1,
            "latency_ms": 1e4 / (cfg.block_in * cfg.block_out),
            "compile_seconds": 0.0,
            "host_layers": [],
            "host_macs": 0,
        },
    )
    out, png = tmp_path / "dse.json", tmp_path / "dse.png"
    argv = [
        "dse",
        "--part",
        "xczu3eg",
        "--configs",
        "5",
        "--workers",
        "0",
        "--cache",
        str(tmp_path / "cache.json"),
        "--json",
        str(out),
        "--plot",
        str(png),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert (
        "design space on xczu3eg (xcup synthesis), resnet18 (heuristic schedules): 5 configs"
        in text
    )
    assert "*o 1x16x8 " in text and "ultra96-v2" in text and "*  1x8x8+requant " in text
    assert json.loads(out.read_text())["fronts"]["joint"] and png.stat().st_size > 10_000
    assert main(["dse", "--part", "xczu3eg", "--trials", "-1"]) == 1
    assert "trials must be 0 (heuristic schedules) or more, not -1" in capsys.readouterr().err


def test_dse_records_each_part_under_its_own_suite(capsys, monkeypatch):
    from tilecraft.cli.dse import recorded_suite
    from tilecraft.explore import sweep

    assert recorded_suite("xc7z020") == "dse" and recorded_suite("xczu7ev") == "dse-xczu7ev"
    assert recorded_suite("xc7z020", "mobilenet_v2") == "dse-mobilenet-v2"
    assert recorded_suite("xczu7ev", "mobilenet_v2") == "dse-xczu7ev-mobilenet-v2"

    def never(*args, **kwargs):
        raise AssertionError("the sweep ran before --record was refused")

    monkeypatch.setattr(sweep, "run_sweep", never)
    assert main(["dse", "--part", "xczu3eg", "--record"]) == 1
    err = capsys.readouterr().err
    kept = (
        "resnet18 on xc7z020, resnet18 on xczu7ev, mobilenet_v2 on xc7z020, mobilenet_v2 on xczu7ev"
    )
    assert f"--record keeps sweeps of {kept}, not resnet18 on xczu3eg: drop --record" in err
    assert main(["dse", "--part", "xczu3eg", "--model", "mobilenet_v2", "--record"]) == 1
    assert "not mobilenet_v2 on xczu3eg: drop --record" in capsys.readouterr().err


def test_hw_timing_writes_json_and_a_slack_plot(tmp_path, capsys, monkeypatch):
    import tilecraft.boards.flows.ecp5 as ecp5
    from tilecraft.boards.flows.sta import EndpointSummary, PathGroup

    summary = EndpointSummary(
        period_ns=10.0, endpoints=6, failing=2, worst_ns=12.5, total_negative_slack_ns=3.5,
        groups=[PathGroup("dut.core.a", "dut.core.b", 2, 12.5)],
        histogram=[0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1],
    )  # fmt: skip
    report = ecp5.TimingReport(
        config="1x8x8",
        device="LFE5U-85F",
        package="CABGA381",
        speed=6,
        target_mhz=100.0,
        fmax_mhz=80.0,
        routed=True,
        seconds=1.0,
        endpoints=summary,
    )
    monkeypatch.setattr(ecp5, "timing", lambda cfg, **options: report)
    out, png = tmp_path / "t.json", tmp_path / "t.png"
    assert main(["hw", "timing", "--json", str(out), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "2 of 6 endpoints miss 10 ns" in text and "dut.core.a -> dut.core.b" in text
    data = json.loads(out.read_text())
    assert data["fmax_mhz"] == 80.0 and data["endpoints"]["failing"] == 2
    assert png.stat().st_size > 10_000


def test_hw_timing_routes_at_several_seeds_and_keeps_a_row_each(tmp_path, capsys, monkeypatch):
    import tilecraft.boards.flows.ecp5 as ecp5

    asked = {}

    def route(cfg, seeds, **options):
        asked.update(seeds=seeds, **options)
        return [
            ecp5.TimingReport(
                config=cfg.tag,
                device="LFE5U-85F",
                package="CABGA381",
                speed=6,
                target_mhz=100.0,
                fmax_mhz=fmax,
                routed=True,
                seconds=900.0,
                seed=seed,
            )  # fmt: skip
            for seed, fmax in zip(seeds, (99.1, 101.5, 100.5))
        ]

    monkeypatch.setattr(ecp5, "timing_over_seeds", route)
    out = tmp_path / "t.json"
    argv = ["hw", "timing", "--seeds", "3,default,1", "--workers", "2", "--json", str(out)]
    assert main(argv) == 0
    assert asked["seeds"] == [3, None, 1] and asked["workers"] == 2
    text = capsys.readouterr().out
    assert "routed at >= 100 MHz: 1 of 2 numbered seeds; nextpnr's default seed: met" in text
    data = json.loads(out.read_text())
    assert data["seed"] is None and data["fmax_mhz"] == 101.5  # the default seed's route
    assert [(r["seed"], r["fmax_mhz"], r["met"]) for r in data["seeds"]] == [
        (3, 99.1, False),
        ("default", 101.5, True),
        (1, 100.5, True),
    ]


def test_hw_timing_records_no_utilisation_without_a_route(capsys, monkeypatch):
    """A route stopped or out of time has no nextpnr report, so no utilisation: --record keeps
    the timing result (a placement's estimate, routed false) but writes no zeros into the
    package's synthesis figures, which `tilecraft boards` judges fits by."""
    import tilecraft.boards.fit as fit
    import tilecraft.boards.flows.ecp5 as ecp5
    import tilecraft.cli.boards as cli_boards

    recorded, figures = [], []
    report = ecp5.TimingReport(
        config="1x8x8", device="LFE5U-85F", package="CABGA381", speed=6, target_mhz=100.0,
        fmax_mhz=68.2, routed=False, seconds=1.0, stopped=True, error="stopped by signal 15",
    )  # fmt: skip
    monkeypatch.setattr(ecp5, "timing", lambda cfg, **options: report)
    monkeypatch.setattr(fit, "record", lambda figure, cfg: figures.append(dict(figure, cfg=cfg)))
    monkeypatch.setattr(cli_boards, "record_result", lambda suite, data: recorded.append(data))
    assert main(["hw", "timing", "--record"]) == 0
    assert "not recorded in the package's figures" in capsys.readouterr().out
    assert figures == [] and recorded[0]["routed"] is False and recorded[0]["fmax_mhz"] == 68.2
    report.resources = {"TRELLIS_COMB": {"used": 900, "available": 83640}}
    assert main(["hw", "timing", "--record"]) == 0
    assert figures[0]["lut"] == 900 and figures[0]["family"] == "ecp5"
    assert figures[0]["cfg"].tag == figures[0]["tag"]  # its design is recorded with it


def test_hw_timing_routes_a_unit_alone(tmp_path, capsys, monkeypatch):
    import tilecraft.boards.flows.unit_timing as unit_timing
    from tilecraft.boards.flows.ecp5 import TimingReport

    asked = {}

    def route(unit, copies, **options):
        asked.update(unit=unit, copies=copies, **options)
        return TimingReport(
            config=f"{unit} x{copies}", device="LFE5U-85F", package="CABGA381", speed=6,
            target_mhz=options["target_mhz"], fmax_mhz=142.3, routed=True, seconds=30.0,
        )  # fmt: skip

    monkeypatch.setattr(unit_timing, "unit_timing", route)
    out = tmp_path / "u.json"
    argv = ["hw", "timing", "--unit", "requant-lane", "--copies", "8", "--freq", "150"]
    assert main([*argv, "--json", str(out)]) == 0
    assert asked["unit"] == "requant-lane" and asked["copies"] == 8
    assert asked["target_mhz"] == 150.0
    assert "requant-lane x8 on the LFE5U-85F" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["unit"] == "requant-lane" and data["fmax_mhz"] == 142.3
    assert main(["hw", "timing", "--unit", "requant-lane", "--record"]) == 1
    assert "routes on the ECP5 flow only, and records nothing: drop --record" in (
        capsys.readouterr().err
    )
