"""ProgramBuilder: places buffers in DRAM, collects instructions and micro-ops, and encodes them
into a runtime Program. Every DRAM offset is aligned so any element size can address it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Uop, encode, encode_uops, isa_for
from tilecraft.runtime.program import BufferSpec, Program

_ELEM_KINDS = ("uop", "inp", "wgt", "acc", "out")


class ProgramBuilder:
    def __init__(self, config: HwConfig, name: str = "program"):
        self.config = config
        self.spec = isa_for(config)
        self.name = name
        self.align = max(config.elem_bytes(k) for k in _ELEM_KINDS)
        self.buffers: list[BufferSpec] = []
        self.constants: dict[str, np.ndarray] = {}
        self.insns: list = []
        self._uops: list[Uop] = []
        self._uop_offset: int | None = None
        self._top = 0

    def _alloc(self, nbytes: int) -> int:
        offset = -(-self._top // self.align) * self.align
        self._top = offset + nbytes
        return offset

    def buffer(
        self,
        name: str,
        role: str,
        shape,
        dtype,
        data: np.ndarray | None = None,
        layout: dict | None = None,
    ) -> BufferSpec:
        """Declare a DRAM tensor; constants carry their data."""
        spec = BufferSpec(name, role, tuple(shape), np.dtype(dtype).str, 0, layout)
        spec = BufferSpec(name, role, spec.shape, spec.dtype, self._alloc(spec.nbytes), layout)
        self.buffers.append(spec)
        if role == "constant":
            if data is None:
                raise ScheduleError(f"constant buffer {name!r} needs data")
            self.constants[name] = np.ascontiguousarray(data, dtype=np.dtype(dtype))
        return spec

    def elem(self, buf: BufferSpec, kind: str) -> int:
        """The buffer's DRAM address in elements of `kind` (inp, wgt, acc, out, uop)."""
        eb = self.config.elem_bytes(kind)
        assert buf.offset % eb == 0, (buf.name, kind)
        return buf.offset // eb

    def uops(self, uops: Sequence[Uop]) -> int:
        """Append micro-ops to the program's micro-op region; returns the index of the first.

        All micro-ops must be added before `build`; LOAD UOP instructions address them with
        `uop_dram(index)`.
        """
        first = len(self._uops)
        self._uops.extend(uops)
        return first

    @property
    def uop_count(self) -> int:
        return len(self._uops)

    def reserve_uops(self, count: int) -> None:
        """Fix the micro-op region's size (needed before emitting any LOAD UOP)."""
        self._uop_offset = self._alloc(count * self.config.uop_bytes)
        self._uop_capacity = count

    def uop_dram(self, index: int) -> int:
        if self._uop_offset is None:
            raise ScheduleError("call reserve_uops() before addressing micro-ops")
        return self._uop_offset // self.config.uop_bytes + index

    def emit(self, insn) -> None:
        self.insns.append(insn)

    def build(self, meta: dict | None = None) -> Program:
        if self._uop_offset is None:
            self.reserve_uops(len(self._uops))
        if len(self._uops) > self._uop_capacity:
            raise ScheduleError(
                f"{len(self._uops)} micro-ops exceed the {self._uop_capacity} reserved"
            )
        words = encode(self.spec, self.insns)
        insn_offset = self._alloc(words.size * 8)
        return Program(
            config=self.config,
            insns=words,
            uops=encode_uops(self.spec, self._uops),
            buffers=self.buffers,
            constants=self.constants,
            insn_offset=insn_offset,
            uop_offset=self._uop_offset,
            dram_size=-(-self._top // 4096) * 4096,
            name=self.name,
            meta=meta or {},
        )
