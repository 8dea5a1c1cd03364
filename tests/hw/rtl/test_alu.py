"""The ALU lane (hw/rtl/alu.py) against the simulator's lane semantics (sim.semantics)."""

import numpy as np
import pytest
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from tilecraft.hw.config import preset
from tilecraft.hw.isa import AluOp, isa_for
from tilecraft.hw.rtl.alu import OpFlags, alu_lane
from tilecraft.sim.semantics import alu_lanes


class Lanes(wiring.Component):
    """Every lane of an accumulator element through `alu_lane`, registered."""

    def __init__(self, cfg):
        self.spec = isa_for(cfg)
        self.lanes, self.bits = cfg.batch * cfg.block_out, cfg.acc_bits
        width = self.lanes * self.bits
        super().__init__({"op": In(3), "a": In(width), "b": In(width), "result": Out(width)})

    def elaborate(self, platform):
        m = Module()
        w = self.bits
        flags = OpFlags()
        m.d.comb += flags.decode(self.op)
        for k in range(self.lanes):
            a = self.a[k * w : (k + 1) * w].as_signed()
            b = self.b[k * w : (k + 1) * w].as_signed()
            lane = Signal.like(a, name=f"lane{k}")
            m.d.comb += lane.eq(alu_lane(m, self.spec, flags, a, b))
            m.d.sync += self.result[k * w : (k + 1) * w].eq(lane)
        return m


def pack(values, bits):
    out = 0
    for k, v in enumerate(values):
        out |= (int(v) & ((1 << bits) - 1)) << (k * bits)
    return out


def unpack(word, lanes, bits):
    vals = [(word >> (k * bits)) & ((1 << bits) - 1) for k in range(lanes)]
    return np.array([v - (1 << bits) if v >> (bits - 1) else v for v in vals], np.int64)


@pytest.mark.parametrize("config", ["default", "1x8x8"])
def test_every_op_matches_the_spec_on_random_and_edge_lanes(config):
    cfg = preset(config)
    dut = Lanes(cfg)
    lanes, bits = dut.lanes, dut.bits
    rng = np.random.default_rng(0)
    edges = np.array([0, 1, -1, 2**31 - 1, -(2**31), 31, -32, 32, -33, 7, -7, 63, 64])
    cases = []
    for op in AluOp:
        for _ in range(6):
            a = rng.integers(-(2**31), 2**31, lanes)
            b = rng.integers(-(2**31), 2**31, lanes)
            if op == AluOp.SHR:
                b = rng.integers(-40, 40, lanes)
            if op == AluOp.CLIP and _ % 2:  # values around byte bounds, lo > hi included
                a = rng.integers(-300, 300, lanes)
            cases.append((op, a, b))
        cases.append((op, rng.choice(edges, lanes), rng.choice(edges, lanes)))

    async def bench(ctx):
        for op, a, b in cases:
            ctx.set(dut.op, int(op))
            ctx.set(dut.a, pack(a, bits))
            ctx.set(dut.b, pack(b, bits))
            await ctx.tick()
            got = unpack(ctx.get(dut.result), lanes, bits)
            want = alu_lanes(op, a.astype(np.int32), b.astype(np.int32), dut.spec)
            want = want.astype(np.int64)
            np.testing.assert_array_equal(got, want, err_msg=f"{op.name} a={a} b={b}")

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
