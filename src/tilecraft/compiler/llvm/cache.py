"""The on-disk kernel cache: compiled objects by a digest of (kernel, shapes, target,
llvmlite version, code generator version). An entry is a header line of JSON (what it holds,
its length and SHA-256) then the object; it is written to a temp file and renamed. An entry
that is truncated, altered or from another llvmlite is rebuilt, never loaded."""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path

from tilecraft.compiler.llvm.targets import Target
from tilecraft.files import write_atomic

MAGIC = "tilecraft-kernel"


@cache
def codegen_version() -> str:
    """A digest of the code generator's own source (this package): any change to how a
    kernel is written changes every digest, so a cache never serves code from before it."""
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:16]


def llvmlite_version() -> str:
    import llvmlite

    return llvmlite.__version__


def spec_digest(spec) -> str:
    """What a kernel computes, whatever it is compiled for (its symbol's suffix)."""
    return hashlib.sha256(f"{codegen_version()}|{spec.code_key()}".encode()).hexdigest()


def entry_digest(spec, target: Target) -> str:
    key = (
        f"{spec_digest(spec)}|{target.triple}|{target.cpu}|{target.features}|"
        f"llvmlite {llvmlite_version()}"
    )
    return hashlib.sha256(key.encode()).hexdigest()


def default_folder() -> Path:
    """$TILECRAFT_CACHE/kernels, else $XDG_CACHE_HOME (or ~/.cache)/tilecraft/kernels."""
    if os.environ.get("TILECRAFT_CACHE"):
        return Path(os.environ["TILECRAFT_CACHE"]) / "kernels"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tilecraft" / "kernels"


class KernelCache:
    """Objects on disk under `folder` (created on first write); `hits`, `misses` and
    `rejected` (entries found unusable and rebuilt) count what happened."""

    def __init__(self, folder: str | Path | None = None):
        self.folder = Path(folder) if folder is not None else default_folder()
        self.hits = self.misses = self.rejected = 0

    def path(self, spec, target: Target) -> Path:
        return self.folder / f"{spec.symbol}-{entry_digest(spec, target)[:16]}.o"

    def get(self, spec, target: Target) -> bytes | None:
        path = self.path(spec, target)
        try:
            data = path.read_bytes()
        except OSError:
            self.misses += 1
            return None
        obj = _payload(data, spec, target)
        if obj is None:
            self.rejected += 1
            return None
        self.hits += 1
        return obj

    def put(self, spec, target: Target, obj: bytes) -> None:
        header = {
            "magic": MAGIC,
            "symbol": spec.symbol,
            "triple": target.triple,
            "cpu": target.cpu,
            "llvmlite": llvmlite_version(),
            "codegen": codegen_version(),
            "bytes": len(obj),
            "sha256": hashlib.sha256(obj).hexdigest(),
        }
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path(spec, target), json.dumps(header).encode() + b"\n" + obj)
        except (OSError, ValueError):
            pass  # a cache that cannot be written only costs a rebuild next time


def _payload(data: bytes, spec, target: Target) -> bytes | None:
    """The object in `data` if its header matches what is asked for and it is whole."""
    line, sep, obj = data.partition(b"\n")
    if not sep:
        return None
    try:
        header = json.loads(line)
    except ValueError:
        return None
    expected = {
        "magic": MAGIC,
        "symbol": spec.symbol,
        "triple": target.triple,
        "cpu": target.cpu,
        "llvmlite": llvmlite_version(),
        "codegen": codegen_version(),
        "bytes": len(obj),
        "sha256": hashlib.sha256(obj).hexdigest(),
    }
    if not isinstance(header, dict) or any(header.get(k) != v for k, v in expected.items()):
        return None
    return obj
