"""The cocotb side of the RTL device: runs a list of jobs (programs already written as DRAM hex
files) on tb_top, one after another in one simulator process, and writes their results.

Per job: reset, load the DRAM image, program the registers over AXI4-Lite, START, wait for the
interrupt (one GPI timer as the timeout: no Python runs per clock cycle), read the cycle count
and status, dump the program's DRAM. Jobs come from the JSON file in $TILECRAFT_RTL_JOBS;
results go to $TILECRAFT_RTL_RESULTS.
"""

from __future__ import annotations

import json
import os
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import First, RisingEdge, Timer

from tilecraft.hw import regs
from tilecraft.sim.rtl.axi_lite import PERIOD_NS, hold_reset, read, write


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
        dut.dump_beats.value = job["dump_beats"]
        dut.base.value = job["base"]
        dut.latency.value = job["latency"]
        dut.stall_pct.value = job.get("stall_pct", 0)
        dut.seed.value = job.get("seed", 1)
        await hold_reset(dut)
        dut.aresetn.value = 1
        dut.load.value = 1
        await RisingEdge(dut.aclk)
        dut.load.value = 0
        ident = (await read(dut, o["ID_LO"]), await read(dut, o["ID_HI"]))
        await write(dut, o["DRAM_BASE_LO"], job["base"] & 0xFFFFFFFF)
        await write(dut, o["DRAM_BASE_HI"], job["base"] >> 32)
        await write(dut, o["INSN_OFFSET"], job["insn_offset"])
        await write(dut, o["INSN_COUNT"], job["insn_count"])
        await write(dut, o["DRAM_SIZE"], job["dram_size"])
        await write(dut, o["IRQ_ENABLE"], 1)
        await write(dut, o["CONTROL"], regs.START)
        limit = Timer(job["max_cycles"] * PERIOD_NS, unit="ns")
        t0 = time.perf_counter()
        fired = await First(RisingEdge(dut.interrupt), limit)
        seconds = time.perf_counter() - t0
        finished = fired is not limit
        status = await read(dut, o["STATUS"])
        cycles = await read(dut, o["CYCLES_LO"]) | (await read(dut, o["CYCLES_HI"]) << 32)
        code = await read(dut, o["ERROR_CODE"])
        index = await read(dut, o["ERROR_INDEX"])
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
