"""A program's buffers: the tensors it reads and writes in its DRAM region, with the role each
plays and how a logical tensor maps to the array stored there."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from tilecraft.errors import ProgramError
from tilecraft.runtime.layout import Layout
from tilecraft.serial import enum_member


class Role(str, Enum):
    INPUT = "input"  # the host writes it before each run
    OUTPUT = "output"  # the host reads it after
    CONSTANT = "constant"  # stored in the artifact (packed weights, selectors)
    SCRATCH = "scratch"  # the program's own


@dataclass(frozen=True)
class BufferSpec:
    """A tensor in DRAM: `shape` and `dtype` as stored, at byte `offset` of the region; `layout`
    says how a logical tensor maps to it (None: stored as given), `value_range` what values
    random test inputs should take (None: the dtype's range)."""

    name: str
    role: Role
    shape: tuple[int, ...]
    dtype: str
    offset: int
    layout: Layout | None = None
    value_range: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        role = enum_member(Role, self.role, f"buffer {self.name!r}: role", ProgramError)
        object.__setattr__(self, "role", role)
        shape = tuple(self.shape)
        if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
            raise ProgramError(f"buffer {self.name!r}: shape {self.shape!r} must be naturals")
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        try:
            dtype = np.dtype(self.dtype)
        except (TypeError, ValueError, SyntaxError):  # numpy parses odd strings ("0", "00")
            raise ProgramError(f"buffer {self.name!r}: dtype {self.dtype!r} is unknown") from None
        if dtype.kind not in "iuf":
            raise ProgramError(
                f"buffer {self.name!r}: dtype {dtype} is not a numeric one (int, uint, float)"
            )
        object.__setattr__(self, "dtype", dtype.str)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize
