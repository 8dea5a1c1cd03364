"""Bulk encode/decode between instruction tables and instruction words, via numpy.

A program's instructions are an (N, 2) uint64 array: column 0 holds bits 0..63, column 1 bits
64..127, so `words.astype("<u8").tobytes()` is the little-endian byte image fetch reads from DRAM.
Micro-ops are a 1-D unsigned array of `config.uop_bytes`-byte words.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tilecraft.errors import EncodingError
from tilecraft.hw.isa.enums import LOAD_MEMS, MemId, Opcode
from tilecraft.hw.isa.formats import INSN_BYTES, Field, IsaSpec
from tilecraft.hw.isa.insns import TABLE_DTYPE, UOP_DTYPE, insn_table, uop_table

_U64 = np.uint64


def encode(spec: IsaSpec, insns: np.ndarray | Iterable) -> np.ndarray:
    """Encode an instruction table (or a list of instructions) to an (N, 2) uint64 array.

    Raises `EncodingError` naming the instruction, field, value and width when a field does not
    fit, and for an unknown opcode or a memory id the opcode cannot use.
    """
    table = insns if isinstance(insns, np.ndarray) else insn_table(insns)
    if table.dtype != TABLE_DTYPE:
        raise EncodingError(f"expected an instruction table of dtype {TABLE_DTYPE}")
    words = np.zeros((len(table), 2), dtype=_U64)
    ops = table["opcode"]
    _check_members(ops, [int(o) for o in Opcode], "opcode", Opcode)
    _check_mems(table)
    _check_unit_opcodes(spec, ops)
    for op, fmt in spec.formats.items():
        idx = np.flatnonzero(ops == op)
        if idx.size == 0:
            continue
        _check_unit_fields(spec, table, idx, fmt)
        for f in fmt:
            values = table[f.name][idx]
            bad = (values < f.lo) | (values > f.hi)
            if bad.any():
                k = int(idx[np.argmax(bad)])
                value = int(table[f.name][k])
                raise EncodingError(
                    f"instruction {k} ({Opcode(int(ops[k])).name}): field {f.name} = {value} "
                    f"does not fit {f.width} bits (valid {f.lo}..{f.hi})"
                )
            _put(words, idx, values, f)
    return words


def decode(spec: IsaSpec, words: np.ndarray, strict: bool = False) -> np.ndarray:
    """Decode (N, 2) uint64 words to an instruction table.

    Fields of an unknown opcode are left zero; with `strict` an unknown opcode is an
    `EncodingError` naming the instruction and its word.
    """
    words = as_words(words)
    table = np.zeros(len(words), dtype=TABLE_DTYPE)
    ops = _get(words, spec.header.fields["opcode"])
    table["opcode"] = ops
    if strict:
        _check_members(ops, [int(o) for o in Opcode], "opcode", Opcode, words)
    for op, fmt in spec.formats.items():
        idx = np.flatnonzero(ops == op)
        if idx.size:
            sub = words[idx]
            for f in fmt:
                table[f.name][idx] = _get(sub, f)
    return table


def encode_uops(spec: IsaSpec, uops) -> np.ndarray:
    """Encode micro-ops (a list of `Uop` or a uop table) to `uop_bytes`-byte words."""
    table = uop_table(list(uops) if not isinstance(uops, np.ndarray) else uops)
    packed = np.zeros(len(table), dtype=_U64)
    for f in spec.uop:
        values = table[f.name]
        bad = (values < 0) | (values > f.hi)
        if bad.any():
            k = int(np.argmax(bad))
            raise EncodingError(
                f"micro-op {k}: field {f.name} = {int(values[k])} does not fit {f.width} bits "
                f"(valid 0..{f.hi})"
            )
        packed |= values.astype(_U64) << _U64(f.offset)
    return packed.astype(uop_dtype(spec))


def decode_uops(spec: IsaSpec, words: np.ndarray) -> np.ndarray:
    """Decode micro-op words to a uop table (int64 columns dst, src, wgt)."""
    raw = np.asarray(words).astype(_U64)
    table = np.zeros(len(raw), dtype=UOP_DTYPE)
    for f in spec.uop:
        table[f.name] = ((raw >> _U64(f.offset)) & _U64((1 << f.width) - 1)).astype(np.int64)
    return table


def uop_dtype(spec: IsaSpec) -> np.dtype:
    return np.dtype(f"<u{spec.config.uop_bytes}")


def as_words(words) -> np.ndarray:
    """Accept (N, 2) uint64 words or the raw little-endian byte image."""
    arr = np.asarray(words)
    if arr.dtype == np.uint8 or isinstance(words, (bytes, bytearray)):
        raw = bytes(arr.tobytes()) if isinstance(arr, np.ndarray) else bytes(words)
        if len(raw) % INSN_BYTES:
            raise EncodingError(
                f"instruction image of {len(raw)} bytes is not a whole number of "
                f"{INSN_BYTES}-byte words"
            )
        return np.frombuffer(raw, dtype="<u8").reshape(-1, 2).astype(_U64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise EncodingError(f"instruction words must have shape (N, 2), not {arr.shape}")
    return arr.astype(_U64, copy=False)


def _put(words: np.ndarray, idx: np.ndarray, values: np.ndarray, f: Field) -> None:
    u = (values & ((1 << f.width) - 1)).astype(_U64)
    col, shift = divmod(f.offset, 64)
    words[idx, col] |= u << _U64(shift)
    if shift + f.width > 64:
        words[idx, col + 1] |= u >> _U64(64 - shift)


def _get(words: np.ndarray, f: Field) -> np.ndarray:
    col, shift = divmod(f.offset, 64)
    v = words[:, col] >> _U64(shift)
    if shift + f.width > 64:
        v |= words[:, col + 1] << _U64(64 - shift)
    v = (v & _U64((1 << f.width) - 1)).astype(np.int64)
    if f.signed:
        v = np.where(v >= (1 << (f.width - 1)), v - (1 << f.width), v)
    return v


UNIT_FIELDS = {
    **dict.fromkeys(("requant", "param_base", "param_per_row"), "requant_lanes"),
    "to_inp": "store_to_inp",
    **dict.fromkeys(("residual", "residual_base"), "requant_residual"),
}
UNIT_NAMES = {
    "requant_lanes": "requantization unit",
    "store_to_inp": "path from STORE into INP",
    "requant_residual": "requantization unit's residual add",
}


def _check_unit_fields(spec: IsaSpec, table: np.ndarray, idx: np.ndarray, fmt) -> None:
    """An optional unit's field set where the config has no such unit is refused, naming the
    instruction, the config and the knob (the word has no bits for it)."""
    for name, knob in UNIT_FIELDS.items():
        if name in fmt.fields:
            continue
        used = table[name][idx] != 0
        if used.any():
            k = int(idx[np.argmax(used)])
            if getattr(spec.config, knob):
                raise EncodingError(
                    f"instruction {k} ({Opcode(int(table['opcode'][k])).name}) sets {name} = "
                    f"{int(table[name][k])}: only a STORE has that field"
                )
            raise EncodingError(
                f"instruction {k} ({Opcode(int(table['opcode'][k])).name}) sets {name} = "
                f"{int(table[name][k])}, but config {spec.config.tag} has no "
                f"{UNIT_NAMES[knob]}: a program that needs it runs on a config with {knob} > 0"
            )


UNIT_OPCODES = {Opcode.DEPTHWISE: ("depthwise_window", "depthwise mode")}


def _check_unit_opcodes(spec: IsaSpec, ops: np.ndarray) -> None:
    """An optional unit's instruction on a config without the unit is refused, naming the
    instruction, the config and the knob (the config's ISA has no format for it)."""
    for op, (knob, unit) in UNIT_OPCODES.items():
        if op in spec.formats:
            continue
        used = ops == op
        if used.any():
            k = int(np.argmax(used))
            raise EncodingError(
                f"instruction {k} is a {op.name}, but config {spec.config.tag} has no {unit}: "
                f"a program that needs it runs on a config with {knob} > 0"
            )


def _check_members(values, valid, name, kind, words=None) -> None:
    bad = ~np.isin(values, valid)
    if bad.any():
        k = int(np.argmax(bad))
        where = (
            f" (word 0x{int(words[k, 1]):016x}{int(words[k, 0]):016x})" if words is not None else ""
        )
        names = ", ".join(f"{m.name}={m.value}" for m in kind)
        raise EncodingError(
            f"instruction {k}: unknown {name} {int(values[k])}{where}; valid: {names}"
        )


def _check_mems(table: np.ndarray) -> None:
    ops, mems = table["opcode"], table["mem"]
    bad_load = (ops == Opcode.LOAD) & ~np.isin(mems, [int(m) for m in LOAD_MEMS])
    bad_store = (ops == Opcode.STORE) & (mems != MemId.OUT)
    for bad, what in (
        (bad_load, "LOAD takes UOP, WGT, INP or ACC"),
        (bad_store, "STORE takes OUT"),
    ):
        if bad.any():
            k = int(np.argmax(bad))
            raise EncodingError(f"instruction {k}: memory id {int(mems[k])} is invalid; {what}")
