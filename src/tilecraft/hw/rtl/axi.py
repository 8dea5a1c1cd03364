"""AXI4 and AXI4-Lite port members, flattened with the standard names Vivado infers interfaces
from (`s_axi_control_awaddr`, `m_axi_arlen`, ...), and a view to use them by short name."""

from __future__ import annotations

from amaranth.lib.wiring import In, Out


def axi_lite_members(prefix: str, addr_bits: int = 8, data_bits: int = 32) -> dict:
    """A slave port's members (directions as seen by the slave)."""
    m = {
        "awaddr": In(addr_bits), "awvalid": In(1), "awready": Out(1),
        "wdata": In(data_bits), "wstrb": In(data_bits // 8), "wvalid": In(1), "wready": Out(1),
        "bresp": Out(2), "bvalid": Out(1), "bready": In(1),
        "araddr": In(addr_bits), "arvalid": In(1), "arready": Out(1),
        "rdata": Out(data_bits), "rresp": Out(2), "rvalid": Out(1), "rready": In(1),
    }  # fmt: skip
    return {f"{prefix}_{k}": v for k, v in m.items()}


def axi4_members(prefix: str, addr_bits: int, data_bits: int) -> dict:
    """A master port's members (directions as seen by the master); single ID, INCR bursts."""
    m = {
        "araddr": Out(addr_bits), "arlen": Out(8), "arsize": Out(3), "arburst": Out(2),
        "arcache": Out(4), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
        "rdata": In(data_bits), "rresp": In(2), "rlast": In(1), "rvalid": In(1), "rready": Out(1),
        "awaddr": Out(addr_bits), "awlen": Out(8), "awsize": Out(3), "awburst": Out(2),
        "awcache": Out(4), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_bits), "wstrb": Out(data_bits // 8), "wlast": Out(1), "wvalid": Out(1),
        "wready": In(1),
        "bresp": In(2), "bvalid": In(1), "bready": Out(1),
    }  # fmt: skip
    return {f"{prefix}_{k}": v for k, v in m.items()}


class Bus:
    """`Bus(component, "m_axi").arvalid` is `component.m_axi_arvalid`."""

    def __init__(self, owner, prefix: str):
        self._owner, self._prefix = owner, prefix

    def __getattr__(self, name: str):
        return getattr(self._owner, f"{self._prefix}_{name}")
