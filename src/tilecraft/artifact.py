"""Artifact files, written and read in one place: an NPZ archive (no pickle) of named arrays and,
for an artifact, a JSON header with its format, version and a digest of everything.

Programs use it today; compiled models, kernel caches and tuning records will. Reading refuses
anything malformed before allocating more than the file's own size: every member must be a
stored (uncompressed) .npy whose declared shape and dtype account for exactly its bytes, no
object arrays, a bounded JSON header. The digest is a plain SHA-256: it catches accidents, not
edits, so the reader of each artifact still checks every header field (`tilecraft.serial`).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from tilecraft.errors import ArtifactError, TilecraftError
from tilecraft.files import write_atomic

HEADER = "header"  # the member holding the JSON header
MAX_HEADER_BYTES = 1 << 24


def write_artifact(path: str | Path, header: dict[str, Any], arrays: dict[str, np.ndarray]) -> Path:
    """`header` (with its digest added) and `arrays` as one NPZ, written atomically."""
    header = {**header, "digest": digest(header, arrays)}
    blob = np.frombuffer(json.dumps(header, sort_keys=True).encode(), np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **{HEADER: blob}, **arrays)
    return write_atomic(path, buf.getvalue())


def read_artifact(
    path: str | Path,
    fmt: str,
    version: int,
    *,
    kind: str,
    error: type[TilecraftError] = ArtifactError,
    remake: str = "make it again",
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header (digest checked and removed) and arrays of a `kind` artifact (format `fmt` at
    `version`); anything else is `error` naming the file and what is wrong."""
    if not isinstance(path, (str, os.PathLike)):
        raise error(
            f"a tilecraft {kind} is read from a file path, not {type(path).__name__} {path!r}"
        )
    where = str(path)
    arrays = read_arrays(path, error, what=f"tilecraft {kind}")
    raw = arrays.pop(HEADER, None)
    if raw is None:
        raise error(f"{where!r} is not a tilecraft {kind} (no header)")
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > MAX_HEADER_BYTES:
        raise error(f"{where!r}: the header is not a JSON text of at most {MAX_HEADER_BYTES} bytes")
    try:
        header = json.loads(raw.tobytes().decode())
    except RecursionError:
        raise error(f"{where!r}: the header nests too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise error(f"{where!r} is not a readable tilecraft {kind}: {exc}") from None
    found = header.get("format") if isinstance(header, dict) else type(header).__name__
    if found != fmt:
        raise error(f"{where!r} is not a tilecraft {kind} (format {found!r})")
    stored = header.get("version")
    if stored != version:
        newer = isinstance(stored, int) and not isinstance(stored, bool) and stored > version
        advice = "upgrade tilecraft to read it" if newer else remake
        raise error(
            f"{where!r} has {kind} format version {stored!r}; this tilecraft reads version "
            f"{version} ({advice})"
        )
    stored_digest = header.pop("digest", None)
    actual = digest(header, arrays)
    if stored_digest != actual:
        raise error(
            f"{where!r} fails its digest check (stored {stored_digest}, computed {actual}): the "
            f"file was modified or corrupted"
        )
    return header, arrays


def read_arrays(
    path: str | Path, error: type[TilecraftError] = ArtifactError, what: str = "archive"
) -> dict[str, np.ndarray]:
    """The arrays of an .npz of named numeric arrays, each checked before it is read."""
    where = str(path)
    try:
        size = os.path.getsize(path)
        with zipfile.ZipFile(path) as zf:
            members = zf.infolist()
            for m in members:
                if m.compress_type != zipfile.ZIP_STORED or m.compress_size != m.file_size:
                    raise error(
                        f"{where!r}: member {m.filename!r} is compressed; arrays are stored as "
                        f"they are"
                    )
            declared = sum(m.file_size for m in members)
            if declared > size:
                raise error(f"{where!r}: its members claim {declared} bytes in a {size}-byte file")
            return {_name(m, where, error): _read_member(zf, m, where, error) for m in members}
    except TilecraftError:
        raise
    except FileNotFoundError:
        raise error(f"{what} file {where!r} does not exist") from None
    except IsADirectoryError:
        raise error(f"{where!r} is a folder, not an {what} file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as exc:
        raise error(
            f"{where!r} is not a readable {what} (truncated or foreign file): {exc}"
        ) from None


def _name(member: zipfile.ZipInfo, where: str, error) -> str:
    if not member.filename.endswith(".npy") or member.is_dir():
        raise error(f"{where!r}: member {member.filename!r} is not a .npy array")
    return member.filename[: -len(".npy")]


def _read_member(zf: zipfile.ZipFile, member: zipfile.ZipInfo, where: str, error) -> np.ndarray:
    name = member.filename
    with zf.open(member) as fp:
        version = np.lib.format.read_magic(fp)
        reader = {
            (1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0,
        }.get(version)
        if reader is None:
            raise error(f"{where!r}: member {name!r} has .npy version {version}")
        shape, fortran, dtype = reader(fp)
        if dtype.hasobject or dtype.kind not in "biuf":
            raise error(f"{where!r}: member {name!r} holds {dtype}, not numbers")
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes != member.file_size - fp.tell():
            raise error(
                f"{where!r}: member {name!r} declares {shape} {dtype} ({nbytes} bytes) but holds "
                f"{member.file_size - fp.tell()} bytes"
            )
        data = fp.read(nbytes)
    order = "F" if fortran else "C"
    return np.frombuffer(data, dtype).reshape(shape, order=order).copy()


def digest(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the header (but its digest) and every array's name, dtype, shape, bytes."""
    h = hashlib.sha256()
    body = {k: v for k, v in header.items() if k != "digest"}
    h.update(json.dumps(body, sort_keys=True).encode())
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{arr.dtype.str}:{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()
