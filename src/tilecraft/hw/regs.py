"""The accelerator's control registers (AXI4-Lite slave, 32-bit words), declared once: the RTL
builds its register file from this table and every host (cocotb bench, PYNQ driver) uses the
same offsets. Pure data: it imports on a board without Amaranth.

Start-up: write DRAM_BASE (the physical address of the program's DRAM region: every DRAM
address in a program is relative to it), INSN_OFFSET, INSN_COUNT and DRAM_SIZE, then write
CONTROL.START. DONE (and the interrupt, when IRQ_ENABLE is set) rises when FINISH completes or
the hardware stops on an error; ERROR_CODE then says why and ERROR_INDEX at which instruction.
Writing CONTROL.START again clears DONE/ERROR and runs again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

MODULE = "tilecraft_top"  # the top-level Verilog module: the IP a host looks for in an overlay
MAGIC = 0x54434654  # "TCFT"
REGISTER_SPAN = 0x40  # bytes of address space the registers take
ADDR_BITS = 8  # the AXI4-Lite address width (offsets beyond the registers read as 0)


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    access: str  # "rw", "r", "w" (write-only bits read back as 0)
    doc: str


REGISTERS = (
    Register("CONTROL", 0x00, "w", "bit 0: START (self-clearing)"),
    Register("STATUS", 0x04, "r", "bit 0: BUSY, bit 1: DONE, bit 2: ERROR"),
    Register("IRQ_ENABLE", 0x08, "rw", "bit 0: raise the interrupt line while DONE"),
    Register("INSN_COUNT", 0x0C, "rw", "number of 16-byte instructions to run"),
    Register("DRAM_BASE_LO", 0x10, "rw", "physical address of the program region, low word"),
    Register("DRAM_BASE_HI", 0x14, "rw", "high word"),
    Register("INSN_OFFSET", 0x18, "rw", "byte offset of the instructions in the region"),
    Register("DRAM_SIZE", 0x1C, "rw", "bytes in the region; accesses beyond it are errors"),
    Register("CYCLES_LO", 0x20, "r", "clock cycles from START to DONE, low word"),
    Register("CYCLES_HI", 0x24, "r", "high word"),
    Register("ERROR_CODE", 0x28, "r", "an ErrorCode, 0 when none"),
    Register("ERROR_INDEX", 0x2C, "r", "index of the instruction that stopped the run"),
    Register("ID_LO", 0x30, "r", "HwConfig.digest of the bitstream's config, low 32 bits"),
    Register("ID_HI", 0x34, "r", "high 32 bits"),
    Register("MAGIC", 0x38, "r", f"0x{MAGIC:08X}: this is a tilecraft accelerator"),
)
OFFSETS = {r.name: r.offset for r in REGISTERS}

START = 1 << 0
BUSY, DONE, ERROR = 1 << 0, 1 << 1, 1 << 2


class ErrorCode(IntEnum):
    """Why the hardware stopped early (the simulator raises the matching exception class)."""

    NONE = 0
    ILLEGAL_OPCODE = 1  # IllegalInstructionError
    ILLEGAL_MEMORY = 2  # IllegalInstructionError: a LOAD/STORE memory id the unit cannot serve
    SRAM_RANGE = 3  # AccessError: a scratchpad row beyond the buffer (or a requantizing STORE's
    # data or parameter rows outside the one accumulator bank the unit reads)
    DRAM_RANGE = 4  # AccessError: a DRAM byte beyond DRAM_SIZE
    UOP_RANGE = 5  # AccessError: a micro-op range beyond the micro-op buffer
    ILLEGAL_FLAGS = 6  # IllegalInstructionError: a dependence flag with no queue on its stage
    REQUANT_PARAMS = 7  # IllegalInstructionError: a requantizing STORE's parameter row with a
    # scale that is not a normalized float32 or an empty clip (reported as the STORE ends)


def id_words(digest: str) -> tuple[int, int]:
    """(ID_LO, ID_HI) for a 16-hex-digit config digest."""
    value = int(digest, 16)
    return value & 0xFFFFFFFF, value >> 32


def digest_of(lo: int, hi: int) -> str:
    return f"{(hi << 32) | lo:016x}"
