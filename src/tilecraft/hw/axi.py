"""The AXI interfaces of the accelerator's top level, as plain data: each signal's name, width
and whether the master drives it, in port order. The RTL makes its wiring signatures from
these lists (`hw/rtl/signatures.py`); the board flows describe the same ports to Vivado and
PYNQ (`boards/flows/hwh.py`). Pure data: it imports on a board without Amaranth."""

from __future__ import annotations

ADDR_BITS = 64  # the AXI4 master's byte addresses
LEN_BITS = 8  # AXI burst length - 1
LITE_DATA_BITS = 32  # the AXI4-Lite slave's words (the registers, hw/regs.py)

Signal = tuple[str, int, bool]  # (name, width, driven by the master)


def axi_lite(addr_bits: int, data_bits: int = LITE_DATA_BITS) -> tuple[Signal, ...]:
    """An AXI4-Lite bus."""
    return (
        ("awaddr", addr_bits, True),
        ("awvalid", 1, True),
        ("awready", 1, False),
        ("wdata", data_bits, True),
        ("wstrb", data_bits // 8, True),
        ("wvalid", 1, True),
        ("wready", 1, False),
        ("bresp", 2, False),
        ("bvalid", 1, False),
        ("bready", 1, True),
        ("araddr", addr_bits, True),
        ("arvalid", 1, True),
        ("arready", 1, False),
        ("rdata", data_bits, False),
        ("rresp", 2, False),
        ("rvalid", 1, False),
        ("rready", 1, True),
    )


def axi4(addr_bits: int, data_bits: int) -> tuple[Signal, ...]:
    """An AXI4 master port (single ID, INCR bursts)."""
    out = []
    for ch in ("ar", "aw"):
        out += [
            (f"{ch}addr", addr_bits, True),
            (f"{ch}len", LEN_BITS, True),
            (f"{ch}size", 3, True),
            (f"{ch}burst", 2, True),
            (f"{ch}cache", 4, True),
            (f"{ch}prot", 3, True),
            (f"{ch}valid", 1, True),
            (f"{ch}ready", 1, False),
        ]
        if ch == "ar":
            out += [
                ("rdata", data_bits, False),
                ("rresp", 2, False),
                ("rlast", 1, False),
                ("rvalid", 1, False),
                ("rready", 1, True),
            ]
    out += [
        ("wdata", data_bits, True),
        ("wstrb", data_bits // 8, True),
        ("wlast", 1, True),
        ("wvalid", 1, True),
        ("wready", 1, False),
        ("bresp", 2, False),
        ("bvalid", 1, False),
        ("bready", 1, True),
    ]
    return tuple(out)
