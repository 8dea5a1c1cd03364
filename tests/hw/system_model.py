"""Run a whole Program on the `Accelerator` in amaranth.sim with a Python DRAM on its AXI4
master: slow (hundreds of cycles per second) but with every signal visible; for debugging
and for small system tests that need no Verilator."""

from __future__ import annotations

from collections import deque

import numpy as np
from amaranth.sim import Simulator

from tilecraft.hw import regs
from tilecraft.hw.top import Accelerator

BASE = 0x1000


def run_program(program, inputs, latency: int = 6, max_cycles: int = 200_000, watch=None):
    cfg = program.config
    dut = Accelerator(cfg)
    dram = program.dram_image(inputs)
    ab = cfg.axi_bytes
    state = {"done": False, "cycles": None}

    def p(name):
        return getattr(dut, "m_axi_" + name)

    async def memory(ctx):
        queue = deque()  # (ready_cycle, is_write, addr, beats)
        cycle = 0
        beat = 0
        bpend = 0
        while True:
            ctx.set(p("arready"), 1)
            ctx.set(p("awready"), int(not ctx.get(p("arvalid"))))
            ar = ctx.get(p("arvalid"))
            ar_req = (ctx.get(p("araddr")), ctx.get(p("arlen")) + 1) if ar else None
            aw = ctx.get(p("awvalid")) and not ar
            aw_req = (ctx.get(p("awaddr")), ctx.get(p("awlen")) + 1) if aw else None
            rfire = wfire = False
            ctx.set(p("rvalid"), 0)
            ctx.set(p("wready"), 0)
            if queue and queue[0][0] <= cycle:
                _, is_write, addr, n = queue[0]
                start = addr - BASE + beat * ab
                if not is_write:
                    ctx.set(p("rdata"), int.from_bytes(bytes(dram[start : start + ab]), "little"))
                    ctx.set(p("rvalid"), 1)
                    ctx.set(p("rlast"), int(beat == n - 1))
                    rfire = ctx.get(p("rready"))
                else:
                    ctx.set(p("wready"), 1)
                    if ctx.get(p("wvalid")):
                        wfire = True
                        data = ctx.get(p("wdata"))
                        dram[start : start + ab] = np.frombuffer(
                            data.to_bytes(ab, "little"), np.uint8
                        )
            ctx.set(p("bvalid"), int(bpend > 0))
            bfire = bpend > 0 and ctx.get(p("bready"))
            await ctx.tick()
            if ar_req:
                queue.append((cycle + latency, False, *ar_req))
            if aw_req:
                queue.append((cycle + latency, True, *aw_req))
            if rfire or wfire:
                beat += 1
                if beat == queue[0][3]:
                    if queue[0][1]:
                        bpend += 1
                    queue.popleft()
                    beat = 0
            if bfire:
                bpend -= 1
            cycle += 1

    async def host(ctx):
        o = regs.OFFSETS
        # drive the register file's inputs directly: its AXI-Lite is tested on its own
        rf = dut  # noqa: F841
        writes = {
            "DRAM_BASE_LO": BASE, "DRAM_BASE_HI": 0, "INSN_OFFSET": program.insn_offset,
            "INSN_COUNT": len(program.insns), "DRAM_SIZE": program.dram_size, "IRQ_ENABLE": 1,
            "CONTROL": regs.START,
        }  # fmt: skip
        for name, value in writes.items():
            ctx.set(dut.s_axi_control_awaddr, o[name])
            ctx.set(dut.s_axi_control_wdata, value)
            ctx.set(dut.s_axi_control_awvalid, 1)
            ctx.set(dut.s_axi_control_wvalid, 1)
            ctx.set(dut.s_axi_control_bready, 1)
            await ctx.tick()
            ctx.set(dut.s_axi_control_awvalid, 0)
            ctx.set(dut.s_axi_control_wvalid, 0)
            await ctx.tick().repeat(2)
        for cycle in range(max_cycles):
            if watch:
                watch(ctx, dut, cycle)
            if ctx.get(dut.interrupt):
                state["done"] = True
                break
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(host)
    sim.add_testbench(memory, background=True)
    sim.run()
    outputs = {b.name: program.read(dram, b.name) for b in program.outputs}
    return state["done"], outputs, dut
