"""Run a whole Program on the `Accelerator` in amaranth.sim with a Python DRAM on its AXI4
master: slow (hundreds of cycles per second) but with every signal visible; for debugging
and for small system tests that need no Verilator."""

from __future__ import annotations

from collections import deque

import numpy as np
from amaranth.sim import Simulator

from tilecraft.hw import regs
from tilecraft.hw.rtl.top import Accelerator

BASE = 0x1000


def run_program(
    program, inputs, latency: int = 6, max_cycles: int = 200_000, watch=None, packed=None
):
    """`packed` as Accelerator's: ECP5_DSP_MODEL runs the ECP5 flows' DSP pins on the model.
    Returns (done, outputs, dut); `run_program.cycles` is the run's CYCLES."""
    (run,), dut = run_programs([(program, inputs)], latency, max_cycles, watch, packed)
    run_program.cycles = run["cycles"]
    return run["done"], run["outputs"], dut


def run_programs(jobs, latency: int = 6, max_cycles: int = 200_000, watch=None, packed=None):
    """Each (program, inputs) of `jobs` (one config) run in turn on one `Accelerator`, with no
    reset between them (a board's host runs program after program so), each from a DRAM of its
    own. Returns ([{done, cycles, error, error_code, error_index, outputs}, ...], dut)."""
    cfg = jobs[0][0].config
    dut = Accelerator(cfg, packed)
    holder = {"dram": None}
    ab = cfg.axi_bytes
    runs = []

    def p(name):
        return getattr(dut.m_axi, name)

    async def memory(ctx):
        """Mirrors sim/rtl/axi_dram.v cycle for cycle (outputs are registered)."""
        queue = deque()  # [accepted_cycle, is_write, addr, beats]
        now, busy, beat, last_end = 0, False, 0, 0
        rvalid = rlast = wready = bvalid = 0
        rdata = 0
        while True:
            ctx.set(p("rvalid"), rvalid)
            ctx.set(p("rlast"), rlast)
            ctx.set(p("rdata"), rdata)
            ctx.set(p("wready"), wready)
            ctx.set(p("bvalid"), int(bvalid > 0))
            room = len(queue) < 32
            ctx.set(p("arready"), int(room))
            arvalid = ctx.get(p("arvalid"))
            ctx.set(p("awready"), int(room and not arvalid))
            ar = (ctx.get(p("araddr")), ctx.get(p("arlen")) + 1) if arvalid and room else None
            awv = ctx.get(p("awvalid")) and room and not arvalid
            aw = (ctx.get(p("awaddr")), ctx.get(p("awlen")) + 1) if awv else None
            rready, wvalid, bready = (
                ctx.get(p("rready")),
                ctx.get(p("wvalid")),
                ctx.get(p("bready")),
            )
            wdata = ctx.get(p("wdata"))
            await ctx.tick()

            dram = holder["dram"]

            def word(addr, k, dram=dram):
                start = addr - BASE + k * ab
                return int.from_bytes(bytes(dram[start : start + ab]), "little")

            if bvalid and bready:
                bvalid -= 1
            if not busy:
                if queue and now + 1 >= queue[0][0] + latency and now >= last_end + 1:
                    busy, beat = True, 0
                    if queue[0][1]:
                        wready = 1
                    else:
                        rvalid, rdata, rlast = 1, word(queue[0][2], 0), int(queue[0][3] == 1)
            elif not queue[0][1]:
                if rvalid and rready:
                    if rlast:
                        rvalid = rlast = 0
                        busy, last_end = False, now
                        queue.popleft()
                    else:
                        beat += 1
                        rdata = word(queue[0][2], beat)
                        rlast = int(beat + 1 == queue[0][3])
            else:
                if wvalid and wready:
                    start = queue[0][2] - BASE + beat * ab
                    dram[start : start + ab] = np.frombuffer(wdata.to_bytes(ab, "little"), np.uint8)
                    if beat + 1 == queue[0][3]:
                        wready, busy, last_end = 0, False, now
                        bvalid += 1
                        queue.popleft()
                    else:
                        beat += 1
            if ar:
                queue.append([now, False, *ar])
            elif aw:
                queue.append([now, True, *aw])
            now += 1

    async def host(ctx):
        o = regs.OFFSETS
        for program, inputs in jobs:
            holder["dram"] = dram = program.dram_image(inputs)
            # single-cycle AXI-Lite writes (the register file is tested with random handshakes
            # on its own)
            writes = {
                "DRAM_BASE_LO": BASE,
                "DRAM_BASE_HI": 0,
                "INSN_OFFSET": program.insn_offset,
                "INSN_COUNT": len(program.insns),
                "DRAM_SIZE": program.dram_size,
                "IRQ_ENABLE": 1,
                "CONTROL": regs.START,
            }
            for name, value in writes.items():
                ctx.set(dut.s_axi_control.awaddr, o[name])
                ctx.set(dut.s_axi_control.wdata, value)
                ctx.set(dut.s_axi_control.awvalid, 1)
                ctx.set(dut.s_axi_control.wvalid, 1)
                ctx.set(dut.s_axi_control.bready, 1)
                await ctx.tick()
                ctx.set(dut.s_axi_control.awvalid, 0)
                ctx.set(dut.s_axi_control.wvalid, 0)
                await ctx.tick().repeat(2)
            run = {"done": False, "cycles": None, "error": 0, "error_code": 0, "error_index": 0}
            for cycle in range(max_cycles):
                if watch:
                    watch(ctx, dut, cycle)
                if ctx.get(dut.interrupt):
                    run["done"] = True
                    run["cycles"] = ctx.get(dut.regs.cycles)
                    run["error"] = ctx.get(dut.regs.error)
                    run["error_code"] = ctx.get(dut.regs.error_code)
                    run["error_index"] = ctx.get(dut.regs.error_index)
                    break
                await ctx.tick()
            run["outputs"] = {b.name: program.read(dram, b.name) for b in program.outputs}
            runs.append(run)
            if not run["done"]:
                break  # a hung run: the next START would not be taken
            await ctx.tick().repeat(4)  # the host reads the results between runs

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.add_testbench(memory, background=True)
    sim.run()
    return runs, dut
