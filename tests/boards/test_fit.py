"""Which configs fit which board: the committed synthesis figures against the parts."""

from __future__ import annotations

import json

import pytest

from tilecraft.boards import board
from tilecraft.boards.fit import PARTS, Fit, family, fit, measured
from tilecraft.hw.config import preset, preset_names


def test_the_figures_are_of_current_presets():
    tags = {preset(n).tag: n for n in preset_names()}
    for f in measured():
        assert tags.get(f["tag"]) == f["config"], f  # a renamed or changed preset: re-measure
        assert f["family"] in ("xc7", "xcup", "ecp5") and f["lut"] > 0 and f["dsp"] > 0


def test_2x16x16_fits_the_zcu104_and_not_the_pynq_z1():
    zcu = fit(preset("2x16x16"), board("zcu104"), "2x16x16")
    assert zcu.fits and zcu.basis == "xcup" and not zcu.tight
    assert zcu.fractions["bram36"] == pytest.approx(159 / 312)
    z1 = fit(preset("2x16x16"), board("pynq-z1"), "2x16x16")
    assert z1.fits is False and z1.fractions["dsp"] > 1
    assert z1.describe().startswith("does not fit: dsp 125%")


def test_the_default_config_fits_the_pynq_z1_under_70_percent():
    f = fit(preset("default"), board("pynq-z1"))
    assert f.fits and max(f.fractions.values()) < 0.7 and f.basis == "xc7"


def test_an_unmeasured_config_says_how_to_measure_it():
    f = fit(preset("1x32x32"), board("pynq-z2"), "1x32x32")
    assert f.fits is None and f.fractions == {}
    assert f.describe() == "not measured: tilecraft hw resources --config 1x32x32 --part xc7z020"


def test_an_ultrascale_part_without_its_own_figure_says_whose_it_used(monkeypatch):
    import tilecraft.boards.fit as fits

    only_xc7 = [f for f in measured() if f["family"] == "xc7"]
    monkeypatch.setattr(fits, "measured", lambda: only_xc7)
    f = fit(preset("1x8x8"), board("kv260"), "1x8x8")
    assert f.basis == "xc7" and ", judged on its xc7 synthesis" in f.describe()
    assert fit(preset("1x8x8"), board("pynq-z1")).basis == "xc7"


def test_tight_and_uram_accounting():
    f = Fit(
        "x", "xczu3eg", {"lut": 0.85 * 70560, "ff": 1, "dsp": 1, "bram36": 1, "uram": 0}, "xcup"
    )
    assert f.fits and f.tight and "uram" not in f.fractions
    g = Fit("x", "xczu3eg", {"lut": 1, "ff": 1, "dsp": 1, "bram36": 1, "uram": 2}, "xcup")
    assert g.fits is False  # the ZU3EG has no URAM at all
    assert family("xck26") == "xcup" and family("xc7z020") == "xc7"
    assert set(PARTS["xc7z020"]) == set(PARTS["xczu7ev"])


def test_a_figure_from_an_earlier_rtl_says_how_to_measure_it_again(monkeypatch):
    import tilecraft.boards.fit as fits
    from tilecraft.hw.rtl import source_digest

    figures = [dict(f, rtl="0" * 16) for f in measured()]
    for f in figures:
        f.pop("design", None)  # the sources' digest alone decides
    monkeypatch.setattr(fits, "measured", lambda: figures)
    old = fit(preset("default"), board("pynq-z1"), "default")
    assert not old.current and old.fits
    assert old.describe().endswith(
        "; measured on an earlier RTL (again: tilecraft hw resources "
        "--config default --part xc7z020 --record)"
    )
    for f in figures:
        f["rtl"] = source_digest()
    new = fit(preset("default"), board("pynq-z1"), "default")
    assert new.current and "earlier RTL" not in new.describe()


def test_a_recorded_figure_names_the_rtl_it_was_measured_on(tmp_path, monkeypatch):
    import json
    import shutil
    from importlib import resources

    import tilecraft.boards.fit as fits
    from tilecraft.hw.rtl import source_digest

    shutil.copy(resources.files("tilecraft.boards").joinpath("synthesis.json"), tmp_path)
    before = len(measured())
    monkeypatch.setattr(fits.resources, "files", lambda package: tmp_path)
    fits.record(
        {
            "config": "1x16x8",
            "tag": preset("1x16x8").tag,
            "family": "xc7",
            "lut": 9,
            "ff": 9,
            "dsp": 9,
            "bram36": 9,
            "uram": 0,
            "seconds": 1,
        }
    )
    saved = json.loads((tmp_path / "synthesis.json").read_text())["figures"]
    mine = [f for f in saved if f["config"] == "1x16x8"]
    assert len(mine) == 1 and mine[0]["rtl"] == source_digest()
    assert len(saved) == before + 1  # the others kept


def test_a_figure_stands_while_its_config_elaborates_to_the_design_it_was_measured_on(
    monkeypatch,
):
    """A change to a part of the RTL a config does not have (a unit it leaves out) changes the
    sources' digest but not the config's design: its figure is still the tree's."""
    import tilecraft.boards.fit as fits

    figures = [dict(f, rtl="0" * 16, design="d" * 16) for f in measured()]
    monkeypatch.setattr(fits, "measured", lambda: figures)
    monkeypatch.setattr(fits, "design_of", lambda cfg, fam: "d" * 16)
    assert fit(preset("default"), board("pynq-z1"), "default").current
    monkeypatch.setattr(fits, "design_of", lambda cfg, fam: "e" * 16)
    changed = fit(preset("default"), board("pynq-z1"), "default")
    assert not changed.current and "earlier RTL" in changed.describe()
    for f in figures:
        del f["design"]  # recorded before designs were: the sources' digest alone decides
    assert not fit(preset("default"), board("pynq-z1"), "default").current


def test_restamp_marks_the_figures_whose_design_is_unchanged(tmp_path, monkeypatch):
    import shutil
    from importlib import resources

    import tilecraft.boards.fit as fits
    from tilecraft.hw.rtl import source_digest

    real = resources.files("tilecraft.boards")
    shutil.copy(real.joinpath("synthesis.json"), tmp_path)

    class Files:  # the figures from tmp_path, the rest (the board presets) as installed
        def joinpath(self, name):
            return tmp_path / name if name == "synthesis.json" else real.joinpath(name)

    monkeypatch.setattr(fits.resources, "files", lambda package: Files())
    path = tmp_path / "synthesis.json"
    data = json.loads(path.read_text())
    same = preset("1x8x8")
    for f in data["figures"]:
        f["rtl"] = "0" * 16
        if f["family"] == "xc7":
            f["design"] = "same" if f["tag"] == same.tag else "before"
        else:
            f.pop("design", None)
    path.write_text(json.dumps(data))
    monkeypatch.setattr(
        fits, "design_of", lambda cfg, fam: "same" if cfg.tag == same.tag else "after"
    )
    done = {(c, fam): what for c, fam, what in fits.restamp()}
    assert done[("1x8x8", "xc7")] == "stamped"
    assert done[("default", "xc7")] == "changed"
    assert done[("default", "xcup")] == "no design"
    saved = {(f["config"], f["family"]): f for f in json.loads(path.read_text())["figures"]}
    assert saved[("1x8x8", "xc7")]["rtl"] == source_digest()
    assert saved[("1x8x8", "xc7")]["design"] == "same"  # kept
    assert saved[("default", "xc7")]["rtl"] == "0" * 16  # left to be measured again
    assert fits.restamp() == [(c, fam, w) for (c, fam), w in done.items() if w != "stamped"]


def test_the_rtl_digest_follows_its_sources(tmp_path, monkeypatch):
    import tilecraft.hw.rtl as rtl

    (tmp_path / "alu.py").write_text("x = 1\n")
    monkeypatch.setattr(rtl, "HERE", tmp_path)
    first = rtl.source_digest()
    (tmp_path / "alu.py").write_text("x = 2\n")
    assert rtl.source_digest() != first and len(first) == 16


def test_a_design_is_named_by_its_verilog_and_a_config_by_the_sources_it_is_elaborated_from(
    tmp_path, monkeypatch
):
    """`design_digest` reads the Verilog without Amaranth's source attributes (files, lines):
    the same cells from edited sources are the same design, a changed cell is another.
    `elaboration_digest` reads all of tilecraft.hw (a layout in hw/isa changes the Verilog
    as surely as the RTL does), by code, not text."""
    import tilecraft.hw.rtl as rtl

    cell = '  (* src = "{}" *)\n  assign y = a & b;\n'
    same = rtl.design_digest(cell.format("/work/main/src/tilecraft/hw/rtl/alu.py:40"))
    assert same == rtl.design_digest(cell.format("/elsewhere/hw/rtl/alu.py:52"))
    assert same != rtl.design_digest(cell.format("alu.py:40").replace("&", "|"))
    (tmp_path / "rtl").mkdir()
    (tmp_path / "isa").mkdir()
    (tmp_path / "rtl" / "alu.py").write_text("x = 1\n")
    (tmp_path / "isa" / "formats.py").write_text("BITS = 3  # a field's width\n")
    monkeypatch.setattr(rtl, "HERE", tmp_path / "rtl")
    first = rtl.elaboration_digest()
    (tmp_path / "isa" / "formats.py").write_text('"""The layouts."""\nBITS = 3\n')
    assert rtl.elaboration_digest() == first  # a docstring and a comment: the same code
    (tmp_path / "isa" / "formats.py").write_text("BITS = 4\n")
    assert rtl.elaboration_digest() != first and len(first) == 16


def test_an_unnamed_config_is_advised_as_a_file_and_wrong_types_are_named():
    """The advice for a config fit() was not given a name named its tag, which --config does
    not take."""
    from tilecraft.errors import ConfigError
    from tilecraft.hw.config import HwConfig

    unmeasured = HwConfig(log_inp_buff=16)
    text = fit(unmeasured, board("pynq-z1")).describe()
    assert "--config F.toml (HwConfig.save('F.toml') writes it)" in text
    assert unmeasured.tag not in text
    assert "--config mine.toml" in fit(unmeasured, board("pynq-z1"), "mine.toml").describe()
    with pytest.raises(ConfigError, match="config must be an HwConfig"):
        fit("default", board("pynq-z1"))
    with pytest.raises(ConfigError, match=r"board must be a Board \(tilecraft.boards.board"):
        fit(unmeasured, "pynq-z1")
