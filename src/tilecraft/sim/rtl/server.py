"""The cocotb side of an RTL session (`session.py`): the generated Verilog serving a host's
register reads and writes live, one command at a time, over a Unix socket.

A host (PYNQ's own MMIO code over `sim.pynq_board.SimulatedBoard`) reads and writes the
accelerator's registers exactly as on a board; each access becomes one AXI4-Lite transaction on
the model. Simulated time stands still between commands (the socket read blocks the
simulator), so a run advances only when asked: `run` clocks the model until STATUS says DONE
(read over AXI4-Lite every `POLL` cycles, no Python per cycle) or a cycle limit passes.
DRAM moves as hex images (`load` before START, `dump` after DONE), at the physical address the
host wrote into DRAM_BASE.

Commands, one JSON object per line; each gets one JSON line back:
    {"op": "read", "offset": o}                      -> {"value": v}
    {"op": "write", "offset": o, "value": v}         -> {}
    {"op": "load", "base": b, "job": j}              -> {}   (DRAM_IN.j.hex at physical b)
    {"op": "run", "max_cycles": n}                   -> {"done": bool, "cycles_run": c}
    {"op": "dump", "job": j, "beats": n}             -> {}   (DRAM_OUT.j.hex, its first n beats)
    {"op": "reset"}                                  -> {}   (aresetn low for 4 cycles)
    {"op": "quit"}                                   -> {}   (the test ends)
"""

from __future__ import annotations

import json
import os
import socket

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, Timer

from tilecraft.hw import regs
from tilecraft.sim.rtl.axi_lite import PERIOD_NS, hold_reset, read, write

POLL = 64  # cycles between STATUS reads while a run is under way


async def _reset(dut) -> None:
    for name in ("load", "dump"):
        getattr(dut, name).value = 0
    await hold_reset(dut)
    dut.aresetn.value = 1
    await RisingEdge(dut.aclk)


async def _pulse(dut, name: str) -> None:
    getattr(dut, name).value = 1
    await RisingEdge(dut.aclk)
    getattr(dut, name).value = 0
    await RisingEdge(dut.aclk)


async def _run(dut, max_cycles: int) -> dict:
    ran = 0
    while ran < max_cycles:
        step = min(POLL, max_cycles - ran)
        await Timer(step * PERIOD_NS, unit="ns")
        ran += step
        if await read(dut, regs.OFFSETS["STATUS"]) & regs.DONE:
            return {"done": True, "cycles_run": ran}
    return {"done": False, "cycles_run": ran}


@cocotb.test()
async def serve(dut):
    Clock(dut.aclk, PERIOD_NS, unit="ns").start()
    dut.latency.value = int(os.environ.get("TILECRAFT_RTL_LATENCY", "32"))
    dut.stall_pct.value = 0
    dut.seed.value = 1
    dut.base.value = 0
    dut.job.value = 0
    dut.dump_beats.value = 0
    await _reset(dut)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(os.environ["TILECRAFT_RTL_SOCKET"])
    stream = conn.makefile("rw", encoding="utf-8")
    try:
        for line in stream:  # blocks the simulator: time stands still between commands
            cmd = json.loads(line)
            op, reply = cmd["op"], {}
            if op == "read":
                reply = {"value": await read(dut, cmd["offset"])}
            elif op == "write":
                await write(dut, cmd["offset"], cmd["value"])
            elif op == "load":
                dut.base.value, dut.job.value = cmd["base"], cmd["job"]
                await _pulse(dut, "load")
            elif op == "run":
                reply = await _run(dut, cmd["max_cycles"])
            elif op == "dump":
                dut.job.value, dut.dump_beats.value = cmd["job"], cmd["beats"]
                await _pulse(dut, "dump")
            elif op == "reset":
                await _reset(dut)
            elif op == "quit":
                stream.write("{}\n")
                stream.flush()
                return
            else:
                reply = {"error": f"unknown command {op!r}"}
            stream.write(json.dumps(reply) + "\n")
            stream.flush()
    finally:
        stream.close()
        conn.close()
