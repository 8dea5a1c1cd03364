"""Atomic writes: the file appears whole or not at all, no temp file is left behind, and a path
that cannot be written is a PathError naming it (checked before any work by the CLI)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tilecraft.errors import PathError
from tilecraft.files import check_writable, write_atomic, write_json


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    assert write_atomic(path, "new") == path
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old")

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tilecraft.files.os.replace", full_disk)
    with pytest.raises(PathError, match=r"cannot write '.*out.bin': No space left on device"):
        write_atomic(path, b"new data")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_unwritable_paths_are_named_before_anything_is_written(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(PathError, match=r"--json path '.*folder' is a folder; give a file name"):
        check_writable(folder, "--json")
    with pytest.raises(PathError, match=r"the folder '.*missing' does not exist"):
        write_atomic(tmp_path / "missing" / "x.json", "{}")
    (tmp_path / "plain").write_text("")
    with pytest.raises(PathError, match=r"the folder '.*plain' is not a folder"):
        check_writable(tmp_path / "plain" / "x.json")
    assert check_writable(tmp_path / "new.json") == tmp_path / "new.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "plain"]


def test_json_takes_numpy_scalars_and_records(tmp_path):
    class Record:
        def to_dict(self):
            return {"x": 1}

    path = write_json(tmp_path / "r.json", {"a": np.int64(3), "b": np.float32(0.5), "r": Record()})
    assert json.loads(path.read_text()) == {"a": 3, "b": 0.5, "r": {"x": 1}}
    with pytest.raises(TypeError, match="cannot write object as JSON"):
        write_json(tmp_path / "bad.json", {"o": object()})
    assert not (tmp_path / "bad.json.tmp").exists()
