"""The program artifact: instruction words, micro-ops, a DRAM buffer plan and constant data, plus
what it computes (`Computation`) and the schedule it was compiled with.

A program addresses one contiguous DRAM region of `dram_size` bytes; every DRAM address in it is
relative to that region's start, so a host can place it anywhere. A `Program` is immutable and
checks its plan when it is made. On disk it is one NPZ file (no pickle): a JSON header (format,
version, config, buffer plan, computation, schedule, digest) plus the arrays. Loading checks the
format, version and digest, then reads every header field strictly (`tilecraft.serial`), and
refuses anything else with `ProgramError`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from tilecraft.artifact import digest, read_artifact, write_artifact
from tilecraft.errors import ConfigError, FormatError, ProgramError, TilecraftError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import INSN_BYTES, as_words, decode, decode_uops, isa_for, uop_dtype
from tilecraft.ops import Computation, ConvSchedule, GemmTiles
from tilecraft.runtime.buffers import BufferSpec, Role
from tilecraft.serial import from_json, to_json

FORMAT = "tilecraft-program"
VERSION = 2  # 2: typed layouts, computation and schedule (1: string-keyed meta)
MAX_DRAM_BYTES = (1 << 32) - 1  # the DRAM_SIZE register is 32 bits wide
DRAM_PAGE = 4096  # a program's region is a whole number of pages, no more than its data needs
HEADER_KEYS = (  # besides format, version and digest
    "name",
    "config",
    "config_tag",
    "config_digest",
    "insn_offset",
    "uop_offset",
    "dram_size",
    "buffers",
    "constants",
    "computation",
    "schedule",
)
Schedule = ConvSchedule | GemmTiles


@dataclass(frozen=True, eq=False)
class Program:
    config: HwConfig
    insns: np.ndarray  # (N, 2) uint64 instruction words
    uops: np.ndarray  # micro-op words (config.uop_bytes each)
    buffers: tuple[BufferSpec, ...]
    constants: MappingProxyType  # name -> stored array of a constant buffer
    insn_offset: int
    uop_offset: int
    dram_size: int
    name: str = "program"
    computation: Computation | None = None
    schedule: Schedule | None = None

    def __post_init__(self) -> None:
        insns = as_words(self.insns).copy()
        uops = np.array(self.uops, dtype=uop_dtype(isa_for(self.config)))
        constants = {k: np.array(v) for k, v in dict(self.constants).items()}
        for arr in (insns, uops, *constants.values()):
            arr.flags.writeable = False
        object.__setattr__(self, "insns", insns)
        object.__setattr__(self, "uops", uops)
        object.__setattr__(self, "constants", MappingProxyType(constants))
        object.__setattr__(self, "buffers", tuple(self.buffers))
        self._check_plan()

    def replace(self, **changes) -> Program:
        """A copy with some fields changed (checked like a new program)."""
        return dataclasses.replace(self, **changes)

    def __reduce__(self):
        """Made again from its fields when it crosses to another process (a compile's workers
        send the layers' programs back this way); files are NPZ, never pickles (`save`)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["constants"] = dict(self.constants)
        return _program_from_fields, (fields,)

    # ---- queries -------------------------------------------------------------------------
    def buffer(self, name: str) -> BufferSpec:
        for b in self.buffers:
            if b.name == name:
                return b
        raise ProgramError(
            f"program {self.name!r} has no buffer {name!r}; it has "
            f"{', '.join(b.name for b in self.buffers) or 'none'}"
        )

    def by_role(self, role: Role) -> list[BufferSpec]:
        return [b for b in self.buffers if b.role == role]

    @property
    def inputs(self) -> list[BufferSpec]:
        return self.by_role(Role.INPUT)

    @property
    def outputs(self) -> list[BufferSpec]:
        return self.by_role(Role.OUTPUT)

    def check_config(self, config: HwConfig) -> None:
        """Refuse to run on an architecturally different config (`ProgramError` naming fields)."""
        diffs = self.config.arch_mismatches(config)
        if diffs:
            raise ProgramError(
                f"program {self.name!r} is for config {self.config.tag} but the device is "
                f"{config.tag}; differing fields (program != device): " + "; ".join(diffs)
            )

    def describe(self) -> list[str]:
        """Comment lines for a listing: name, config, sizes, computation, schedule, buffers."""
        lines = [
            f"# {self.name}: config {self.config.tag}, {len(self.insns)} instructions, "
            f"{len(self.uops)} micro-ops, {self.dram_size} DRAM bytes"
        ]
        if self.computation is not None:
            lines.append(f"# computes {self.computation.describe()}")
        if self.schedule is not None:
            lines.append(f"# schedule {self.schedule.describe()}")
        for b in self.buffers:
            shown = f"{np.dtype(b.dtype)}{list(b.shape)} at byte {b.offset}"
            if b.layout is not None:
                shown += f" ({b.layout.kind} of {list(b.layout.logical)})"
            lines.append(f"# {b.role.value:8s} {b.name}: {shown}")
        return lines

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
            "buffers": [to_json(b) for b in self.buffers],
            "constants": sorted(self.constants),
            "computation": to_json(self.computation),
            "schedule": to_json(self.schedule),
        }

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"insns": self.insns.astype("<u8"), "uops": self.uops}
        out.update({f"const/{k}": np.ascontiguousarray(v) for k, v in self.constants.items()})
        return out

    @property
    def digest(self) -> str:
        return digest(self.header(), self.arrays())

    def save(self, path: str | Path) -> Path:
        """Write the NPZ atomically (temp file + rename); returns the path."""
        return write_artifact(path, self.header(), self.arrays())

    @classmethod
    def load(cls, path: str | Path, config: HwConfig | None = None) -> Program:
        """Read a program file (format, version and digest, then every header field, checked
        before anything is allocated); with `config`, also refuse one built for another config."""
        header, arrays = read_artifact(
            path,
            FORMAT,
            VERSION,
            kind="program",
            error=ProgramError,
            remake="compile the program again",
        )
        try:
            program = cls._build(header, arrays)
        except TilecraftError as exc:  # a field out of range, regions that overlap, ...
            raise ProgramError(f"{str(path)!r}: {exc}") from None
        if config is not None:
            program.check_config(config)
        return program

    @classmethod
    def from_parts(cls, header: dict, arrays: dict) -> Program:
        """A program from its header and arrays held inside another artifact (a compiled
        model), read as strictly as `load` reads a file."""
        if (
            not isinstance(header, dict)
            or header.get("format") != FORMAT
            or header.get("version") != VERSION
        ):
            raise ProgramError(f"an embedded program must be {FORMAT} version {VERSION}")
        return cls._build(header, arrays)

    @classmethod
    def _build(cls, header: dict, arrays: dict) -> Program:
        missing = [k for k in HEADER_KEYS if k not in header]
        unknown = sorted(set(header) - set(HEADER_KEYS) - {"format", "version"})
        if missing or unknown:
            raise FormatError(
                "header: "
                + (f"missing field(s) {missing}" if missing else "")
                + ("; " if missing and unknown else "")
                + (f"unknown field(s) {unknown}" if unknown else "")
            )
        if not isinstance(header["config"], dict):
            raise FormatError("config: expected an object")
        try:
            config = HwConfig.from_dict(header["config"])
        except ConfigError as exc:
            raise ProgramError(f"it holds an invalid config: {exc}") from None
        if config.digest != header["config_digest"]:
            raise ProgramError("config digest does not match its config")
        names = from_json(tuple[str, ...], header["constants"], "constants")
        for key in ("insns", "uops", *(f"const/{n}" for n in names)):
            if key not in arrays:
                raise FormatError(f"constants: the file holds no array {key!r}")
        return cls(
            config=config,
            insns=arrays["insns"],
            uops=arrays["uops"],
            buffers=from_json(tuple[BufferSpec, ...], header["buffers"], "buffers"),
            constants={n: arrays[f"const/{n}"] for n in names},
            insn_offset=from_json(int, header["insn_offset"], "insn_offset"),
            uop_offset=from_json(int, header["uop_offset"], "uop_offset"),
            dram_size=from_json(int, header["dram_size"], "dram_size"),
            name=from_json(str, header["name"], "name"),
            computation=from_json(Computation | None, header["computation"], "computation"),
            schedule=from_json(Schedule | None, header["schedule"], "schedule"),
        )

    # ---- invariants --------------------------------------------------------------------------
    def _check_plan(self) -> None:
        for key in ("insn_offset", "uop_offset", "dram_size"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ProgramError(f"{key} must be an integer, not {value!r}")
        if not 0 < self.dram_size <= MAX_DRAM_BYTES:
            raise ProgramError(
                f"dram_size {self.dram_size} must be in 1..{MAX_DRAM_BYTES} (the DRAM_SIZE "
                f"register is 32 bits)"
            )
        regions = [("instructions", self.insn_offset, len(self.insns) * INSN_BYTES)]
        regions.append(("micro-ops", self.uop_offset, self.uops.nbytes))
        regions += [(b.name, b.offset, b.nbytes) for b in self.buffers]
        end = max(off + size for _, off, size in regions)
        if self.dram_size > -(-end // DRAM_PAGE) * DRAM_PAGE:
            raise ProgramError(
                f"dram_size {self.dram_size} is larger than its regions need: they end at byte "
                f"{end}, so at most {-(-end // DRAM_PAGE) * DRAM_PAGE} (whole {DRAM_PAGE}-byte "
                f"pages)"
            )
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
        # a network's activation arena reuses a dead tensor's bytes: a scratch tensor may share
        # bytes with scratch tensors and outputs (the compiler orders their uses, the verifier
        # checks it); instructions, micro-ops, constants and inputs overlap nothing, outputs
        # no other output
        shared = {b.name for b in self.buffers if b.role in (Role.SCRATCH, Role.OUTPUT)}
        outputs = [
            (b.offset, b.offset + b.nbytes, b.name)
            for b in self.buffers
            if b.role == Role.OUTPUT and b.nbytes
        ]
        merged: list[tuple[int, int, str]] = []
        for lo, hi, name in sorted(
            (b.offset, b.offset + b.nbytes, b.name)
            for b in self.buffers
            if b.name in shared and b.nbytes
        ):
            if merged and lo < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]), merged[-1][2])
            else:
                merged.append((lo, hi, name))
        fixed = [
            (off, off + size, name) for name, off, size in regions if size and name not in shared
        ]
        for spans in (sorted(fixed + merged), sorted(outputs)):
            for (_a0, a1, an), (b0, _, bn) in zip(spans, spans[1:]):
                if b0 < a1:
                    raise ProgramError(f"{an} and {bn} overlap in DRAM at byte {b0}")
        for b in self.buffers:
            if b.layout is not None and b.layout.stored_shape(self.config) != b.shape:
                raise ProgramError(
                    f"buffer {b.name!r}: its {b.layout.kind} layout of {b.layout.logical} is "
                    f"stored as {b.layout.stored_shape(self.config)}, not {b.shape}"
                )
        for name, data in self.constants.items():
            b = self.buffer(name)
            if (
                b.role != Role.CONSTANT
                or tuple(data.shape) != b.shape
                or data.dtype != np.dtype(b.dtype)
            ):
                raise ProgramError(
                    f"constant {name!r} is {data.dtype}{tuple(data.shape)} but its buffer is a "
                    f"{b.role.value} of {np.dtype(b.dtype)}{b.shape}"
                )
        unfilled = [b.name for b in self.by_role(Role.CONSTANT) if b.name not in self.constants]
        if unfilled:
            raise ProgramError(f"constant buffer(s) {unfilled} have no data")


def _place(dram: np.ndarray, offset: int, data: np.ndarray) -> None:
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    dram[offset : offset + raw.size] = raw


def _program_from_fields(fields: dict) -> Program:
    return Program(**fields)
