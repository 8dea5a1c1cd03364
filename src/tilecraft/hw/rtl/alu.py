"""One lane of the vector ALU (the AluUnit in units.py applies it to every lane of an
accumulator element).

Lane semantics are sim/semantics.py's (the spec): MIN, MAX, ADD and MUL wrap at the
accumulator width; SHR takes a signed amount from the low `IsaSpec.shr_amount_bits` bits of its
operand, shifting right (arithmetic) for amounts >= 0 and left for negative ones (a left shift
by the full width gives 0); MIN and MAX share one compare; CLIP is min(max(a, lo), hi) with
the bounds two signed bytes of its operand (hw/isa `clip_bounds`), its compares side by side.

The lane ops sit between the unit's operand registers and its write-data register (a write
reaches the operands a cycle later, from that register: units.AluUnit's `hazard`). The op's
flags (`OpFlags`, registers decoded as the instruction starts) pick what they can before the
compares end, so the compares decide only between three values (`select`): where a switch on
the op field made a priority chain of four LUT levels, and an AND-OR of seven picked values
three, a bit is now one LUT after the compares.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, signed

from tilecraft.hw.isa import CLIP_BOUND_BITS, AluOp, IsaSpec

SELECTED = ("min", "max", "add", "clip", "shr", "mul")  # one-hot: which op the flags select


class OpFlags:
    """One-hot flags of an ALU op, one per name in SELECTED. Ops the ISA does not define select
    SHR, as a switch on the op field would (fetch rejects them before they run)."""

    def __init__(self, name: str = "op"):
        self.flags = {c: Signal(name=f"{name}_{c}") for c in SELECTED}

    def decode(self, op) -> list:
        """Assignments of the flags from an op field (for a domain the caller picks)."""
        known = {
            "min": op == AluOp.MIN,
            "max": op == AluOp.MAX,
            "add": op == AluOp.ADD,
            "clip": op == AluOp.CLIP,
            "mul": op == AluOp.MUL,
        }
        other = ~(known["min"] | known["max"] | known["add"] | known["clip"] | known["mul"])
        return [self.flags[c].eq(known.get(c, other)) for c in SELECTED]

    def __getitem__(self, name: str):
        return self.flags[name]


def _signed_lt(x, y, bits: int):
    """x < y for signed lanes, as an unsigned compare with the sign bits flipped (one carry
    chain ending in its carry-out)."""
    flip = Const(1 << (bits - 1), bits)
    return (x.as_unsigned() ^ flip) < (y.as_unsigned() ^ flip)


def _compares(spec: IsaSpec, a, b) -> dict:
    """The lane's compares, side by side, each a carry chain straight from the operands: a < b
    (MIN and MAX share it: where a == b, either is right), and CLIP's a > hi, a < lo, hi < lo
    (min(max(a, lo), hi) = hi where lo > hi), the bounds two signed bytes of b."""
    bits, k = spec.config.acc_bits, CLIP_BOUND_BITS

    def widened(byte):  # a signed byte of b, sign-extended to the lane
        return Cat(byte, byte[-1].replicate(bits - k)).as_signed()

    hi, lo = widened(b[:k]), widened(b[k : 2 * k])
    return {
        "lt": _signed_lt(a, b, bits),
        "above_hi": _signed_lt(hi, a, bits),
        "below_lo": _signed_lt(a, lo, bits),
        "empty": hi < lo,
    }


def lane_candidates(m: Module, spec: IsaSpec, a, b, product=None) -> dict:
    """What `select` picks from for two signed accumulator lanes: the compares (`_compares`)
    and every op's value. MUL's is `product` where given (a shared multiplier's registered
    result, see units.AluUnit), else a * b."""
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
    hi, lo = Signal(signed(bits)), Signal(signed(bits))
    m.d.comb += [hi.eq(b[:k].as_signed()), lo.eq(b[k : 2 * k].as_signed())]
    compares = {}
    for name, value in _compares(spec, a, b).items():
        compares[name] = Signal(name=name)
        m.d.comb += compares[name].eq(value)
    return {
        "a": a, "b": b, "hi": hi, "lo": lo, **compares, "add": (a + b)[:bits],
        "shr": (wide >> by)[:bits], "mul": (a * b)[:bits] if product is None else product,
    }  # fmt: skip


def select(m: Module, flags: OpFlags, c: dict, bits: int):
    """The lane's result under `flags` (0 where no flag is set), as two late picks over three
    values made from the flags alone: `s1 ? x : s0 ? lo : z`. The compares decide s1 (MIN/MAX's
    a < b, CLIP's above hi) and s0 (CLIP's below lo); x (hi, or MIN's a, MAX's b) and z (CLIP's
    a, MIN's b, MAX's a, SHR's or MUL's value, or ADD's sum ORed in as it arrives) are muxes
    on the flags, ready before the compares' carry chains end. So a bit is a LUT on the sum and
    a 5-input pick after the compares (an AND-OR of seven picked values was three LUT levels
    after them: the ALU's X stage on the 92.4 MHz route)."""
    a, b = c["a"][:bits], c["b"][:bits]
    hi, lo = c["hi"][:bits], c["lo"][:bits]
    minmax = flags["min"] | flags["max"]
    s1 = (minmax & c["lt"]) | (flags["clip"] & (c["above_hi"] | c["empty"]))
    s0 = flags["clip"] & c["below_lo"]
    x = Mux(flags["clip"], hi, Mux(flags["min"], a, b))
    others = Mux(flags["shr"], c["shr"][:bits], Mux(flags["mul"], c["mul"][:bits], 0))
    early = Mux(flags["clip"], a, Mux(minmax, Mux(flags["min"], b, a), others))
    z = early | Mux(flags["add"], c["add"][:bits], 0)
    result = Signal(signed(bits))
    m.d.comb += result.eq(Mux(s1, x, Mux(s0, lo, z)))
    return result


def alu_lane(m: Module, spec: IsaSpec, flags: OpFlags, a, b, product=None):
    """Combinational result of the op `flags` select on two signed accumulator lanes."""
    bits = spec.config.acc_bits
    return select(m, flags, lane_candidates(m, spec, a, b, product), bits)
