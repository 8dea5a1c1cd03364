"""One lane of the vector ALU (the AluUnit in units.py applies it to every lane of an
accumulator element).

Lane semantics are sim/semantics.py's (the spec): MIN, MAX, ADD and MUL wrap at the
accumulator width; SHR takes a signed amount from the low `IsaSpec.shr_amount_bits` bits of its
operand, shifting right (arithmetic) for amounts >= 0 and left for negative ones (a left shift
by the full width gives 0); MIN and MAX share one compare; CLIP is min(max(a, lo), hi) with
the bounds two signed bytes of its operand (hw/isa `clip_bounds`), its compares side by side.

The lane ops are the unit's single-cycle loop (an operand register, the lane op, the register
again where the next micro-op reads the row this one writes), so the result is an AND-OR of
each op's candidate under a one-hot op flag decoded into registers when the instruction starts
(`OpFlags`): after the compares' carry chains, one LUT makes MIN/MAX's pick and two more the
selection, where a switch on the op field made a priority chain of four.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed

from tilecraft.hw.isa import CLIP_BOUND_BITS, AluOp, IsaSpec

SELECTED = ("minmax", "add", "clip", "shr", "mul")  # the candidates OpFlags picks among


class OpFlags:
    """One-hot flags of an ALU op, one per candidate in SELECTED (MIN and MAX share "minmax",
    with `is_max` choosing the side). Ops the ISA does not define select SHR, as the switch they
    replace did (the simulator rejects them before they run)."""

    def __init__(self, name: str = "op"):
        self.flags = {c: Signal(name=f"{name}_{c}") for c in SELECTED}
        self.is_max = Signal(name=f"{name}_is_max")

    def decode(self, op) -> list:
        """Assignments of the flags from an op field (for a domain the caller picks)."""
        known = {
            "minmax": (op == AluOp.MIN) | (op == AluOp.MAX),
            "add": op == AluOp.ADD,
            "clip": op == AluOp.CLIP,
            "mul": op == AluOp.MUL,
        }
        other = ~(known["minmax"] | known["add"] | known["clip"] | known["mul"])
        return [self.flags[c].eq(known.get(c, other)) for c in SELECTED] + [
            self.is_max.eq(op == AluOp.MAX)
        ]

    def __getitem__(self, name: str):
        return self.flags[name]


def _signed_lt(x, y, bits: int):
    """x < y for signed lanes, as an unsigned compare with the sign bits flipped (one carry
    chain ending in its carry-out)."""
    flip = Const(1 << (bits - 1), bits)
    return (x.as_unsigned() ^ flip) < (y.as_unsigned() ^ flip)


def alu_lane(m: Module, spec: IsaSpec, flags: OpFlags, a, b, product=None):
    """Combinational result of the op `flags` select on two signed accumulator lanes (returns a
    Value). MUL's candidate is `product` where given (a shared multiplier's registered result,
    see units.AluUnit), else the lane's own a * b."""
    bits = spec.config.acc_bits
    amount_bits = spec.shr_amount_bits  # 6 for 32-bit lanes: [-32, 31]
    assert 1 << (amount_bits - 1) == bits, (amount_bits, bits)
    # One right shifter does both directions: (a << bits) >> (amount + bits), low half. For
    # amount >= 0 that is a >> amount (arithmetic); for amount < 0, a << -amount (and 0 for a
    # shift left by the full width). amount + bits is amount with its sign bit flipped: no adder.
    by = Cat(b[: amount_bits - 1], ~b[amount_bits - 1])
    wide = Signal(signed(2 * bits))
    m.d.comb += wide.eq(Cat(Const(0, bits), a))
    k = CLIP_BOUND_BITS
    hi, lo = b[:k].as_signed(), b[k : 2 * k].as_signed()
    hi_wide, lo_wide = Signal(signed(bits)), Signal(signed(bits))
    m.d.comb += [hi_wide.eq(hi), lo_wide.eq(lo)]
    # the compares side by side, each a carry chain straight from the operand registers
    lt, above_hi, below_lo, empty = Signal(), Signal(), Signal(), Signal()
    m.d.comb += [
        lt.eq(_signed_lt(a, b, bits)),  # MIN and MAX share it (where a == b, either is right)
        above_hi.eq(_signed_lt(hi_wide, a, bits)),
        below_lo.eq(_signed_lt(a, lo_wide, bits)),
        empty.eq(hi < lo),  # min(max(a, lo), hi) = hi where lo > hi
    ]
    candidates = {
        "minmax": Mux(lt ^ flags.is_max, a, b),
        "add": (a + b)[:bits],
        "clip": Mux(above_hi | empty, hi_wide, Mux(below_lo, lo_wide, a)),
        "shr": (wide >> by)[:bits],
        "mul": (a * b)[:bits] if product is None else product,
    }
    result = Signal(signed(bits))
    terms = [Mux(flags[c], candidates[c], 0).as_unsigned() for c in SELECTED]
    total = terms[0]
    for t in terms[1:]:
        total = total | t
    m.d.comb += result.eq(total)
    return result
