"""Explicit, strict JSON for the frozen dataclasses that cross from one layer to another (operators,
schedules, tensor layouts) and into artifacts.

`to_json` writes a dataclass as an object of its fields (enums by value, tuples as lists); a class
with a `kind` class variable also writes it, so a field typed as a union of such classes reads back
as the right one. `from_json` is the strict inverse: every field present, no unknown ones, each of
its annotated type, and the class's own validation run; anything else is a `FormatError` that
names the field by its path (e.g. `computation.op.kernel[1]`).
"""

from __future__ import annotations

import dataclasses
import reprlib
import types
import typing
from enum import Enum
from typing import Any, TypeVar

from tilecraft.errors import FormatError, TilecraftError

T = TypeVar("T")
E = TypeVar("E", bound=Enum)


def enum_member(kind: type[E], value: Any, what: str, error: type[TilecraftError]) -> E:
    """`value` as a member of `kind` (a member, or its value); otherwise `error` naming `what`,
    the value and the valid ones. Records call it to take strings for their enum fields."""
    try:
        return kind(value)
    except ValueError:
        valid = ", ".join(repr(m.value) for m in kind)
        raise error(f"{what} must be one of {valid}, not {reprlib.repr(value)}") from None


def to_json(value: Any) -> Any:
    """A JSON-ready value: dataclasses as objects (with their `kind`), enums by value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {"kind": value.kind} if isinstance(getattr(type(value), "kind", None), str) else {}
        for f in dataclasses.fields(value):
            out[f.name] = to_json(getattr(value, f.name))
        return out
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return value.item()
    return value


def from_json(cls: type[T], data: Any, where: str = "") -> T:
    """`data` read as a `cls` (a dataclass, or a union of dataclasses with a `kind`)."""
    return _read(cls, data, where or getattr(cls, "__name__", "record"))


def _read(tp: Any, data: Any, where: str) -> Any:
    """`data` as type `tp`. Recursion follows the type, never the data: a record nests only as
    deep as its declaration, whatever the input holds."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if data is None and type(None) in options:
            return None
        classes = [o for o in options if o is not type(None)]
        if len(classes) == 1:
            return _read(classes[0], data, where)
        return _read_tagged(classes, data, where)
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(data, list):
            raise FormatError(f"{where}: expected a list, not {_what(data)}")
        if len(args) == 2 and args[1] is Ellipsis:
            args = (args[0],) * len(data)
        elif len(args) != len(data):
            raise FormatError(f"{where}: expected {len(args)} items, not {len(data)}")
        return tuple(_read(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, data)))
    if dataclasses.is_dataclass(tp):
        return _read_dataclass(tp, data, where)
    if isinstance(tp, type) and issubclass(tp, Enum):
        try:
            return tp(data)
        except ValueError:
            valid = ", ".join(repr(m.value) for m in tp)
            raise FormatError(f"{where}: {reprlib.repr(data)} is not one of {valid}") from None
    if tp is bool:
        if not isinstance(data, bool):
            raise FormatError(f"{where}: expected true or false, not {_what(data)}")
        return data
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise FormatError(f"{where}: expected an integer, not {_what(data)}")
        return data
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise FormatError(f"{where}: expected a number, not {_what(data)}")
        return float(data)
    if tp is str:
        if not isinstance(data, str):
            raise FormatError(f"{where}: expected a string, not {_what(data)}")
        return data
    raise TypeError(f"serial cannot read type {tp!r}")  # a programming error, not bad input


def _read_tagged(classes: list, data: Any, where: str) -> Any:
    by_kind = {c.kind: c for c in classes}
    kind = data.get("kind") if isinstance(data, dict) else None
    if not isinstance(kind, str) or kind not in by_kind:
        raise FormatError(
            f"{where}: kind {kind!r} is not one of {', '.join(repr(k) for k in by_kind)}"
        )
    return _read_dataclass(by_kind[data["kind"]], data, where)


def _read_dataclass(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise FormatError(f"{where}: expected an object, not {_what(data)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kind = getattr(cls, "kind", None)
    known = set(fields) | ({"kind"} if isinstance(kind, str) else set())
    unknown = sorted(set(data) - known)
    if unknown:
        raise FormatError(f"{where}: unknown field(s) {', '.join(unknown)}")
    if isinstance(kind, str) and data.get("kind", kind) != kind:
        raise FormatError(f"{where}: kind {data.get('kind')!r} is not {kind!r}")
    values = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise FormatError(f"{where}: missing field {name!r}")
            continue
        values[name] = _read(hints[name], data[name], f"{where}.{name}")
    try:
        return cls(**values)
    except TilecraftError as exc:
        raise FormatError(f"{where}: {exc}") from None


def _what(data: Any) -> str:
    if data is None:
        return "null"
    text = reprlib.repr(data)  # bounded in depth and length, however large `data` is
    return f"{type(data).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"
