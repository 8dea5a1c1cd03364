"""One lane of the vector ALU (the AluUnit in units.py applies it to every lane of an
accumulator element).

Lane semantics are sim/semantics.py's (the spec): MIN, MAX, ADD and MUL wrap at the
accumulator width; SHR takes a signed amount from the low `IsaSpec.shr_amount_bits` bits of its
operand, shifting right (arithmetic) for amounts >= 0 and left for negative ones (a left shift
by the full width gives 0); MIN and MAX share one compare; CLIP is min(max(a, lo), hi) with
the bounds two signed bytes of its operand (hw/isa `clip_bounds`), its compares side by side.

The lane ops sit between the unit's operand registers and its write-data register (a write
reaches the operands a cycle later, from that register: units.AluUnit's `hazard`), so the
result is an AND-OR of each candidate under a one-hot pick (`select`): the op's flags
(`OpFlags`, registers decoded as the instruction starts) and the compares make a per-lane pick
of a, b, hi or lo, then each bit is two LUT levels, where a switch on the op field made a
priority chain of four. (Two late picks over three values made from the flags, tried on
2026-11-27, mapped to more LUT levels after the compares, not fewer: 13.4 ns routes.)
"""

from __future__ import annotations

from amaranth import Cat, Const, Instance, Module, Mux, Signal, signed

from tilecraft.hw.isa import CLIP_BOUND_BITS, AluOp, IsaSpec
from tilecraft.hw.rtl.dsp import DSP_WIDTH, ECP5_DSP, Mult18x18dModel, mult18x18d_pins

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
        "a": a,
        "b": b,
        "hi": hi,
        "lo": lo,
        **compares,
        "add": (a + b)[:bits],
        "shr": (wide >> by)[:bits],
        "mul": (a * b)[:bits] if product is None else product,
    }


def registered(m: Module, spec: IsaSpec, c: dict, name: str) -> dict:
    """`lane_candidates` a cycle later, from registers (MUL's product left out: the caller
    gives it): the lane ops split from their pick (the 92.9 MHz route had the operands through
    the compares and the pick into the write data at 10.5 ns). CLIP's bounds are bytes of the
    registered b."""
    k = CLIP_BOUND_BITS
    out = {}
    for key in ("a", "b", "add", "shr", "lt", "above_hi", "below_lo", "empty"):
        value = c[key]
        reg = Signal.like(value, name=f"{name}_{key}_q", reset_less=True)
        m.d.sync += reg.eq(value)
        out[key] = reg
    bits = spec.config.acc_bits
    hi, lo = Signal(signed(bits)), Signal(signed(bits))
    m.d.comb += [hi.eq(out["b"][:k].as_signed()), lo.eq(out["b"][k : 2 * k].as_signed())]
    return out | {"hi": hi, "lo": lo}


def select(m: Module, flags: OpFlags, c: dict, bits: int):
    """The lane's result under `flags` (0 where no flag is set): per-lane picks of a, b, hi
    and lo from the compares, then an AND-OR of every candidate under its pick or flag."""
    clip_hi = c["above_hi"] | c["empty"]
    picks = {
        "a": Mux(c["lt"], flags["min"], flags["max"]) | (flags["clip"] & ~clip_hi & ~c["below_lo"]),
        "b": Mux(c["lt"], flags["max"], flags["min"]),
        "hi": flags["clip"] & clip_hi,
        "lo": flags["clip"] & ~clip_hi & c["below_lo"],
        "add": flags["add"],
        "shr": flags["shr"],
        "mul": flags["mul"],
    }
    total = None
    for name, pick in picks.items():
        term = Mux(pick, c[name][:bits], 0)
        total = term if total is None else total | term
    result = Signal(signed(bits))
    m.d.comb += result.eq(total)
    return result


def alu_lane(m: Module, spec: IsaSpec, flags: OpFlags, a, b, product=None):
    """Combinational result of the op `flags` select on two signed accumulator lanes."""
    bits = spec.config.acc_bits
    return select(m, flags, lane_candidates(m, spec, a, b, product), bits)


# MUL: a lane group's operands are picked into registers, then its partial products (the DSPs'
# output registers, their input registers off), then the lane's partial products are
# registered in turn, so the last group's are in MUL_TAIL cycles after its phase
# (sim.timing's alu_mul_tail); `lane_product` sums them in front of the pick (X2)
MUL_TAIL = 3


def lane_multiply(m: Module, x, y, bits: int, name: str) -> tuple:
    """The three half-width products of x and y (each fits an 18x18 DSP multiplier), from
    registers, a cycle after x and y: xl*yl, xh*yl and xl*yh, where xl, yl are the low h bits
    and xh, yh the rest (`lane_product` sums them to x*y mod 2**bits; xh*yh << 2h vanishes).
    Each product is registered straight from its multiplier (no adder behind a DSP)."""
    h = bits // 2
    xl, xh, yl, yh = x[:h], x[h:], y[:h], y[h:]
    low = Signal(2 * h, name=f"{name}_low", reset_less=True)
    cross = [Signal(bits - h, name=f"{name}_cross{k}", reset_less=True) for k in range(2)]
    m.d.sync += [
        low.eq(xl * yl),
        cross[0].eq((xh * yl)[: bits - h]),
        cross[1].eq((xl * yh)[: bits - h]),
    ]
    return low, cross[0], cross[1]


def lane_product(parts, bits: int):
    """x * y mod 2**bits from `lane_multiply`'s three products: xl*yl + ((xh*yl + xl*yh) << h)."""
    low, cross0, cross1 = parts
    h = bits // 2
    return (low + (((cross0 + cross1)[: bits - h]) << h))[:bits]


def lane_multiply_dsp(m: Module, x, y, bits: int, name: str, dsp: str):
    """`lane_multiply` of x and y, registers the caller holds (each MULT18X18D multiplies them
    with its input registers off and registers its product: REGS_OUTPUT), so the same three
    products are there a cycle later, as lane_multiply's (see gemm.ECP5_DSP)."""
    h = bits // 2
    if h + 1 > DSP_WIDTH:
        raise ValueError(f"{bits}-bit lanes need halves of at most {DSP_WIDTH - 1} bits")
    zero = Const(0, 1)  # the halves are unsigned: a zero above them keeps the signed DSP right
    xl, xh, yl, yh = (Cat(v, zero) for v in (x[:h], x[h:], y[:h], y[h:]))
    products = []
    for k, (a, b) in enumerate(((xl, yl), (xh, yl), (xl, yh))):
        p = Signal(2 * DSP_WIDTH, name=f"{name}_p{k}")
        pins = mult18x18d_pins(a, b, p, input_registers=False)
        cell = Instance("MULT18X18D", **pins) if dsp == ECP5_DSP else Mult18x18dModel(pins)
        m.submodules[f"{name}_dsp{k}"] = cell
        products.append(p)
    return products[0][: 2 * h], products[1][: bits - h], products[2][: bits - h]
