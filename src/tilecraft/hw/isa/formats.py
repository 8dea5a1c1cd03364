"""Bit layouts of the 128-bit instruction word and the micro-op word, derived from HwConfig.

Fields are packed LSB first in the order declared. Every kind starts with the same header, and
GEMM and ALU share their loop fields at the same offsets, so the RTL decodes them once.
No other module types a bit offset: they all come from an `IsaSpec`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.errors import ConfigError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa.enums import Opcode

INSN_BITS = 128
INSN_BYTES = INSN_BITS // 8  # one instruction word in DRAM


def insns_per_burst(burst_bytes: int) -> int:
    """Instructions fetch reads with one AXI burst of `burst_bytes`."""
    return max(burst_bytes // INSN_BYTES, 1)


DRAM_ADDR_BITS = 32  # DRAM addresses count elements of the target buffer
SIZE_BITS = 16  # y_size, x_size, x_stride
PAD_BITS = 4  # each of the four padding amounts
PAD_VALUE_BITS = 8  # LOAD INP's padding value (signed, sign-extended to every lane)
ITER_BITS = 14  # GEMM/ALU loop extents
IMM_BITS = 16  # ALU immediate (signed)
IMM_MIN, IMM_MAX = -(1 << (IMM_BITS - 1)), (1 << (IMM_BITS - 1)) - 1
DW_STRIDE_BITS = 2  # DEPTHWISE's stride along each axis
DW_STRIDES = (1, 2)  # the strides it takes (the RTL halves a count for 2, never divides)
STORE_FIELDS = ("mem", "sram_base", "dram_base", "y_size", "x_size", "x_stride")
REQUANT_PARAM_ROWS = 3  # a requantizing STORE's parameter rows: bias, scale, zero point and clip


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    width: int
    signed: bool = False

    @property
    def lo(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


@dataclass(frozen=True)
class Format:
    """One word layout: a name, a total width and its fields by name."""

    name: str
    bits: int
    fields: dict[str, Field]

    def __iter__(self):
        return iter(self.fields.values())


def _pack(name: str, bits: int, spec: list[tuple[str, int, bool]], start: int = 0) -> Format:
    out: dict[str, Field] = {}
    offset = start
    for fname, width, signed in spec:
        if offset + width > bits:
            raise ConfigError(
                f"{name} field {fname} ({width} bits at offset {offset}) does not fit the "
                f"{bits}-bit word; the config's buffers need fewer index bits "
                f"(smaller log_*_buff or larger elements)"
            )
        out[fname] = Field(fname, offset, width, signed)
        offset += width
    return Format(name, bits, out)


def _bits_for(count: int) -> int:
    """Bits to hold values 0..count-1."""
    return max((count - 1).bit_length(), 1)


class IsaSpec:
    """The instruction and micro-op formats of one HwConfig."""

    def __init__(self, config: HwConfig):
        self.config = config
        c = config
        self.acc_idx_bits = _bits_for(c.depth("acc"))
        self.inp_idx_bits = _bits_for(c.depth("inp"))
        self.wgt_idx_bits = _bits_for(c.depth("wgt"))
        self.uop_idx_bits = _bits_for(c.depth("uop"))
        self.src_idx_bits = max(self.inp_idx_bits, self.acc_idx_bits)
        self.sram_bits = max(_bits_for(c.depth(b)) for b in ("uop", "inp", "wgt", "acc"))

        header = [
            ("opcode", 3, False),
            ("pop_prev", 1, False),
            ("pop_next", 1, False),
            ("push_prev", 1, False),
            ("push_next", 1, False),
        ]
        loop = [
            ("uop_bgn", self.uop_idx_bits, False),
            ("uop_end", self.uop_idx_bits + 1, False),
            ("iter_out", ITER_BITS, False),
            ("iter_in", ITER_BITS, False),
            ("dst_out", self.acc_idx_bits, False),
            ("dst_in", self.acc_idx_bits, False),
            ("src_out", self.src_idx_bits, False),
            ("src_in", self.src_idx_bits, False),
        ]
        mem = [
            ("mem", 3, False),
            ("sram_base", self.sram_bits, False),
            ("dram_base", DRAM_ADDR_BITS, False),
            ("y_size", SIZE_BITS, False),
            ("x_size", SIZE_BITS, False),
            ("x_stride", SIZE_BITS, False),
            ("y_pad0", PAD_BITS, False),
            ("y_pad1", PAD_BITS, False),
            ("x_pad0", PAD_BITS, False),
            ("x_pad1", PAD_BITS, False),
            ("pad_value", PAD_VALUE_BITS, True),
        ]
        gemm = [
            ("reset", 1, False),
            ("wgt_out", self.wgt_idx_bits, False),
            ("wgt_in", self.wgt_idx_bits, False),
        ]
        alu = [("alu_op", 3, False), ("use_imm", 1, False), ("imm", IMM_BITS, True)]
        mem_fmt = _pack("LOAD/STORE", INSN_BITS, header + mem)
        store_fmt = mem_fmt
        if c.requant_lanes:  # STORE's padding fields (always 0) hold the requantization's
            store = [f for f in mem if f[0] in STORE_FIELDS]
            requant = [
                ("requant", 1, False),
                ("param_base", self.acc_idx_bits, False),
                ("param_per_row", 1, False),
            ]
            if c.store_to_inp:  # the unit's rows into INP rows from dram_base (an INP index)
                requant.append(("to_inp", 1, False))
            if c.requant_residual:  # an int8 residual per row, from INP rows residual_base..
                requant += [("residual", 1, False), ("residual_base", self.inp_idx_bits, False)]
            store_fmt = _pack("STORE", INSN_BITS, header + store + requant)
        self.formats: dict[Opcode, Format] = {
            Opcode.LOAD: mem_fmt,
            Opcode.STORE: store_fmt,
            Opcode.GEMM: _pack("GEMM", INSN_BITS, header + loop + gemm),
            Opcode.ALU: _pack("ALU", INSN_BITS, header + loop + alu),
            Opcode.FINISH: _pack("FINISH", INSN_BITS, header),
        }
        if c.depthwise_window:  # the GEMM core's depthwise mode: a window over a plane
            plane = [
                ("acc_base", self.acc_idx_bits, False),
                ("inp_base", self.inp_idx_bits, False),
                ("wgt_base", self.wgt_idx_bits, False),
                ("in_rows", self.inp_idx_bits + 1, False),
                ("in_cols", self.inp_idx_bits + 1, False),
                ("stride_y", DW_STRIDE_BITS, False),
                ("stride_x", DW_STRIDE_BITS, False),
            ]
            self.formats[Opcode.DEPTHWISE] = _pack("DEPTHWISE", INSN_BITS, header + plane)
        self.uop = _pack(
            "micro-op",
            c.uop_bytes * 8,
            [
                ("dst", self.acc_idx_bits, False),
                ("src", self.src_idx_bits, False),
                ("wgt", self.wgt_idx_bits, False),
            ],
        )
        self.header = self.formats[Opcode.FINISH]
        self.fields: dict[str, Field] = {}
        for fmt in self.formats.values():
            for f in fmt:
                self.fields.setdefault(f.name, f)

    # ---- facts derived from the field widths ---------------------------------------------
    def field(self, name: str) -> Field:
        """The field `name` (its width and range are the same in every kind that has it)."""
        try:
            return self.fields[name]
        except KeyError:
            raise ConfigError(
                f"no instruction field {name!r}; fields: {', '.join(self.fields)}"
            ) from None

    def fits(self, name: str, value: int) -> bool:
        f = self.field(name)
        return f.lo <= value <= f.hi

    @property
    def shr_amount_bits(self) -> int:
        """SHR reads its signed amount from this many low bits of the operand: enough for
        every shift of an accumulator lane, right or left ([-acc_bits, acc_bits - 1])."""
        return self.config.log_acc_width + 1

    def shr_amount(self, operand):
        """The signed amount SHR reads from `operand` (an int or an integer numpy array): its
        low `shr_amount_bits` bits as two's complement; negative shifts left."""
        half = 1 << (self.shr_amount_bits - 1)
        return ((operand & (2 * half - 1)) ^ half) - half

    def describe(self) -> str:
        """A table of every format's fields, offsets and widths (for docs and `config show`)."""
        lines = []
        for op, fmt in self.formats.items():
            shared = self.formats[Opcode.STORE] is self.formats[Opcode.LOAD]
            if op == Opcode.STORE and shared:
                continue
            title = "LOAD/STORE" if op == Opcode.LOAD and shared else op.name
            lines.append(f"{title}:")
            lines += [f"  [{f.offset + f.width - 1:3d}:{f.offset:3d}] {f.name}" for f in fmt]
        lines.append(f"micro-op ({self.uop.bits} bits):")
        lines += [f"  [{f.offset + f.width - 1:3d}:{f.offset:3d}] {f.name}" for f in self.uop]
        return "\n".join(lines)


_SPECS: dict[HwConfig, IsaSpec] = {}


def isa_for(config: HwConfig) -> IsaSpec:
    """The (cached) IsaSpec of a config."""
    spec = _SPECS.get(config)
    if spec is None:
        spec = _SPECS[config] = IsaSpec(config)
    return spec
