"""Kernels built ahead of time into a shared object for a board (or any target): llvmlite
emits the object, `ziglang` (from PyPI) links it without libc (`-shared -nostdlib`), and a
manifest beside it lists each kernel's signature and the target triple. The board loads the
pair with `runtime.cpu.load_library`: ctypes and numpy, no llvmlite.

A library is written as `NAME.so` + `NAME.json` into a folder, each through a temp file and a
rename; the manifest goes last, so a half-built library is never taken for a whole one."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tilecraft.compiler.llvm.build import object_code
from tilecraft.compiler.llvm.spec import Spec
from tilecraft.compiler.llvm.targets import ZIG, Target
from tilecraft.errors import KernelError
from tilecraft.files import write_atomic
from tilecraft.runtime.cpu import MANIFEST_FORMAT, elf_target

LINK_SECONDS = 120  # the first link on a machine builds zig's own caches


@dataclass(frozen=True)
class Library:
    shared_object: Path
    manifest: Path
    target: Target
    kernels: int
    compile_seconds: float  # IR, optimisation and object emission
    link_seconds: float
    bytes: int


def build_library(
    specs: Sequence[Spec],
    target: Target,
    folder: str | Path,
    name: str = "kernels",
    host: Sequence[dict] = (),
    compute: Sequence[dict] = (),
    layouts: Sequence[dict] = (),
) -> Library:
    """Compile `specs` for `target` and link them into `folder/name.so` + `name.json`;
    `host`, `compute` and `layouts` entries (`host.host_entries`, `compute.compute_entries`,
    `host.layout_entries`) tell a board which kernel runs which host step, which accelerator
    computation and which buffer's packing or unpacking."""
    if target.name not in ZIG:
        raise KernelError(f"no linker target for {target.name!r}; valid: {', '.join(ZIG)}")
    folder = Path(folder)
    if not folder.is_dir():
        raise KernelError(f"library folder {str(folder)!r} does not exist")
    unique = list({s.symbol: s for s in specs}.values())
    start = time.perf_counter()
    obj = object_code(unique, target)
    compiled = time.perf_counter() - start
    start = time.perf_counter()
    data = link(obj, target)
    linked = time.perf_counter() - start
    found = elf_target(data)
    if found != target.name:
        raise KernelError(f"the linker made a {found} object for target {target.name}")
    so = write_atomic(folder / f"{name}.so", data)
    manifest = {
        "format": MANIFEST_FORMAT,
        "target": target.name,
        "triple": target.triple,
        "cpu": target.cpu,
        "shared_object": so.name,
        "kernels": [s.signature() for s in unique],
        "host": list(host),
        "compute": list(compute),
        "layouts": list(layouts),
    }
    path = write_atomic(folder / f"{name}.json", json.dumps(manifest, indent=1) + "\n")
    return Library(so, path, target, len(unique), compiled, linked, len(data))


def link(obj: bytes, target: Target) -> bytes:
    """A libc-free shared object from a relocatable object, by `python -m ziglang cc`."""
    zig_target, cpu = ZIG[target.name]
    with tempfile.TemporaryDirectory(prefix="tilecraft-link-") as tmp:
        o, so = Path(tmp) / "kernels.o", Path(tmp) / "kernels.so"
        o.write_bytes(obj)
        cmd = [
            sys.executable,
            "-m",
            "ziglang",
            "cc",
            "-target",
            zig_target,
            f"-mcpu={cpu}",
            "-shared",
            "-nostdlib",
            "-o",
            str(so),
            str(o),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=LINK_SECONDS)
        except subprocess.TimeoutExpired:
            raise KernelError(f"linking for {target.name} took over {LINK_SECONDS} s") from None
        if done.returncode != 0:
            if "No module named ziglang" in done.stderr:
                raise KernelError(
                    "linking a board's kernels needs ziglang: pip install 'tilecraft[cross]'"
                )
            raise KernelError(f"linking for {target.name} failed: {done.stderr.strip()[-2000:]}")
        return so.read_bytes()


def build_model_library(model, target: Target, folder: str | Path, name: str) -> Library:
    """Every kernel a compiled model needs on the host (its host steps, its buffers' layout
    kernels, and each accelerator computation for the `cpu` device) built for `target` into
    `folder/name.so` + `.json`."""
    from tilecraft.compiler.llvm.compute import compute_entries
    from tilecraft.compiler.llvm.host import host_entries, layout_entries
    from tilecraft.runtime.model import HostStep

    comps = [stage for c in model.computations() for stage in c.stages()]
    hosts = [
        (s.op, [model.tensor(i).shape for i in s.inputs])
        for s in model.steps
        if isinstance(s, HostStep)
    ]
    compute, host = compute_entries(comps, target), host_entries(hosts)
    layouts = layout_entries(model)
    return build_library(
        [spec for spec, _ in compute + host + layouts],
        target,
        folder,
        name,
        host=[e for _, e in host],
        compute=[e for _, e in compute],
        layouts=[e for _, e in layouts],
    )
