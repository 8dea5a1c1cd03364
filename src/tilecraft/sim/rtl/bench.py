"""The cocotb side of the RTL device: runs a list of jobs (programs already written as DRAM hex
files) on tb_top, one after another in one simulator process, and writes their results.

Per job: reset, load the DRAM image, program the registers over AXI4-Lite, START, wait for the
interrupt (one GPI timer as the timeout: no Python runs per clock cycle), read the cycle count
and status, dump the DRAM. Jobs come from the JSON file in $TILECRAFT_RTL_JOBS; results go to
$TILECRAFT_RTL_RESULTS.
"""

from __future__ import annotations

import json
import os
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import First, ReadOnly, RisingEdge, Timer

from tilecraft.hw import regs

PERIOD_NS = 10


async def _lite_write(dut, addr: int, value: int) -> None:
    p = "s_axi_control_"
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


async def _lite_read(dut, addr: int) -> int:
    p = "s_axi_control_"
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
        getattr(dut, "s_axi_control_" + n).value = 0
    for _ in range(4):
        await RisingEdge(dut.aclk)


@cocotb.test()
async def run_jobs(dut):
    with open(os.environ["TILECRAFT_RTL_JOBS"]) as f:
        jobs = json.load(f)
    Clock(dut.aclk, PERIOD_NS, unit="ns").start()
    o = regs.OFFSETS
    results = []
    for job in jobs:
        for name in ("load", "dump"):
            getattr(dut, name).value = 0
        dut.job.value = job["job"]
        dut.base.value = job["base"]
        dut.latency.value = job["latency"]
        dut.stall_pct.value = job.get("stall_pct", 0)
        dut.seed.value = job.get("seed", 1)
        await hold_reset(dut)
        dut.aresetn.value = 1
        dut.load.value = 1
        await RisingEdge(dut.aclk)
        dut.load.value = 0
        ident = (await _lite_read(dut, o["ID_LO"]), await _lite_read(dut, o["ID_HI"]))
        await _lite_write(dut, o["DRAM_BASE_LO"], job["base"] & 0xFFFFFFFF)
        await _lite_write(dut, o["DRAM_BASE_HI"], job["base"] >> 32)
        await _lite_write(dut, o["INSN_OFFSET"], job["insn_offset"])
        await _lite_write(dut, o["INSN_COUNT"], job["insn_count"])
        await _lite_write(dut, o["DRAM_SIZE"], job["dram_size"])
        await _lite_write(dut, o["IRQ_ENABLE"], 1)
        await _lite_write(dut, o["CONTROL"], regs.START)
        limit = Timer(job["max_cycles"] * PERIOD_NS, unit="ns")
        t0 = time.perf_counter()
        fired = await First(RisingEdge(dut.interrupt), limit)
        seconds = time.perf_counter() - t0
        finished = fired is not limit
        status = await _lite_read(dut, o["STATUS"])
        cycles = await _lite_read(dut, o["CYCLES_LO"]) | (
            await _lite_read(dut, o["CYCLES_HI"]) << 32
        )
        code = await _lite_read(dut, o["ERROR_CODE"])
        index = await _lite_read(dut, o["ERROR_INDEX"])
        dut.dump.value = 1
        await RisingEdge(dut.aclk)
        dut.dump.value = 0
        await RisingEdge(dut.aclk)
        results.append(
            {
                "job": job["job"],
                "finished": finished,
                "status": status,
                "cycles": cycles,
                "error_code": code,
                "error_index": index,
                "id": regs.digest_of(*ident),
                "seconds": seconds,
            }
        )
    with open(os.environ["TILECRAFT_RTL_RESULTS"], "w") as f:
        json.dump(results, f)
