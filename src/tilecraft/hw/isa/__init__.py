"""The ISA, declared once from HwConfig: enums, word layouts, instructions, codec, disassembler.

Imports only numpy (Amaranth layouts are built on request), so it runs on the boards.
"""

from tilecraft.hw.isa.codec import as_words, decode, decode_uops, encode, encode_uops, uop_dtype
from tilecraft.hw.isa.disasm import disassemble, format_row, format_uops
from tilecraft.hw.isa.enums import (
    BUFFER_NAMES,
    LOAD_MEMS,
    POP_QUEUES,
    PUSH_QUEUES,
    AluOp,
    MemId,
    Opcode,
    Stage,
    TokenQueue,
    stage_of,
)
from tilecraft.hw.isa.formats import INSN_BITS, Field, Format, IsaSpec, isa_for
from tilecraft.hw.isa.insns import (
    FIELD_NAMES,
    FLAG_NAMES,
    TABLE_DTYPE,
    UOP_DTYPE,
    Alu,
    Finish,
    Gemm,
    Insn,
    Load,
    Store,
    Uop,
    insn_table,
    row_insn,
    table_insns,
    uop_table,
)

__all__ = [
    "BUFFER_NAMES",
    "LOAD_MEMS",
    "FIELD_NAMES",
    "FLAG_NAMES",
    "INSN_BITS",
    "POP_QUEUES",
    "PUSH_QUEUES",
    "TABLE_DTYPE",
    "UOP_DTYPE",
    "Alu",
    "AluOp",
    "Field",
    "Finish",
    "Format",
    "Gemm",
    "Insn",
    "IsaSpec",
    "Load",
    "MemId",
    "Opcode",
    "Stage",
    "Store",
    "TokenQueue",
    "Uop",
    "as_words",
    "decode",
    "decode_uops",
    "disassemble",
    "encode",
    "encode_uops",
    "format_row",
    "format_uops",
    "insn_table",
    "isa_for",
    "row_insn",
    "stage_of",
    "table_insns",
    "uop_dtype",
    "uop_table",
]
