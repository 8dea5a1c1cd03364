"""A regular (non-editable) install ships every module: build the wheel, install it into a
temporary folder and import each module of the source tree from there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def _modules() -> list[str]:
    names = []
    for path in sorted((SRC / "tilecraft").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _data_files() -> list[str]:
    return [
        str(p.relative_to(SRC))
        for p in sorted((SRC / "tilecraft").rglob("*"))
        if p.is_file() and p.suffix in (".toml", ".json", ".v", ".md", ".npz")
    ]


@pytest.mark.slow
def test_the_wheel_installs_every_module_and_data_file(tmp_path):
    pip = [sys.executable, "-m", "pip", "-qq", "--disable-pip-version-check"]
    build = pip + ["wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)]
    done = subprocess.run(build, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = tmp_path.glob("tilecraft-*.whl")
    site = tmp_path / "site"
    done = subprocess.run(
        pip + ["install", "--no-deps", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    modules = _modules()
    assert len(modules) > 60
    probe = (
        "import importlib, json, sys\n"
        f"sys.path.insert(0, {str(site)!r})\n"
        f"for name in {modules!r}:\n"
        "    module = importlib.import_module(name)\n"
        f"    assert module.__file__.startswith({str(site)!r}), module.__file__\n"
        "print(json.dumps('ok'))\n"
    )
    # an empty folder as the working directory: nothing of the checkout is importable
    run = subprocess.run(
        [sys.executable, "-I", "-c", probe], capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout) == "ok"
    missing = [f for f in _data_files() if not (site / f).is_file()]
    assert not missing, f"data files left out of the wheel: {missing}"
