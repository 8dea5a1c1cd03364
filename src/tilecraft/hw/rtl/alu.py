"""The vector ALU: one accumulator element (BATCH x BLOCK_OUT lanes) per cycle.

Lane semantics are sim/semantics.py's (the spec): MIN, MAX, ADD and MUL wrap at the
accumulator width; SHR takes a signed amount from the low log2(width)+1 bits of its operand,
shifting right (arithmetic) for amounts >= 0 and left for negative ones (a left shift by the
full width gives 0). One register stage: results appear the cycle after the operands.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import AluOp


def alu_lane(m: Module, op, a, b, bits: int, with_mul: bool = True):
    """Combinational result of `op` on two signed `bits`-wide lanes (returns a Value); without
    `with_mul`, MUL is left to a shared multiplier (see units.AluUnit)."""
    amount_bits = (bits - 1).bit_length() + 1  # 6 for 32-bit lanes: [-32, 31]
    amount = Signal(signed(amount_bits))
    m.d.comb += amount.eq(b[:amount_bits].as_signed())
    right = a >> amount.as_unsigned()[: amount_bits - 1]
    left_by = Signal(unsigned(amount_bits))
    m.d.comb += left_by.eq(-amount)
    left = Mux(left_by >= bits, 0, (a << left_by[: amount_bits - 1])[:bits].as_signed())
    result = Signal(signed(bits))
    with m.Switch(op):
        with m.Case(AluOp.MIN):
            m.d.comb += result.eq(Mux(a < b, a, b))
        with m.Case(AluOp.MAX):
            m.d.comb += result.eq(Mux(a > b, a, b))
        with m.Case(AluOp.ADD):
            m.d.comb += result.eq((a + b)[:bits])
        if with_mul:
            with m.Case(AluOp.MUL):
                m.d.comb += result.eq((a * b)[:bits])
        with m.Default():  # SHR
            m.d.comb += result.eq(Mux(amount >= 0, right, left))
    return result


class VectorAlu(wiring.Component):
    """`a` and `b` are packed lanes (lane k at bits [k*w, (k+1)*w)); `result` one cycle later."""

    def __init__(self, cfg: HwConfig):
        self.lanes = cfg.batch * cfg.block_out
        self.bits = cfg.acc_bits
        width = self.lanes * self.bits
        super().__init__(
            {
                "op": In(3),
                "a": In(width),
                "b": In(width),
                "valid": In(1),
                "result": Out(width),
                "result_valid": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        w = self.bits
        for k in range(self.lanes):
            a = self.a[k * w : (k + 1) * w].as_signed()
            b = self.b[k * w : (k + 1) * w].as_signed()
            lane = alu_lane(m, self.op, a, b, w)
            m.d.sync += self.result[k * w : (k + 1) * w].eq(lane)
        m.d.sync += self.result_valid.eq(self.valid)
        return m
