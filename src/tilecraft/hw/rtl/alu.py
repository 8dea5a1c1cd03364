"""One lane of the vector ALU (the AluUnit in units.py applies it to every lane of an
accumulator element).

Lane semantics are sim/semantics.py's (the spec): MIN, MAX, ADD and MUL wrap at the
accumulator width; SHR takes a signed amount from the low `IsaSpec.shr_amount_bits` bits of its
operand, shifting right (arithmetic) for amounts >= 0 and left for negative ones (a left shift
by the full width gives 0); MIN and MAX share one compare; CLIP is min(max(a, lo), hi) with
the bounds two signed bytes of its operand (hw/isa `clip_bounds`), its compares side by side.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed

from tilecraft.hw.isa import CLIP_BOUND_BITS, AluOp, IsaSpec


def alu_lane(m: Module, spec: IsaSpec, op, a, b, with_mul: bool = True):
    """Combinational result of `op` on two signed accumulator lanes (returns a Value); without
    `with_mul`, MUL is left to a shared multiplier (see units.AluUnit)."""
    bits = spec.config.acc_bits
    amount_bits = spec.shr_amount_bits  # 6 for 32-bit lanes: [-32, 31]
    assert 1 << (amount_bits - 1) == bits, (amount_bits, bits)
    # One right shifter does both directions: (a << bits) >> (amount + bits), low half. For
    # amount >= 0 that is a >> amount (arithmetic); for amount < 0, a << -amount (and 0 for a
    # shift left by the full width). amount + bits is amount with its sign bit flipped: no adder.
    by = Cat(b[: amount_bits - 1], ~b[amount_bits - 1])
    wide = Signal(signed(2 * bits))
    m.d.comb += wide.eq(Cat(Const(0, bits), a))
    shifted = (wide >> by)[:bits].as_signed()
    result = Signal(signed(bits))
    lt = Signal()  # MIN and MAX share one compare (where a == b, a and b are the same value)
    m.d.comb += lt.eq(a < b)
    with m.Switch(op):
        with m.Case(AluOp.MIN):
            m.d.comb += result.eq(Mux(lt, a, b))
        with m.Case(AluOp.MAX):
            m.d.comb += result.eq(Mux(lt, b, a))
        with m.Case(AluOp.ADD):
            m.d.comb += result.eq((a + b)[:bits])
        with m.Case(AluOp.CLIP):  # min(max(a, lo), hi) = hi where a > hi or lo > hi
            k = CLIP_BOUND_BITS
            hi, lo = b[:k].as_signed(), b[k : 2 * k].as_signed()
            m.d.comb += result.eq(Mux((a > hi) | (lo > hi), hi, Mux(a < lo, lo, a)))
        if with_mul:
            with m.Case(AluOp.MUL):
                m.d.comb += result.eq((a * b)[:bits])
        with m.Default():  # SHR
            m.d.comb += result.eq(shifted)
    return result
