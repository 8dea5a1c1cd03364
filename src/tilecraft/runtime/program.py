"""The program artifact: instruction words, micro-ops, a DRAM buffer plan and constant data.

A program addresses one contiguous DRAM region of `dram_size` bytes; every DRAM address in it
is relative to that region's start, so a host can place it anywhere. On disk it is one NPZ file
(no pickle): a JSON header (format, version, config, buffer plan, digest) plus the arrays.
Loading checks the format, version and digest and refuses anything else with `ProgramError`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tilecraft.errors import ConfigError, ProgramError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import as_words, decode, decode_uops, isa_for, uop_dtype

FORMAT = "tilecraft-program"
VERSION = 1
ROLES = ("input", "output", "constant", "scratch")


@dataclass(frozen=True)
class BufferSpec:
    """A tensor in DRAM: `shape` and `dtype` as stored, at byte `offset` of the region."""

    name: str
    role: str
    shape: tuple[int, ...]
    dtype: str
    offset: int
    layout: dict[str, Any] | None = None  # how a logical tensor maps to `shape` (compiler's)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ProgramError(f"buffer {self.name!r}: role {self.role!r} is not one of {ROLES}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).str)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass
class Program:
    config: HwConfig
    insns: np.ndarray  # (N, 2) uint64 instruction words
    uops: np.ndarray  # micro-op words (config.uop_bytes each)
    buffers: list[BufferSpec]
    constants: dict[str, np.ndarray]
    insn_offset: int
    uop_offset: int
    dram_size: int
    name: str = "program"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.insns = as_words(self.insns)
        self.uops = np.asarray(self.uops, dtype=uop_dtype(isa_for(self.config)))
        self._check_plan()

    # ---- queries -------------------------------------------------------------------------
    def buffer(self, name: str) -> BufferSpec:
        for b in self.buffers:
            if b.name == name:
                return b
        raise ProgramError(
            f"program {self.name!r} has no buffer {name!r}; it has "
            f"{', '.join(b.name for b in self.buffers) or 'none'}"
        )

    def by_role(self, role: str) -> list[BufferSpec]:
        return [b for b in self.buffers if b.role == role]

    @property
    def inputs(self) -> list[BufferSpec]:
        return self.by_role("input")

    @property
    def outputs(self) -> list[BufferSpec]:
        return self.by_role("output")

    def check_config(self, config: HwConfig) -> None:
        """Refuse to run on an architecturally different config (`ProgramError` naming fields)."""
        diffs = self.config.arch_mismatches(config)
        if diffs:
            raise ProgramError(
                f"program {self.name!r} is for config {self.config.tag} but the device is "
                f"{config.tag}; differing fields (program != device): " + "; ".join(diffs)
            )

    def table(self) -> np.ndarray:
        """The decoded instruction table."""
        return decode(isa_for(self.config), self.insns)

    def uop_table(self) -> np.ndarray:
        return decode_uops(isa_for(self.config), self.uops)

    def dram_image(self, inputs: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """The DRAM region with instructions, micro-ops, constants and the given inputs."""
        dram = np.zeros(self.dram_size, np.uint8)
        _place(dram, self.insn_offset, self.insns.astype("<u8"))
        _place(dram, self.uop_offset, self.uops)
        for name, data in self.constants.items():
            _place(dram, self.buffer(name).offset, data)
        for name, data in (inputs or {}).items():
            _place(dram, self.buffer(name).offset, data)
        return dram

    def read(self, dram: np.ndarray, name: str) -> np.ndarray:
        b = self.buffer(name)
        raw = dram[b.offset : b.offset + b.nbytes]
        return raw.view(np.dtype(b.dtype)).reshape(b.shape).copy()

    # ---- persistence -----------------------------------------------------------------------
    def header(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "config": self.config.to_dict(),
            "config_tag": self.config.tag,
            "config_digest": self.config.digest,
            "insn_offset": self.insn_offset,
            "uop_offset": self.uop_offset,
            "dram_size": self.dram_size,
            "buffers": [asdict(b) for b in self.buffers],
            "constants": sorted(self.constants),
            "meta": self.meta,
        }

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"insns": self.insns.astype("<u8"), "uops": self.uops}
        out.update({f"const/{k}": np.ascontiguousarray(v) for k, v in self.constants.items()})
        return out

    @property
    def digest(self) -> str:
        return _digest(self.header(), self.arrays())

    def save(self, path: str | Path) -> Path:
        """Write the NPZ atomically (temp file + rename); returns the path."""
        path = Path(path)
        header = self.header()
        header["digest"] = _digest(header, self.arrays())
        blob = np.frombuffer(json.dumps(header, sort_keys=True).encode(), np.uint8)
        buf = io.BytesIO()
        np.savez(buf, header=blob, **self.arrays())
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | Path, config: HwConfig | None = None) -> Program:
        """Read a program file; with `config`, also refuse one built for another config."""
        program = cls._load(Path(path))
        if config is not None:
            program.check_config(config)
        return program

    @classmethod
    def _load(cls, path: Path) -> Program:
        try:
            npz = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise ProgramError(f"program file {str(path)!r} does not exist") from None
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise ProgramError(
                f"{str(path)!r} is not a readable tilecraft program (truncated or foreign "
                f"file): {exc}"
            ) from None
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ProgramError(f"{str(path)!r} is a bare array, not a tilecraft program")
        try:
            with npz:
                files = set(npz.files)
                if "header" not in files:
                    raise ProgramError(f"{str(path)!r} is not a tilecraft program (no header)")
                header = json.loads(npz["header"].tobytes().decode())
                arrays = {k: npz[k] for k in files - {"header"}}
        except ProgramError:
            raise
        except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as exc:
            raise ProgramError(
                f"{str(path)!r} is not a readable tilecraft program (truncated or foreign "
                f"file): {exc}"
            ) from None
        return cls._from_parts(header, arrays, str(path))

    @classmethod
    def _from_parts(cls, header: dict, arrays: dict, where: str) -> Program:
        fmt = header.get("format") if isinstance(header, dict) else type(header).__name__
        if fmt != FORMAT:
            raise ProgramError(f"{where!r} is not a tilecraft program (format {fmt!r})")
        if header.get("version") != VERSION:
            raise ProgramError(
                f"{where!r} has program format version {header.get('version')!r}; this "
                f"tilecraft reads version {VERSION}"
            )
        stored = header.pop("digest", None)
        actual = _digest(header, arrays)
        if stored != actual:
            raise ProgramError(
                f"{where!r} fails its digest check (stored {stored}, computed {actual}): the file "
                f"was modified or corrupted"
            )
        try:
            return cls._build(header, arrays, where)
        except (KeyError, TypeError) as exc:
            raise ProgramError(f"{where!r}: the program header lacks or mangles {exc}") from None

    @classmethod
    def _build(cls, header: dict, arrays: dict, where: str) -> Program:
        try:
            config = HwConfig.from_dict(header["config"])
        except ConfigError as exc:
            raise ProgramError(f"{where!r} holds an invalid config: {exc}") from None
        if config.digest != header["config_digest"]:
            raise ProgramError(f"{where!r}: config digest does not match its config")
        return cls(
            config=config,
            insns=arrays["insns"],
            uops=arrays["uops"],
            buffers=[BufferSpec(**{**b, "shape": tuple(b["shape"])}) for b in header["buffers"]],
            constants={k: arrays[f"const/{k}"] for k in header["constants"]},
            insn_offset=header["insn_offset"],
            uop_offset=header["uop_offset"],
            dram_size=header["dram_size"],
            name=header["name"],
            meta=header.get("meta", {}),
        )

    # ---- invariants --------------------------------------------------------------------------
    def _check_plan(self) -> None:
        regions = [("instructions", self.insn_offset, self.insns.size * 8)]
        regions.append(("micro-ops", self.uop_offset, self.uops.nbytes))
        regions += [(b.name, b.offset, b.nbytes) for b in self.buffers]
        names = [b.name for b in self.buffers]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ProgramError(f"buffer name(s) {sorted(dup)} appear more than once")
        for name, off, size in regions:
            if off < 0 or off + size > self.dram_size:
                raise ProgramError(
                    f"{name} at DRAM bytes [{off}, {off + size}) lie outside the program's "
                    f"{self.dram_size}-byte region"
                )
        spans = sorted((off, off + size, name) for name, off, size in regions if size)
        for (_a0, a1, an), (b0, _, bn) in zip(spans, spans[1:]):
            if b0 < a1:
                raise ProgramError(f"{an} and {bn} overlap in DRAM at byte {b0}")
        for name, data in self.constants.items():
            b = self.buffer(name)
            if (
                b.role != "constant"
                or tuple(data.shape) != b.shape
                or data.dtype != np.dtype(b.dtype)
            ):
                raise ProgramError(
                    f"constant {name!r} is {data.dtype}{tuple(data.shape)} but its buffer is a "
                    f"{b.role} of {np.dtype(b.dtype)}{b.shape}"
                )


def _place(dram: np.ndarray, offset: int, data: np.ndarray) -> None:
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    dram[offset : offset + raw.size] = raw


def _digest(header: dict, arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    body = {k: v for k, v in header.items() if k != "digest"}
    h.update(json.dumps(body, sort_keys=True).encode())
    for name in sorted(arrays):
        arr = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{arr.dtype.str}:{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()
