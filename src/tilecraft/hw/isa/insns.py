"""Host-side instructions: one frozen dataclass per kind, and the column table they pack into.

Build programs from `Load`, `Store`, `Gemm`, `Alu`, `Depthwise`, `Finish` and `Uop`;
`insn_table` turns a list of them into a numpy structured array (one int64 column per field),
which `codec` encodes in bulk.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tilecraft.errors import EncodingError
from tilecraft.hw.isa.enums import AluOp, MemId, Opcode

FLAG_NAMES = ("pop_prev", "pop_next", "push_prev", "push_next")
FIELD_NAMES = (
    "opcode",
    *FLAG_NAMES,
    "mem",
    "sram_base",
    "dram_base",
    "y_size",
    "x_size",
    "x_stride",
    "y_pad0",
    "y_pad1",
    "x_pad0",
    "x_pad1",
    "pad_value",
    "uop_bgn",
    "uop_end",
    "iter_out",
    "iter_in",
    "dst_out",
    "dst_in",
    "src_out",
    "src_in",
    "reset",
    "wgt_out",
    "wgt_in",
    "alu_op",
    "use_imm",
    "imm",
    "requant",
    "param_base",
    "param_per_row",
    "to_inp",
    "residual",
    "residual_base",
    "acc_base",
    "inp_base",
    "wgt_base",
    "in_rows",
    "in_cols",
    "stride_y",
    "stride_x",
)
TABLE_DTYPE = np.dtype([(name, np.int64) for name in FIELD_NAMES])
UOP_DTYPE = np.dtype([("dst", np.int64), ("src", np.int64), ("wgt", np.int64)])


@dataclass(frozen=True, kw_only=True)
class _Insn:
    """Dependence flags every instruction carries (see hw.isa.enums for the queues)."""

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    opcode = Opcode.FINISH  # overridden per kind

    def row(self) -> dict[str, int]:
        values = {f.name: int(getattr(self, f.name)) for f in dataclasses.fields(self)}
        values["opcode"] = int(self.opcode)
        return values

    def with_flags(self, **flags: bool) -> _Insn:
        bad = sorted(set(flags) - set(FLAG_NAMES))
        if bad:
            raise EncodingError(f"unknown dependence flag(s) {bad}; valid: {list(FLAG_NAMES)}")
        if all(getattr(self, name) == value for name, value in flags.items()):
            return self
        new = object.__new__(type(self))  # a copy with new flags: the fields need no checks
        new.__dict__.update(self.__dict__, **{k: bool(v) for k, v in flags.items()})
        return new


@dataclass(frozen=True, kw_only=True)
class Load(_Insn):
    """2-D DMA from DRAM into a scratchpad, padding on four sides: with zeros, except that an
    INP load writes `pad_value` into every lane of its padding (an input's zero point, which
    stands for the real value 0; int8, sign-extended to the lane).

    Addresses count elements of `mem` (an INP element is BATCH x BLOCK_IN values, ...).
    """

    mem: MemId
    sram_base: int
    dram_base: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad0: int = 0
    y_pad1: int = 0
    x_pad0: int = 0
    x_pad1: int = 0
    pad_value: int = 0
    opcode = Opcode.LOAD


@dataclass(frozen=True, kw_only=True)
class Store(_Insn):
    """2-D DMA of narrowed accumulator rows (the OUT view) to DRAM. With `requant` (configs
    with a requantization unit) each row is requantized on its way instead
    (`ops.requant.requantize`), with the parameters of accumulator rows `param_base` (bias),
    `param_base + 1` (the scale's fields) and `param_base + 2` (zero point and clip bounds),
    one lane per output channel (sim/semantics.py `store`); with `param_per_row`, row y of the
    transfer has its own three, from `param_base + 3 * y` (a transfer whose rows are channel
    blocks). With `to_inp` (configs with `store_to_inp`; a requantizing STORE only) the rows
    go into INP instead: row y's x_size elements to inp[dram_base + y * x_stride + x], with
    `dram_base` and `x_stride` counting INP rows (on square blocks an OUT row is an INP row).
    With `residual` (configs with `requant_residual`; a requantizing STORE only) the unit adds
    an int8 residual after its rounding, before the zero point and the clip: data row i of the
    transfer (in order) takes INP row `residual_base + i`, lane for lane."""

    sram_base: int
    dram_base: int
    y_size: int
    x_size: int
    x_stride: int
    mem: MemId = MemId.OUT
    requant: bool = False
    param_base: int = 0
    param_per_row: bool = False
    to_inp: bool = False
    residual: bool = False
    residual_base: int = 0
    opcode = Opcode.STORE


@dataclass(frozen=True, kw_only=True)
class _Loop(_Insn):
    """The two-level loop around micro-ops [uop_bgn, uop_end) shared by GEMM and ALU."""

    uop_bgn: int
    uop_end: int
    iter_out: int = 1
    iter_in: int = 1
    dst_out: int = 0
    dst_in: int = 0
    src_out: int = 0
    src_in: int = 0


@dataclass(frozen=True, kw_only=True)
class Gemm(_Loop):
    """acc[dst] += inp[src] . wgt[wgt]^T per micro-op; `reset` sets acc[dst] = 0 instead."""

    wgt_out: int = 0
    wgt_in: int = 0
    reset: bool = False
    opcode = Opcode.GEMM


@dataclass(frozen=True, kw_only=True)
class Alu(_Loop):
    """acc[dst] = op(acc[dst], imm if use_imm else acc[src]) lane-wise."""

    op: AluOp
    use_imm: bool = False
    imm: int = 0
    opcode = Opcode.ALU

    def row(self) -> dict[str, int]:
        values = super().row()
        values["alu_op"] = int(values.pop("op"))
        return values


@dataclass(frozen=True, kw_only=True)
class Depthwise(_Insn):
    """The GEMM core's depthwise mode (configs with `depthwise_window` K): a K x K window slides
    over the plane of `in_rows` x `in_cols` input rows from `inp_base` (row-major, padding
    included) with strides `stride_y`, `stride_x`, and each window's sum over its taps, lane by
    lane (channel c of the input row times channel c's weights), is written (not added) to
    acc[acc_base + oy * out_cols + ox] (sim/semantics.py `depthwise`). Channel c's K*K taps lie
    in row c of the weight elements from `wgt_base`, BLOCK_IN taps an element
    (`HwConfig.depthwise_passes` elements)."""

    acc_base: int
    inp_base: int
    wgt_base: int
    in_rows: int
    in_cols: int
    stride_y: int = 1
    stride_x: int = 1
    opcode = Opcode.DEPTHWISE


@dataclass(frozen=True, kw_only=True)
class Finish(_Insn):
    """Completes when every earlier compute instruction has; raises `done`."""

    opcode = Opcode.FINISH


@dataclass(frozen=True)
class Uop:
    """Micro-op: base indices into acc (dst), inp or acc (src) and wgt."""

    dst: int
    src: int
    wgt: int = 0


Insn = Load | Store | Gemm | Alu | Depthwise | Finish


def insn_table(insns: Iterable[_Insn]) -> np.ndarray:
    """Pack instructions into a structured array with one int64 column per field."""
    insns = list(insns)
    by_kind: dict[type, list[int]] = {}
    for i, insn in enumerate(insns):
        if not isinstance(insn, _Insn):
            raise EncodingError(f"instruction {i} is a {type(insn).__name__}, not an instruction")
        by_kind.setdefault(type(insn), []).append(i)
    table = np.zeros(len(insns), dtype=TABLE_DTYPE)
    for kind, where in by_kind.items():
        names = _field_names(kind)
        get = operator.attrgetter(*(FIELD_OF.get(name, name) for name in names))
        values = np.array([get(insns[i]) for i in where], dtype=np.int64).reshape(len(where), -1)
        table["opcode"][where] = int(kind.opcode)
        for col, name in enumerate(names):
            table[name][where] = values[:, col]
    return table


FIELD_OF = {"alu_op": "op"}  # a table column whose dataclass field is named otherwise


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    """The table columns a kind of instruction fills (besides its opcode)."""
    column = {field: col for col, field in FIELD_OF.items()}
    return tuple(column.get(f.name, f.name) for f in dataclasses.fields(kind))


def uop_table(uops: Sequence[Uop] | np.ndarray) -> np.ndarray:
    """Micro-ops as a structured array with int64 columns dst, src, wgt."""
    if isinstance(uops, np.ndarray) and uops.dtype == UOP_DTYPE:
        return uops
    table = np.zeros(len(uops), dtype=UOP_DTYPE)
    if len(uops):
        table["dst"] = [u.dst for u in uops]
        table["src"] = [u.src for u in uops]
        table["wgt"] = [u.wgt for u in uops]
    return table


def table_insns(table: np.ndarray) -> list[_Insn]:
    """The inverse of `insn_table` (for reading and printing decoded programs)."""
    return [row_insn(row) for row in table]


def row_insn(row) -> _Insn:
    get = row.__getitem__
    flags = {name: bool(get(name)) for name in FLAG_NAMES}
    op = int(get("opcode"))
    if op == Opcode.LOAD:
        mem_fields = ("sram_base", "dram_base", "y_size", "x_size", "x_stride")
        pads = ("y_pad0", "y_pad1", "x_pad0", "x_pad1", "pad_value")
        return Load(
            mem=_enum(MemId, get("mem")), **{k: int(get(k)) for k in mem_fields + pads}, **flags
        )
    if op == Opcode.STORE:
        keys = ("sram_base", "dram_base", "y_size", "x_size", "x_stride", "param_base")
        keys += ("residual_base",)
        return Store(
            mem=_enum(MemId, get("mem")),
            requant=bool(get("requant")),
            param_per_row=bool(get("param_per_row")),
            to_inp=bool(get("to_inp")),
            residual=bool(get("residual")),
            **{k: int(get(k)) for k in keys},
            **flags,
        )
    loop = ("uop_bgn", "uop_end", "iter_out", "iter_in", "dst_out", "dst_in", "src_out", "src_in")
    if op == Opcode.GEMM:
        keys = loop + ("wgt_out", "wgt_in")
        return Gemm(reset=bool(get("reset")), **{k: int(get(k)) for k in keys}, **flags)
    if op == Opcode.ALU:
        return Alu(
            op=_enum(AluOp, get("alu_op")),
            use_imm=bool(get("use_imm")),
            imm=int(get("imm")),
            **{k: int(get(k)) for k in loop},
            **flags,
        )
    if op == Opcode.DEPTHWISE:
        keys = [f.name for f in dataclasses.fields(Depthwise) if f.name not in FLAG_NAMES]
        return Depthwise(**{k: int(get(k)) for k in keys}, **flags)
    if op == Opcode.FINISH:
        return Finish(**flags)
    raise EncodingError(f"unknown opcode {op}; valid: {_valid(Opcode)}")


def _enum(kind, value):
    try:
        return kind(int(value))
    except ValueError:
        raise EncodingError(
            f"unknown {kind.__name__} {int(value)}; valid: {_valid(kind)}"
        ) from None


def _valid(kind) -> str:
    return ", ".join(f"{m.name}={m.value}" for m in kind)
