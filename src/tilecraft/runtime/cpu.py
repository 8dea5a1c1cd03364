"""Prebuilt host kernels on the machine that runs the model (a board's ARM core, or this one):
a shared object and its manifest (`compiler.llvm.library`), loaded with ctypes. numpy only;
the target is checked twice before anything runs, from the manifest and from the object's own
ELF header, against this machine."""

from __future__ import annotations

import ctypes
import json
import platform
from pathlib import Path

import numpy as np

from tilecraft.errors import KernelError
from tilecraft.ops import host as host_ops
from tilecraft.runtime.kernels import NativeKernel
from tilecraft.serial import to_json

MANIFEST_FORMAT = "tilecraft-kernels-1"
_MACHINES = {40: "armv7", 183: "aarch64", 62: "x86_64"}  # ELF e_machine
_UNAMES = {"armv7l": "armv7", "armv7": "armv7", "aarch64": "aarch64", "arm64": "aarch64",
           "x86_64": "x86_64", "amd64": "x86_64"}  # fmt: skip


def this_machine() -> str:
    """This machine's kernel target name (armv7, aarch64, x86_64), from `uname -m`."""
    m = platform.machine().lower()
    return _UNAMES.get(m, m)


def elf_target(data: bytes) -> str:
    """The target an ELF object is for, read from its header; a KernelError if it is not a
    little-endian ELF file of a known machine."""
    if len(data) < 20 or data[:4] != b"\x7fELF":
        raise KernelError("not an ELF shared object")
    machine = int.from_bytes(data[18:20], "little")
    bits = {1: 32, 2: 64}.get(data[4])
    name = _MACHINES.get(machine)
    if name is None or bits != (32 if name == "armv7" else 64):
        raise KernelError(f"an ELF object for machine {machine} ({bits}-bit) is no kernel target")
    return name


class KernelLibrary:
    """The kernels of one shared object, by symbol: `library[symbol](*inputs)`."""

    def __init__(self, manifest: str | Path, machine: str | None = None):
        path = Path(manifest)
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise KernelError(f"cannot read kernel manifest {str(path)!r}: {exc}") from None
        if not isinstance(meta, dict) or meta.get("format") != MANIFEST_FORMAT:
            raise KernelError(f"{str(path)!r} is not a kernel manifest of format "
                              f"{MANIFEST_FORMAT!r}")  # fmt: skip
        here = machine or this_machine()
        if meta.get("target") != here:
            raise KernelError(f"kernels built for {meta.get('triple')} ({meta.get('target')}) "
                              f"cannot run on this {here} machine")  # fmt: skip
        so = path.parent / meta["shared_object"]
        try:
            built_for = elf_target(so.read_bytes())
        except OSError as exc:
            raise KernelError(f"cannot read {str(so)!r}: {exc.strerror or exc}") from None
        if built_for != meta["target"]:
            raise KernelError(f"{so.name} is a {built_for} object; its manifest says "
                              f"{meta['target']} ({meta['triple']})")  # fmt: skip
        self.target, self.triple = meta["target"], meta["triple"]
        self._dll = ctypes.CDLL(str(so.resolve()))
        self.host = {e["key"]: e for e in meta.get("host", [])}
        self.kernels = {}
        for sig in meta["kernels"]:
            address = ctypes.cast(getattr(self._dll, sig["symbol"]), ctypes.c_void_p).value
            self.kernels[sig["symbol"]] = NativeKernel(sig, address, owner=self._dll)

    def __getitem__(self, symbol: str) -> NativeKernel:
        try:
            return self.kernels[symbol]
        except KeyError:
            raise KernelError(f"no kernel {symbol!r} in this library ({len(self.kernels)} "
                              f"kernels)") from None  # fmt: skip


def load_library(manifest: str | Path) -> KernelLibrary:
    return KernelLibrary(manifest)


def host_key(op, shapes) -> str:
    """How a host step's kernel is found: its operator record and its input shapes."""
    return json.dumps([to_json(op), [list(map(int, s)) for s in shapes]], sort_keys=True)


class LibraryKernels:
    """`HostKernels` from a prebuilt library (a board): each host step's kernel is found by
    its operator and input shapes (`host_key`) in the manifest's `host` table. A step with no
    kernel there is an error naming it; Flatten is a view and needs none."""

    name = "library"

    def __init__(self, library: KernelLibrary):
        self.library = library
        self.table = library.host

    def run(self, op, inputs, constants):
        if isinstance(op, host_ops.Flatten):
            return host_ops.run(op, inputs, constants)
        key = host_key(op, [np.shape(x) for x in inputs])
        entry = self.table.get(key)
        if entry is None:
            raise KernelError(f"the kernel library has no kernel for {type(op).__name__} on "
                              f"inputs {[list(np.shape(x)) for x in inputs]} (rebuild it for "
                              f"this model)")  # fmt: skip
        return call_host(self.library[entry["symbol"]], op, entry["bind"], inputs, constants)


def call_host(kernel, op, bind: list, inputs: list, constants: dict) -> np.ndarray:
    """Call a host step's `kernel` with its arguments in the kernel's order: `bind` names, per
    kernel input, the step's input position or a constant's name (floats go in as float32)."""
    args = []
    for source in bind:
        if isinstance(source, int):
            value = inputs[source]
            args.append(np.asarray(value, np.float32)
                        if isinstance(op, host_ops.Quantize) else value)  # fmt: skip
        else:
            args.append(constants[source])
    return kernel(*args)
