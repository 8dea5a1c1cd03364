"""An AXI4-Lite master for the generated Verilog under cocotb: register reads and writes on the
top level's `s_axi_control_*` ports, one transaction at a time, as a host's driver makes them
(the job bench and the register server both drive the accelerator through it)."""

from __future__ import annotations

from cocotb.triggers import ReadOnly, RisingEdge

PERIOD_NS = 10  # the bench's clock: 100 MHz
PORTS = "s_axi_control_"


async def write(dut, addr: int, value: int) -> None:
    p = PORTS
    sig = lambda n: getattr(dut, p + n)  # noqa: E731
    sig("awaddr").value, sig("awvalid").value = addr, 1
    sig("wdata").value, sig("wstrb").value, sig("wvalid").value = value, 0xF, 1
    sig("bready").value = 1
    aw = w = b = False
    while not b:
        await ReadOnly()
        fire_aw = not aw and int(sig("awready").value)
        fire_w = not w and int(sig("wready").value)
        fire_b = int(sig("bvalid").value)
        await RisingEdge(dut.aclk)
        aw |= bool(fire_aw)
        w |= bool(fire_w)
        b = bool(fire_b)
        if aw:
            sig("awvalid").value = 0
        if w:
            sig("wvalid").value = 0
    sig("bready").value = 0


async def read(dut, addr: int) -> int:
    p = PORTS
    sig = lambda n: getattr(dut, p + n)  # noqa: E731
    sig("araddr").value, sig("arvalid").value = addr, 1
    sig("rready").value = 1
    ar = False
    while True:
        await ReadOnly()
        fire_ar = not ar and int(sig("arready").value)
        got = int(sig("rvalid").value)
        data = int(sig("rdata").value) if got else None
        await RisingEdge(dut.aclk)
        ar |= bool(fire_ar)
        if ar:
            sig("arvalid").value = 0
        if got:
            sig("rready").value = 0
            return data


async def hold_reset(dut) -> None:
    """aresetn low for 4 cycles, the AXI4-Lite master idle (the caller releases it)."""
    dut.aresetn.value = 0
    for n in ("awvalid", "wvalid", "arvalid", "bready", "rready"):
        getattr(dut, PORTS + n).value = 0
    for _ in range(4):
        await RisingEdge(dut.aclk)
