"""Atomic writes: the file appears whole or not at all, and no temp file is left behind."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tilecraft.files import write_atomic, write_json


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    assert write_atomic(path, "new") == path
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "folder"
    target.mkdir()  # a folder cannot be replaced by a file
    with pytest.raises(OSError):
        write_atomic(target, b"data")
    assert target.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]


def test_json_takes_numpy_scalars_and_records(tmp_path):
    class Record:
        def to_dict(self):
            return {"x": 1}

    path = write_json(tmp_path / "r.json", {"a": np.int64(3), "b": np.float32(0.5), "r": Record()})
    assert json.loads(path.read_text()) == {"a": 3, "b": 0.5, "r": {"x": 1}}
    with pytest.raises(TypeError, match="cannot write object as JSON"):
        write_json(tmp_path / "bad.json", {"o": object()})
    assert not (tmp_path / "bad.json.tmp").exists()
