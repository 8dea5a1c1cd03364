"""Writing files so that nothing written is lost or half-written: a temp file beside the target,
then a rename (atomic on POSIX)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write `data` to `path` through `path.tmp` and a rename; the temp file never outlives a
    failed write. Returns the path."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        if isinstance(data, str):
            tmp.write_text(data)
        else:
            tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def write_json(path: str | Path, data) -> Path:
    """`data` as indented JSON (numpy scalars and objects with `to_dict` included), atomically."""
    return write_atomic(path, json.dumps(data, indent=2, default=_jsonable) + "\n")


def _jsonable(obj):
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")
