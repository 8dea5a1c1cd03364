"""The kernel cache: a hit loads without compiling; an entry that is truncated, altered, or
written by another llvmlite is rebuilt (and rewritten), never loaded."""

import json

import numpy as np
import pytest

from tilecraft.compiler.llvm.cache import KernelCache
from tilecraft.compiler.llvm.jit import Jit
from tilecraft.compiler.llvm.kernels.elementwise import Quantize

SPEC = Quantize((5,), 0.5, 3)
X = np.array([0.0, 1.25, -7.0, 300.0, 0.75], np.float32)
WANT = [3, 5, -11, 127, 5]  # rint(x / 0.5) + 3, saturated (2.5 -> 2 and 1.5 -> 2: ties to even)


def test_a_second_jit_finds_the_kernel_on_disk(tmp_path):
    first = Jit(KernelCache(tmp_path))
    assert first.kernel(SPEC)(X).tolist() == WANT and first.built == 1
    second = Jit(KernelCache(tmp_path))
    assert second.kernel(SPEC)(X).tolist() == WANT
    assert second.built == 0 and second.cache.hits == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "llvmlite", "garbage"])
def test_a_bad_entry_is_rebuilt_not_loaded(tmp_path, damage):
    cache = KernelCache(tmp_path)
    Jit(cache).kernel(SPEC)
    path = cache.path(SPEC, Jit(False).target)
    data = path.read_bytes()
    header, _, obj = data.partition(b"\n")
    if damage == "truncate":
        data = data[: len(data) - 100]
    elif damage == "flip":
        data = header + b"\n" + obj[:50] + bytes([obj[50] ^ 0xFF]) + obj[51:]
    elif damage == "llvmlite":
        meta = json.loads(header)
        meta["llvmlite"] = "0.1.0"
        data = json.dumps(meta).encode() + b"\n" + obj
    else:
        data = b"\x00" * 64
    path.write_bytes(data)
    again = Jit(KernelCache(tmp_path))
    assert again.kernel(SPEC)(X).tolist() == WANT
    assert again.built == 1 and again.cache.rejected == 1
    assert Jit(KernelCache(tmp_path)).cache.get(SPEC, again.target) is not None  # rewritten


def test_no_temp_files_are_left_behind(tmp_path):
    Jit(KernelCache(tmp_path)).kernel(SPEC)
    assert [p.suffix for p in tmp_path.iterdir()] == [".o"]


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TILECRAFT_CACHE", str(tmp_path))
    assert KernelCache().folder == tmp_path / "kernels"


@pytest.mark.parametrize("cached", [True, False], ids=["cache", "no-cache"])
def test_a_models_kernels_build_at_once_in_processes(tmp_path, cached):
    """`Jit.build` compiles the records not yet built in several processes, once: the
    kernels it built load without compiling again, and compute what the ones built one at a
    time do."""
    specs = [Quantize((3, 5 + i), 0.25 * (i + 1), i) for i in range(4)]
    jit = Jit(KernelCache(tmp_path) if cached else False)
    jit.build(specs + specs[:1], workers=2)
    assert jit.built == 4
    jit.build(specs)  # nothing left to build
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32) * 9
    alone = Jit(False)
    for spec in specs:
        got = jit.kernel(spec)(x[:, : spec.shape[1]])
        assert np.array_equal(got, alone.kernel(spec)(x[:, : spec.shape[1]]))
    assert jit.built == 4  # loading compiled nothing more
