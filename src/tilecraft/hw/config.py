"""HwConfig: the single source of truth for every size, width and timing of the accelerator.

The log2 parameters are VTA's (same names, same shipped defaults), so VTA's published figures
compare. Everything else (depths, element sizes, ISA field widths) is derived from them.
A config is frozen and validated on construction; bad values raise `ConfigError` naming the field,
the value and what would be valid.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import reprlib
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from tilecraft.errors import ConfigError
from tilecraft.files import write_atomic

try:  # Python 3.11+
    import tomllib as _toml  # novm
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 on the boards
    import tomli as _toml  # type: ignore[no-redef]

toml_loads = _toml.loads

# (low, high) inclusive ranges of every integer field; the reason text is part of the error.
_RANGES: dict[str, tuple[int, int]] = {
    "log_inp_width": (3, 4),
    "log_wgt_width": (3, 4),
    "log_acc_width": (4, 5),
    "log_batch": (0, 4),
    "log_block_in": (1, 6),
    "log_block_out": (1, 6),
    "log_uop_buff": (8, 20),
    "log_inp_buff": (8, 22),
    "log_wgt_buff": (8, 24),
    "log_acc_buff": (8, 22),
    "axi_data_bits": (32, 1024),
    "dram_latency": (1, 4096),
    "burst_len": (1, 256),
    "dep_queue_depth": (1, 4096),
    "cmd_queue_depth": (1, 4096),
    "requant_lanes": (0, 64),
    "depthwise_window": (0, 7),
    "store_to_inp": (0, 1),
    "requant_residual": (0, 1),
}

# Fields that change what a program means or whether it deadlocks. The rest (clock, bus width,
# DRAM timing) only change how long it takes, so a program runs unchanged across them.
ARCH_FIELDS = (
    "log_inp_width",
    "log_wgt_width",
    "log_acc_width",
    "log_batch",
    "log_block_in",
    "log_block_out",
    "log_uop_buff",
    "log_inp_buff",
    "log_wgt_buff",
    "log_acc_buff",
    "dep_queue_depth",
    "cmd_queue_depth",
    "requant_lanes",
    "depthwise_window",
    "store_to_inp",
    "requant_residual",
)
# Optional units, by field and the value that means absent: a config without the unit leaves
# the field out of its dict, digests and tag, so every config made before the unit keeps them.
ABSENT = {"requant_lanes": 0, "depthwise_window": 0, "store_to_inp": 0, "requant_residual": 0}

# Knobs the simulator and the compiler have but the RTL does not build yet: `check_rtl` refuses
# a config with one where Verilog would be generated (the RTL would ignore it: silently wrong).
RTL_UNBUILT: dict[str, str] = {}  # (knob: what of it the RTL lacks)

UOP_BYTES_MIN = 4  # a micro-op word is at least 32 bits (see hw.isa)
SCRATCHPADS = ("uop", "inp", "wgt", "acc")  # the on-chip memories
BUFFERS = SCRATCHPADS + ("out",)  # and OUT, the narrowed view of ACC that STORE reads
ACC_BANKS = 2  # the accumulator is two banks (halves), one per index's top bit


# the command queues' depth the cycle model is held to the RTL at (`HwConfig.cmd_queue_depth`)
CALIBRATED_CMD_QUEUE_DEPTH = 512
ALU_MUL_LANES = 4  # the vector ALU multiplies this many lanes per cycle (DSP budget)


@dataclass(frozen=True)
class HwConfig:
    """Accelerator parameters. `log_*_buff` are log2 of scratchpad sizes in bytes.

    The defaults are VTA's but for the weight buffer: 128 KiB, not 256 KiB. VTA's 256 KiB
    alone takes 57 of the xc7z020's 140 BRAM36, and ResNet-18's conv layers gain nothing from
    it (`bench resnet18-layers`: MAC-weighted utilization 0.970 at 64, 128 and 256 KiB).
    """

    log_inp_width: int = 3
    log_wgt_width: int = 3
    log_acc_width: int = 5
    log_batch: int = 0
    log_block_in: int = 4
    log_block_out: int = 4
    log_uop_buff: int = 15
    log_inp_buff: int = 15
    log_wgt_buff: int = 17
    log_acc_buff: int = 17
    clock_mhz: float = 100.0
    axi_data_bits: int = 64
    dram_latency: int = 32
    burst_len: int = 16
    dep_queue_depth: int = 16
    # the cycle model is held to the RTL (bench rtl-speed's sweep) at 512; shorter queues fill
    # on real layers and its cycles drift from the RTL's (`CALIBRATED_CMD_QUEUE_DEPTH`)
    cmd_queue_depth: int = 512
    # the requantization unit on the store path (STORE's `requant` mode): 0 absent, else the
    # accumulator lanes it requantizes a cycle (a power of two up to BATCH x BLOCK_OUT and 64)
    requant_lanes: int = 0
    # the GEMM core's depthwise mode (the DEPTHWISE instruction): 0 absent, else the side of
    # the square window it gathers per channel (3: 3x3 depthwise convs); needs square blocks
    depthwise_window: int = 0
    # a requantizing STORE may write its rows into INP instead of DRAM (STORE's `to_inp`): 0
    # absent, 1 present; needs the unit and square blocks (an OUT row is then an INP row)
    store_to_inp: int = 0
    # the unit adds an int8 residual read from INP after its rounding (STORE's `residual`): 0
    # absent, 1 present; needs the unit and square blocks (an accumulator row's residual is
    # then one INP row)
    requant_residual: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "clock_mhz":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ConfigError(
                        f"clock_mhz must be a number of MHz, not {reprlib.repr(value)}"
                    )
                if not 1.0 <= float(value) <= 2000.0:
                    raise ConfigError(f"clock_mhz must be in [1, 2000], not {value}")
                object.__setattr__(self, "clock_mhz", float(value))
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{f.name} must be an integer, not {reprlib.repr(value)}")
            lo, hi = _RANGES[f.name]
            if not lo <= value <= hi:
                raise ConfigError(f"{f.name} must be in [{lo}, {hi}], not {value}")
        if self.axi_data_bits & (self.axi_data_bits - 1):
            raise ConfigError(
                f"axi_data_bits must be a power of two in [32, 1024], not {self.axi_data_bits}"
            )
        lanes = self.requant_lanes
        if lanes and (lanes & (lanes - 1) or lanes > self.batch * self.block_out):
            raise ConfigError(
                f"requant_lanes must be 0 (no requantization unit) or a power of two up to "
                f"BATCH x BLOCK_OUT = {self.batch * self.block_out} (and 64), not {lanes}"
            )
        window = self.depthwise_window
        if window and (window < 3 or window % 2 == 0):
            raise ConfigError(
                f"depthwise_window must be 0 (no depthwise mode) or an odd window side 3, 5 or 7, "
                f"not {window}"
            )
        if window and self.block_in != self.block_out:
            raise ConfigError(
                f"depthwise_window = {window} needs BLOCK_IN == BLOCK_OUT (lane c of an input "
                f"row is output channel c), not {self.block_in} and {self.block_out}"
            )
        if self.store_to_inp and not (lanes and self.block_in == self.block_out):
            raise ConfigError(
                "store_to_inp = 1 needs the requantization unit (requant_lanes > 0) and "
                "BLOCK_IN == BLOCK_OUT (a STORE's OUT row is then an INP row), not "
                f"requant_lanes = {lanes}, {self.block_in} and {self.block_out}"
            )
        if self.requant_residual and not (lanes and self.block_in == self.block_out):
            raise ConfigError(
                "requant_residual = 1 needs the requantization unit (requant_lanes > 0) and "
                "BLOCK_IN == BLOCK_OUT (an accumulator row's residual is then one INP row), not "
                f"requant_lanes = {lanes}, {self.block_in} and {self.block_out}"
            )
        if self.acc_bits <= max(self.inp_bits, self.wgt_bits):
            raise ConfigError(
                f"log_acc_width must give an accumulator wider than the operands "
                f"({self.inp_bits}/{self.wgt_bits} bits), not {self.acc_bits} bits"
            )
        for name in SCRATCHPADS:
            depth = self.depth(name)
            if depth < 2:
                elem = self.elem_bytes(name)
                raise ConfigError(
                    f"log_{name}_buff={getattr(self, f'log_{name}_buff')} holds {depth} "
                    f"element(s) of {elem} bytes; it must hold at least 2 "
                    f"(log_{name}_buff >= {(elem * 2).bit_length() - 1})"
                )

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def inp_bits(self) -> int:
        return 1 << self.log_inp_width

    @property
    def wgt_bits(self) -> int:
        return 1 << self.log_wgt_width

    @property
    def acc_bits(self) -> int:
        return 1 << self.log_acc_width

    @property
    def out_bits(self) -> int:
        """STORE narrows each accumulator lane to the input width (VTA: truncation)."""
        return self.inp_bits

    @property
    def batch(self) -> int:
        return 1 << self.log_batch

    @property
    def block_in(self) -> int:
        return 1 << self.log_block_in

    @property
    def block_out(self) -> int:
        return 1 << self.log_block_out

    @property
    def macs_per_cycle(self) -> int:
        return self.batch * self.block_in * self.block_out

    @property
    def axi_bytes(self) -> int:
        return self.axi_data_bits // 8

    def elem_bytes(self, buffer: str) -> int:
        """Bytes of one element of `buffer` (uop, inp, wgt, acc, out)."""
        sizes = self._elem_sizes
        if buffer not in sizes:
            raise ConfigError(f"unknown buffer {buffer!r}; valid: {', '.join(sizes)}")
        return sizes[buffer]

    @cached_property
    def _elem_sizes(self) -> dict[str, int]:
        return {
            "uop": self.uop_bytes,
            "inp": self.batch * self.block_in * self.inp_bits // 8,
            "wgt": self.block_out * self.block_in * self.wgt_bits // 8,
            "acc": self.batch * self.block_out * self.acc_bits // 8,
            "out": self.batch * self.block_out * self.out_bits // 8,
        }

    def depth(self, buffer: str) -> int:
        """Number of elements a scratchpad holds. OUT is a view of ACC, so it has ACC's depth."""
        depths = self._depths
        if buffer not in depths:
            raise ConfigError(f"unknown buffer {buffer!r}; valid: {', '.join(BUFFERS)}")
        return depths[buffer]

    @cached_property
    def _depths(self) -> dict[str, int]:
        out = {b: (1 << getattr(self, f"log_{b}_buff")) // self.elem_bytes(b) for b in SCRATCHPADS}
        out["out"] = out["acc"]
        return out

    @cached_property
    def acc_bank_rows(self) -> int:
        """Rows of each accumulator bank. The GEMM core and the vector ALU may run side by side
        only on different banks; each keeps every row it touches in its own (sim/engine.py)."""
        return self.depth("acc") // ACC_BANKS

    def acc_bank(self, row: int) -> int:
        """The bank an accumulator row is in (0: the lower half)."""
        return row // self.acc_bank_rows

    @cached_property
    def uop_bytes(self) -> int:
        """A micro-op holds acc, src and wgt indices, rounded up to a power-of-two byte count."""
        bits = self._index_bits("acc") + self._src_bits() + self._index_bits("wgt")
        size = UOP_BYTES_MIN
        while size * 8 < bits:
            size *= 2
        return size

    def _index_bits(self, buffer: str) -> int:
        # Computed without depth() for uop size (which depth('uop') itself needs).
        log_buff = getattr(self, f"log_{buffer}_buff")
        elem = {
            "inp": self.batch * self.block_in * self.inp_bits // 8,
            "wgt": self.block_out * self.block_in * self.wgt_bits // 8,
            "acc": self.batch * self.block_out * self.acc_bits // 8,
        }[buffer]
        return max(log_buff - (elem.bit_length() - 1), 1)

    def _src_bits(self) -> int:
        return max(self._index_bits("inp"), self._index_bits("acc"))

    # ---- identity ------------------------------------------------------------------------
    @property
    def tag(self) -> str:
        """Short stable name, e.g. `1x16x16_i8w8a32_15_15_17_17` (VTA-style)."""
        return (
            f"{self.batch}x{self.block_in}x{self.block_out}"
            f"_i{self.inp_bits}w{self.wgt_bits}a{self.acc_bits}"
            f"_{self.log_uop_buff}_{self.log_inp_buff}_{self.log_wgt_buff}_{self.log_acc_buff}"
            + (f"_rq{self.requant_lanes}" if self.requant_lanes else "")
            + (f"_dw{self.depthwise_window}" if self.depthwise_window else "")
            + ("_si" if self.store_to_inp else "")
            + ("_rr" if self.requant_residual else "")
        )

    @property
    def digest(self) -> str:
        """Content digest over every field (16 hex digits)."""
        return _digest(self.to_dict())

    @property
    def arch_digest(self) -> str:
        """Digest over the fields a program depends on (not clock, bus width or DRAM timing)."""
        return _digest({k: v for k, v in self.to_dict().items() if k in ARCH_FIELDS})

    def arch_mismatches(self, other: HwConfig) -> list[str]:
        """Architectural fields that differ, as `name: mine != theirs` lines."""
        return [
            f"{k}: {getattr(self, k)} != {getattr(other, k)}"
            for k in ARCH_FIELDS
            if getattr(self, k) != getattr(other, k)
        ]

    # ---- (de)serialization ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every field, but an optional unit's where the unit is absent (`ABSENT`)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in out.items() if ABSENT.get(k, object()) != v}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HwConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown config field(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
            )
        return cls(**data)

    def replace(self, **changes: Any) -> HwConfig:
        bad = sorted(set(changes) - {f.name for f in fields(self)})
        if bad:
            raise ConfigError(f"unknown config field(s) {', '.join(bad)}")
        return dataclasses.replace(self, **changes)

    def with_requant_unit(self) -> HwConfig:
        """This config with the requantization unit at the bus's pace: as many lanes as the
        AXI port has bytes a cycle (a narrower unit would set a STORE's pace), within
        BATCH x BLOCK_OUT and 64; and, where the blocks are square, its residual add
        (`requant_residual`: a residual layer's epilogue on the unit too)."""
        return self.replace(
            requant_lanes=min(self.axi_bytes, self.batch * self.block_out, 64),
            requant_residual=int(self.block_in == self.block_out),
        )

    def with_depthwise_mode(self, window: int = 3) -> HwConfig:
        """This config with the GEMM core's depthwise mode for `window` x `window` kernels."""
        return self.replace(depthwise_window=window)

    def with_store_to_inp(self) -> HwConfig:
        """This config with STORE's path into INP (the unit's rows kept on chip)."""
        return self.replace(store_to_inp=1)

    def with_requant_residual(self) -> HwConfig:
        """This config with the unit's residual add (a residual block's epilogue on the unit)."""
        return self.replace(requant_residual=1)

    @property
    def packs_multipliers(self) -> bool:
        """Whether the GEMM core's default build shares a multiplier between two output lanes
        (an even BLOCK_OUT of int8 products: hw/rtl/gemm.py); the ECP5 flows build it on
        DSPs unpacked."""
        return self.block_out % 2 == 0 and self.inp_bits <= 8 and self.wgt_bits <= 8

    @property
    def depthwise_passes(self) -> int:
        """Array passes of the depthwise mode per output pixel: a channel's window of taps
        over the BLOCK_IN products of its row (0 without the mode)."""
        return -(-(self.depthwise_window**2) // self.block_in)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def to_toml(self) -> str:
        lines = [f"# tilecraft HwConfig {self.tag} digest {self.digest}"]
        for key, value in self.to_dict().items():
            lines.append(f"{key} = {value!r}")
        return "\n".join(lines) + "\n"

    def save(self, path: str | Path) -> None:
        """Write as TOML or JSON by suffix, through a temp file and a rename."""
        path = Path(path)
        if path.suffix == ".toml":
            text = self.to_toml()
        elif path.suffix == ".json":
            text = self.to_json() + "\n"
        else:
            raise ConfigError(f"config file must end in .toml or .json, not {path.name!r}")
        write_atomic(path, text)

    @classmethod
    def load(cls, path: str | Path) -> HwConfig:
        path = Path(path)
        if path.suffix not in (".toml", ".json"):
            raise ConfigError(f"config file must end in .toml or .json, not {path.name!r}")
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read config file {str(path)!r}: {exc.strerror}") from exc
        try:
            data = _toml.loads(raw.decode()) if path.suffix == ".toml" else json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {str(path)!r} does not parse: {exc}") from exc
        except RecursionError:
            raise ConfigError(f"config file {str(path)!r} nests too deeply") from None
        if isinstance(data, dict) and "hw" in data:  # board preset files keep it under [hw]
            stray = sorted(k for k, v in data.items() if k != "hw" and not isinstance(v, dict))
            if stray:  # beside [hw] only a board's own tables ([board], [ps], ...) are read
                raise ConfigError(
                    f"config file {str(path)!r} has fields outside its [hw] table, which would "
                    f"not be read: {', '.join(stray)}; move them under [hw]"
                )
            data = data["hw"]
        if not isinstance(data, dict):
            raise ConfigError(f"config file {str(path)!r} must hold a table of fields")
        return cls.from_dict(data)

    def describe(self) -> str:
        """A human-readable table of the config and its derived sizes."""
        rows = [f"tag     {self.tag}", f"digest  {self.digest}"]
        rows += [f"{k:16s} {v}" for k, v in self.to_dict().items()]
        rows.append(
            f"gemm             {self.batch}x{self.block_in}x{self.block_out} "
            f"({self.macs_per_cycle} MAC/cycle, "
            f"{2 * self.macs_per_cycle * self.clock_mhz / 1e3:.1f} GOPS peak)"
        )
        for name in SCRATCHPADS:
            size = 1 << getattr(self, f"log_{name}_buff")
            rows.append(
                f"{name} buffer       {size // 1024} KiB = {self.depth(name)} x "
                f"{self.elem_bytes(name)} B"
            )
        if self.cmd_queue_depth < CALIBRATED_CMD_QUEUE_DEPTH:
            rows.append(
                f"cycle model      held to the RTL at {CALIBRATED_CMD_QUEUE_DEPTH}-entry command "
                f"queues; at {self.cmd_queue_depth} they fill on real layers and its cycles drift "
                f"from the RTL's (past 0.5% at 8 or fewer): the benchmarks README, rtl-speed"
            )
        return "\n".join(rows)


def _digest(data: dict[str, Any]) -> str:
    blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# Presets the tests and benchmarks sweep; board presets live in tilecraft.boards.
_SWEEP_PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    "1x8x8": {"log_block_in": 3, "log_block_out": 3, "log_wgt_buff": 16, "log_acc_buff": 15},
    "2x16x16": {"log_batch": 1, "log_inp_buff": 16, "log_wgt_buff": 18, "log_acc_buff": 18},
    "1x32x32": {
        "log_block_in": 5,
        "log_block_out": 5,
        "log_inp_buff": 16,
        "log_wgt_buff": 19,
        "log_acc_buff": 18,
        "axi_data_bits": 128,
    },
    "1x16x8": {"log_block_out": 3, "log_acc_buff": 16, "log_wgt_buff": 17},
}


def preset_names() -> list[str]:
    """The sweep presets (board presets: `tilecraft.boards.config_names`)."""
    return list(_SWEEP_PRESETS)


def preset(name: str = "default") -> HwConfig:
    """A sweep preset: `default`, `1x8x8`, `2x16x16`, `1x32x32` or `1x16x8`. A board's config
    is `tilecraft.boards.board(name).config`; `tilecraft.boards.resolve_config` takes either."""
    if name in _SWEEP_PRESETS:
        return HwConfig(**_SWEEP_PRESETS[name])
    raise ConfigError(f"unknown preset {name!r}; valid: {', '.join(preset_names())}")


def resolve(spec: str | HwConfig | None) -> HwConfig:
    """A config from a sweep preset name, a .toml/.json path, an HwConfig, or None (default)."""
    if spec is None:
        return HwConfig()
    if isinstance(spec, HwConfig):
        return spec
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str):
        raise ConfigError(
            f"a config is an HwConfig, a preset or board name, or a .toml/.json path; not "
            f"{type(spec).__name__} {spec!r}"
        )
    if spec.endswith((".toml", ".json")):
        return HwConfig.load(spec)
    return preset(spec)


def require_config(cfg, what: str = "config") -> HwConfig:
    """`cfg` if it is an HwConfig; a ConfigError saying how to make one otherwise (a name
    passed where the config object is taken)."""
    if not isinstance(cfg, HwConfig):
        raise ConfigError(
            f"{what} must be an HwConfig (tilecraft.boards.resolve_config(NAME) makes one from "
            f"a preset or board name or a .toml/.json path), not {type(cfg).__name__} {cfg!r}"
        )
    return cfg


def check_rtl(cfg: HwConfig) -> None:
    """ConfigError where `cfg` has a knob the RTL does not build yet (`RTL_UNBUILT`), naming it:
    every path to Verilog (the rtl tier's build, synthesis, the routes, the bitstreams) calls
    this first."""
    unbuilt = [f"{knob} ({what})" for knob, what in RTL_UNBUILT.items() if getattr(cfg, knob)]
    if unbuilt:
        raise ConfigError(
            f"config {cfg.tag} has {', '.join(unbuilt)}, which the RTL does not build yet: the "
            f"simulator runs it (`--device sim`); for RTL, Verilog or a bitstream use the config "
            f"without it ({', '.join(k for k in RTL_UNBUILT if getattr(cfg, k))} = 0)"
        )
