"""One lane of the vector ALU (the AluUnit in units.py applies it to every lane of an
accumulator element).

Lane semantics are sim/semantics.py's (the spec): MIN, MAX, ADD and MUL wrap at the
accumulator width; SHR takes a signed amount from the low `IsaSpec.shr_amount_bits` bits of its
operand, shifting right (arithmetic) for amounts >= 0 and left for negative ones (a left shift
by the full width gives 0).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed, unsigned

from tilecraft.hw.isa import AluOp, IsaSpec


def alu_lane(m: Module, spec: IsaSpec, op, a, b, with_mul: bool = True):
    """Combinational result of `op` on two signed accumulator lanes (returns a Value); without
    `with_mul`, MUL is left to a shared multiplier (see units.AluUnit)."""
    bits = spec.config.acc_bits
    amount_bits = spec.shr_amount_bits  # 6 for 32-bit lanes: [-32, 31]
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
