"""The one artifact reader/writer: any kind of artifact round-trips; a file of another kind,
version or content is refused with the file's name and what would be valid; members are checked
before they are read."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from tilecraft.artifact import read_arrays, read_artifact, write_artifact
from tilecraft.errors import ArtifactError, DeviceError


def _kernel_cache(tmp_path, version=1):
    arrays = {"code": np.arange(5, dtype=np.uint8), "table/x": np.eye(2, dtype=np.float32)}
    return write_artifact(
        tmp_path / "k.tck", {"format": "kernel-cache", "version": version, "arch": "x86"}, arrays
    )


def test_any_kind_round_trips_and_leaves_no_temp(tmp_path):
    path = _kernel_cache(tmp_path)
    header, arrays = read_artifact(path, "kernel-cache", 1, kind="kernel cache")
    assert header == {"format": "kernel-cache", "version": 1, "arch": "x86"}
    assert arrays["code"].tolist() == [0, 1, 2, 3, 4] and arrays["table/x"].dtype == np.float32
    assert [p.name for p in tmp_path.iterdir()] == ["k.tck"]


def test_another_format_or_version_is_named(tmp_path):
    path = _kernel_cache(tmp_path, version=3)
    with pytest.raises(ArtifactError, match=r"is not a tilecraft program \(format 'kernel-cache'"):
        read_artifact(path, "tilecraft-program", 2, kind="program")
    with pytest.raises(ArtifactError, match=r"version 3; this tilecraft reads version 1 \(upgrade"):
        read_artifact(path, "kernel-cache", 1, kind="kernel cache")
    with pytest.raises(ArtifactError, match=r"version 3; .* reads version 4 \(rebuild the cache\)"):
        read_artifact(path, "kernel-cache", 4, kind="kernel cache", remake="rebuild the cache")


def test_an_edited_array_fails_the_digest(tmp_path):
    path = _kernel_cache(tmp_path)
    data = bytearray(path.read_bytes())
    data[data.index(bytes([0, 1, 2, 3, 4])) + 2] = 9
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="Bad CRC-32 for file 'code.npy'"):  # the zip's own
        read_artifact(path, "kernel-cache", 1, kind="kernel cache")
    with zipfile.ZipFile(_kernel_cache(tmp_path)) as zf:
        members = {m.filename: zf.read(m) for m in zf.infolist()}
    members["code.npy"] = _npy(np.array([0, 1, 9, 3, 4], np.uint8))  # a valid CRC this time
    with pytest.raises(ArtifactError, match="fails its digest check .* modified or corrupted"):
        read_artifact(_zip(path, members), "kernel-cache", 1, kind="kernel cache")


def _zip(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for name, raw in members.items():
            zf.writestr(name, raw)
    return path


def _npy(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def test_members_are_checked_before_they_are_read(tmp_path):
    with pytest.raises(DeviceError, match=r"member 'notes.txt' is not a \.npy array"):
        read_arrays(_zip(tmp_path / "a.npz", {"notes.txt": b"hi"}), DeviceError, "inputs")
    short = _npy(np.zeros(100, np.int32))[:-40]
    with pytest.raises(ArtifactError, match=r"declares \(100,\) int32 \(400 bytes\) but holds 360"):
        read_arrays(_zip(tmp_path / "b.npz", {"x.npy": short}))
    text = _npy(np.array(["a", "b"]))
    with pytest.raises(ArtifactError, match=r"member 'x.npy' holds <U1, not numbers"):
        read_arrays(_zip(tmp_path / "c.npz", {"x.npy": text}))
    with pytest.raises(ArtifactError, match=r"archive file '.*none.npz' does not exist"):
        read_arrays(tmp_path / "none.npz")
    with pytest.raises(ArtifactError, match=r"is a folder, not an archive file"):
        read_arrays(tmp_path)
    fortran = np.asfortranarray(np.arange(6).reshape(2, 3))
    got = read_arrays(_zip(tmp_path / "d.npz", {"f.npy": _npy(fortran)}))["f"]
    assert got.tolist() == [[0, 1, 2], [3, 4, 5]]
