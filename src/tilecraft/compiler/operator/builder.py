"""ProgramBuilder: lays out one program's DRAM region (buffers, then the micro-ops, then the
instructions) and encodes instructions and micro-ops into a runtime `Program`. Every DRAM offset
is aligned so that any element size can address it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tilecraft.errors import ConfigError, ScheduleError
from tilecraft.hw.config import BUFFERS, HwConfig
from tilecraft.hw.isa import INSN_BYTES, Load, MemId, Uop, encode, encode_uops, isa_for
from tilecraft.ops import Computation
from tilecraft.runtime.buffers import BufferSpec, Role
from tilecraft.runtime.layout import Layout
from tilecraft.runtime.program import DRAM_PAGE, Program, Schedule

MAX_INSNS = 32_768  # the largest program compiled by default (seconds to build and verify)


COMPILED_WIDTHS = (3, 3, 5)  # log2 bits of the inputs, weights, accumulators the compiler builds


def check_compiled_widths(config: HwConfig) -> None:
    """Refuse a config whose data widths the compiler does not build for: the ISA, the
    simulator and the RTL take 16-bit inputs and weights and 16-bit accumulators, but the
    compiler's lowering and layouts are int8 x int8 -> int32 (another width compiled and ran,
    giving wrong values)."""
    widths = (config.log_inp_width, config.log_wgt_width, config.log_acc_width)
    if widths != COMPILED_WIDTHS:
        raise ConfigError(
            f"the compiler builds programs for int8 inputs and weights and int32 accumulators "
            f"(log_inp_width 3, log_wgt_width 3, log_acc_width 5); config {config.tag} has "
            f"{config.inp_bits}-bit inputs, {config.wgt_bits}-bit weights and "
            f"{config.acc_bits}-bit accumulators"
        )


class ProgramBuilder:
    def __init__(self, config: HwConfig, name: str = "program"):
        check_compiled_widths(config)
        if not isinstance(name, str) or not name:  # the program file keeps it as a string
            raise ScheduleError(f"a program's name is a non-empty string, not {name!r}")
        self.config = config
        self.spec = isa_for(config)
        self.name = name
        self.align = max(config.elem_bytes(b) for b in BUFFERS)
        self.buffers: list[BufferSpec] = []
        self.constants: dict[str, np.ndarray] = {}
        self.uops: tuple[Uop, ...] | None = None
        self.uop_offset: int | None = None
        self._top = 0

    def _aligned(self, offset: int) -> int:
        return -(-offset // self.align) * self.align

    def _alloc(self, nbytes: int) -> int:
        offset = self._aligned(self._top)
        self._top = offset + nbytes
        return offset

    def buffer(
        self,
        name: str,
        role: Role,
        shape,
        dtype,
        *,
        data: np.ndarray | None = None,
        layout: Layout | None = None,
        value_range: tuple[int, int] | None = None,
    ) -> BufferSpec:
        """Declare a DRAM tensor; constants carry their data (stored as given)."""
        spec = BufferSpec(name, role, tuple(shape), np.dtype(dtype).str, 0, layout, value_range)
        spec = BufferSpec(
            name, spec.role, spec.shape, spec.dtype, self._alloc(spec.nbytes), layout, value_range
        )
        self.buffers.append(spec)
        if spec.role == Role.CONSTANT:
            if data is None:
                raise ScheduleError(f"constant buffer {name!r} needs data")
            self.constants[name] = np.ascontiguousarray(data, dtype=np.dtype(dtype))
        return spec

    def elem(self, buf: BufferSpec, kind: str) -> int:
        """The buffer's DRAM address in elements of `kind` (inp, wgt, acc, out, uop)."""
        eb = self.config.elem_bytes(kind)
        assert buf.offset % eb == 0, (buf.name, kind)
        return buf.offset // eb

    def place_uops(self, uops: Sequence[Uop]) -> int:
        """Put the program's micro-ops in DRAM, after the buffers (once); returns their address
        in micro-op elements, which is what a LOAD UOP's `dram_base` counts."""
        if self.uops is not None:
            raise ScheduleError("the micro-ops are placed once, after every buffer")
        depth = self.config.depth("uop")
        if len(uops) > depth:
            raise ScheduleError(
                f"micro-op buffer: needs {len(uops)} micro-ops, has {depth} "
                f"(exceeds by {len(uops) - depth})"
            )
        self.uops = tuple(uops)
        self.uop_offset = self._alloc(len(uops) * self.config.uop_bytes)
        return self.uop_offset // self.config.uop_bytes

    def load_uops(self) -> Load:
        """The LOAD that brings every placed micro-op into the micro-op buffer from row 0 (a
        LOAD of nothing where there are none: a depthwise layer on the depthwise mode with its
        epilogue on the requantization unit)."""
        if self.uops is None:
            raise ScheduleError("place the micro-ops before loading them")
        count = len(self.uops)
        return Load(
            mem=MemId.UOP,
            sram_base=0,
            dram_base=self.uop_offset // self.config.uop_bytes,
            y_size=1 if count else 0,
            x_size=count,
            x_stride=count,
        )

    def build(
        self,
        insns: Sequence,
        *,
        computation: Computation | None = None,
        schedule: Schedule | None = None,
    ) -> Program:
        """Encode `insns` and the placed micro-ops into the program, the instructions after
        everything else (building does not change the builder: it may build several)."""
        if self.uops is None:
            self.place_uops(())
        words = encode(self.spec, insns)
        insn_offset = self._aligned(self._top)
        end = insn_offset + len(words) * INSN_BYTES
        return Program(
            config=self.config,
            insns=words,
            uops=encode_uops(self.spec, self.uops),
            buffers=self.buffers,
            constants=self.constants,
            insn_offset=insn_offset,
            uop_offset=self.uop_offset,
            dram_size=-(-end // DRAM_PAGE) * DRAM_PAGE,
            name=self.name,
            computation=computation,
            schedule=schedule,
        )
