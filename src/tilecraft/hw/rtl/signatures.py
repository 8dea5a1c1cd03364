"""The interfaces between the accelerator's components, as `wiring` signatures: the top level
joins components with `wiring.connect`, never by building port names.

Streams (`amaranth.lib.stream`) carry whatever has backpressure: commands from fetch to the
stages (through the command queues), dependence tokens, AXI read addresses and data. Each
signature is written from the side that drives its `Out` members (a unit drives its read
port's AR stream; the arbiter takes `In(ReadPort)`, the flipped view).
"""

from __future__ import annotations

from amaranth.hdl import Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw import axi
from tilecraft.hw.axi import ADDR_BITS, LEN_BITS
from tilecraft.hw.isa import INSN_BITS

INDEX_BITS = 32  # an instruction's index in its program: the width of INSN_COUNT
ERROR_CODE_BITS = 8  # an hw.regs.ErrorCode

# An instruction routed to a stage, with its index (for ERROR_INDEX).
COMMAND = data.StructLayout({"insn": unsigned(INSN_BITS), "index": unsigned(INDEX_BITS)})
# One AXI read burst: its first byte's address, beats - 1, and whether it ends the transfer
# (the arbiter keeps AR for one transfer's bursts).
READ_BURST = data.StructLayout(
    {"addr": unsigned(ADDR_BITS), "len": unsigned(LEN_BITS), "last": unsigned(1)}
)


def command() -> stream.Signature:
    return stream.Signature(COMMAND)


def token() -> stream.Signature:
    """A dependence token: only the count matters (the payload bit is unused)."""
    return stream.Signature(1)


class ReadPort(wiring.Signature):
    """A unit's port onto the read arbiter: bursts out on `ar`, their beats back in order on
    `r`."""

    def __init__(self, data_bits: int):
        super().__init__(
            {"ar": Out(stream.Signature(READ_BURST)), "r": In(stream.Signature(data_bits))}
        )


class Transfer(wiring.Signature):
    """A 2-D DMA transfer, started by a one-cycle `start`: `rows` rows of `row_bytes` bytes,
    `stride` bytes apart from byte `addr`; `span` = (rows - 1) * stride + row_bytes (the caller
    has it from its range check)."""

    def __init__(self, row_bits: int):
        super().__init__(
            {
                "start": Out(1),
                "addr": Out(ADDR_BITS),
                "rows": Out(row_bits),
                "row_bytes": Out(32),
                "stride": Out(32),
                "span": Out(32),
            }
        )


class WritePort(wiring.Signature):
    """A scratchpad write: `data` to row `addr` while `en`."""

    def __init__(self, addr_bits: int, data_bits: int):
        super().__init__({"addr": Out(addr_bits), "data": Out(data_bits), "en": Out(1)})


class InpTurn(wiring.Signature):
    """One of INP's two writers (the load stage's INP LOADs, the store stage's STOREs into
    INP, configs with `store_to_inp`) to the other: `busy` while one of its transfers that
    writes INP runs, `start` in the cycle it takes one (the load stage goes first in a tie,
    as in the cycle model). The other holds its own until both are low."""

    def __init__(self):
        super().__init__({"busy": Out(1), "start": Out(1)})


SRAM_READ_LATENCY = 3  # a scratchpad read's data is registered twice past the block RAM:
# the first register can sit beside the block RAM (its clock-to-out is 5.8 ns in nextpnr's
# ECP5 model), the second takes the route to wherever the data is used


def read_registers(m, data, name: str, en=None):
    """`data` (a block RAM's read port) through the SRAM_READ_LATENCY - 1 registers behind it,
    each holding its value in a cycle where `en` (given) is low; read data: no reset."""
    out = data
    for k in range(SRAM_READ_LATENCY - 1):
        reg = Signal.like(data, name=f"{name}_q{k}" if k else f"{name}_q", reset_less=True)
        if en is None:
            m.d.sync += reg.eq(out)
        else:
            with m.If(en):
                m.d.sync += reg.eq(out)
        out = reg
    return out


# A scratchpad's attributes where no read needs the memory's answer to a read and a write of
# the same row in one cycle (INP and WGT: the load stage writes them, the GEMM unit reads them,
# the two ordered by tokens): yosys then maps a block RAM as it is, where it otherwise keeps
# the old-data answer by delaying each write a cycle and muxing its data into the read (a LUT
# and a route between every block RAM output and its register: the 86.3 MHz route's inp_mem ->
# inp_q path). Simulation still gives old data.
NO_RW_CHECK = {"no_rw_check": 1}


class ReadAddress(wiring.Signature):
    """A scratchpad read: row `addr` is read (when `en`, if the port has one); its `data` comes
    back `SRAM_READ_LATENCY` cycles later, from a register (a block RAM's clock-to-out alone
    takes most of a 100 MHz cycle on an ECP5, so nothing but a flip-flop follows it)."""

    def __init__(self, addr_bits: int, data_shape, enable: bool = False):
        members = {"addr": Out(addr_bits), "data": In(data_shape)}
        if enable:
            members["en"] = Out(1)
        super().__init__(members)


class ErrorReport(wiring.Signature):
    """Why a unit stopped (`code`, an hw.regs.ErrorCode) and at which instruction, held while
    `valid`."""

    def __init__(self):
        super().__init__({"valid": Out(1), "code": Out(ERROR_CODE_BITS), "index": Out(INDEX_BITS)})


class RunControl(wiring.Signature):
    """What every unit takes from the register file: the program region and `halt` (the run
    has stopped)."""

    def __init__(self):
        super().__init__({"dram_base": Out(ADDR_BITS), "dram_size": Out(32), "halt": Out(1)})


def _members(signals) -> dict:
    """hw/axi.py's signal list as signature members, from the master's side."""
    return {name: Out(width) if master else In(width) for name, width, master in signals}


class AxiLite(wiring.Signature):
    """AXI4-Lite, from the master's side (the register file is its slave: `In(AxiLite(...))`)."""

    def __init__(self, addr_bits: int, data_bits: int = axi.LITE_DATA_BITS):
        super().__init__(_members(axi.axi_lite(addr_bits, data_bits)))


class AxiWrite(wiring.Signature):
    """The write channels of an AXI4 master that the store stage drives (the top sets the
    constant ones: size, burst, cache, prot, strobes)."""

    def __init__(self, data_bits: int):
        super().__init__(
            {
                "awaddr": Out(ADDR_BITS),
                "awlen": Out(LEN_BITS),
                "awvalid": Out(1),
                "awready": In(1),
                "wdata": Out(data_bits),
                "wlast": Out(1),
                "wvalid": Out(1),
                "wready": In(1),
                "bvalid": In(1),
                "bready": Out(1),
            }
        )


class Axi4(wiring.Signature):
    """An AXI4 master port (single ID, INCR bursts), from the master's side."""

    def __init__(self, addr_bits: int, data_bits: int):
        super().__init__(_members(axi.axi4(addr_bits, data_bits)))


def flat_ports(component: wiring.Component) -> dict[str, tuple]:
    """A top level's ports as Verilog names joined with one underscore (`s_axi_control_awaddr`,
    the names Vivado infers AXI interfaces from; Amaranth itself would write `__`), for
    `back.verilog.convert(..., ports=...)`."""
    ports = {}
    for path, _member, value in component.signature.flatten(component):
        value = value.as_value() if hasattr(value, "as_value") else value
        ports["_".join(map(str, path))] = (value, None)  # the direction follows the drivers
    return ports
