"""Writing files so that nothing written is lost or half-written: a temp file beside the target,
then a rename (atomic on POSIX). `check_writable` lets a command refuse a bad output path before
it spends minutes on work it could not save."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tilecraft.errors import PathError


def check_writable(path: str | Path, what: str = "output") -> Path:
    """`path` if a file can be written there (its folder exists and it is not a folder);
    otherwise a PathError naming the path and what is wrong."""
    path = Path(path)
    if path.is_dir():
        raise PathError(f"{what} path {str(path)!r} is a folder; give a file name inside it")
    parent = path.parent
    if not parent.is_dir():
        problem = "is not a folder" if parent.exists() else "does not exist"
        raise PathError(f"cannot write {what} {str(path)!r}: the folder {str(parent)!r} {problem}")
    if not os.access(parent, os.W_OK):
        raise PathError(f"cannot write {what} {str(path)!r}: the folder is not writable")
    return path


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write `data` to `path` through `path.tmp` and a rename; the temp file never outlives a
    failed write. Returns the path."""
    path = check_writable(path, "file")
    tmp = path.with_name(path.name + ".tmp")
    try:
        if isinstance(data, str):
            tmp.write_text(data)
        else:
            tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        raise PathError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: str | Path, data) -> Path:
    """`data` as indented JSON (numpy scalars and objects with `to_dict` included), atomically."""
    return write_atomic(path, json.dumps(data, indent=2, default=_jsonable) + "\n")


def read_json(path: str | Path, what: str = "JSON file"):
    """The JSON in `path`; a PathError naming the path if it cannot be read or is not JSON."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise PathError(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise PathError(f"{what} {str(path)!r} is not JSON: {exc}") from None


def _jsonable(obj):
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")
