"""Verilator's runtime library compiled once, not once per model.

Every Verilator model links the same runtime (verilated.cpp, verilated_vpi.cpp,
verilated_threads.cpp, verilated_dpi.cpp): about 10 of the 50 seconds a model of the default
config takes to build on one core, the same objects each time. Verilator's Makefile runs every
compile as `$(OBJCACHE) $(CXX) ... -c -o X.o SOURCE`; `OBJCACHE` is set to a small shell
script (`SCRIPT`, written into the model cache) that compiles as asked, and for a source of
the runtime library (under Verilator's include folder) keeps X.o and its dependency file X.d
by a checksum of the whole command, the compiler's version and the source, and copies them
back the next time the same command comes. A model's own files (and cocotb's main, which
includes the model's header) are always compiled. A failed compile is passed on and nothing
is kept; two builds filling the cache at once each write their own temporary file and rename
it into place, the dependency file first, so a reader that finds an object finds both.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from contextlib import suppress
from pathlib import Path

SCRIPT = r"""#!/bin/sh
# tilecraft.sim.rtl.objcache: $(OBJCACHE) for Verilator's Makefile (see that module)
out=
prev=
src=
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out=$a; fi
  prev=$a
  src=$a
done
case "$src" in
  "$TILECRAFT_VERILATOR_INCLUDE"/*.cpp) ;;
  *) exec "$@" ;;
esac
if [ -z "$out" ] || [ -z "$TILECRAFT_OBJCACHE_DIR" ]; then exec "$@"; fi
key=$( { printf '%s\n' "$*"; "$1" --version 2>/dev/null | head -n 1; cksum < "$src"; } \
  | cksum | tr ' ' '-')
dir=$TILECRAFT_OBJCACHE_DIR
dep=${out%.o}.d
if [ -f "$dir/$key.o" ] && [ -f "$dir/$key.d" ]; then
  if cp "$dir/$key.o" "$out" && cp "$dir/$key.d" "$dep"; then exit 0; fi
fi
"$@" || exit $?
if [ -f "$dep" ] && mkdir -p "$dir" 2>/dev/null; then
  tmp=$dir/.tmp.$$
  if cp "$out" "$tmp.o" && cp "$dep" "$tmp.d"; then
    mv "$tmp.d" "$dir/$key.d" && mv "$tmp.o" "$dir/$key.o"
  fi
  rm -f "$tmp.o" "$tmp.d"
fi
exit 0
"""

FOLDER = ".runtime"  # inside the model cache; `build.prune` leaves dot-folders alone


SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")  # what MAKEFLAGS and make's recipe pass intact


def objcache_env(root: Path, include: Path) -> dict[str, str]:
    """The environment for Verilator's Makefile to keep its runtime objects under `root`:
    `OBJCACHE` (for MAKEFLAGS; {} where the script's path has a character that MAKEFLAGS or
    make's recipe would split or expand), the include folder whose sources are cached (as
    make names them: its real path), and the cache folder, named by a digest of every file
    under `include` and of the script (another Verilator, its headers edited, or another
    way of keying objects: a folder of its own)."""
    folder = root / FOLDER
    script = folder / "objcache.sh"
    if not SAFE_PATH.fullmatch(str(script)):
        return {}
    include = include.resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not script.exists() or script.read_text() != SCRIPT:
            tmp = folder / f".objcache.{os.getpid()}"
            tmp.write_text(SCRIPT)
            tmp.chmod(0o755)
            tmp.replace(script)
    except OSError:  # a cache that cannot be written: every build compiles its own
        return {}
    digest = _fingerprint(include)
    _forget_others(folder, digest)
    return {
        "OBJCACHE": str(script),
        "TILECRAFT_VERILATOR_INCLUDE": str(include),
        "TILECRAFT_OBJCACHE_DIR": str(folder / digest),
    }


STALE_DAYS = 14  # another installation's objects (a removed venv, a CI clone's) go after this


def _forget_others(folder: Path, digest: str, now: float | None = None) -> None:
    """Mark `digest`'s objects used, and remove other installations' not used for STALE_DAYS."""
    now = time.time() if now is None else now
    with suppress(OSError):
        mine = folder / digest
        mine.mkdir(exist_ok=True)
        os.utime(mine, (now, now))
        for d in folder.iterdir():
            if d.is_dir() and d != mine and now - d.stat().st_mtime > STALE_DAYS * 86_400:
                shutil.rmtree(d, ignore_errors=True)


def _fingerprint(include: Path) -> str:
    digest = hashlib.sha256(SCRIPT.encode())
    for f in sorted(include.rglob("*")):
        if f.is_file():
            digest.update(str(f.relative_to(include)).encode() + b"\0" + f.read_bytes())
    return digest.hexdigest()[:16]
