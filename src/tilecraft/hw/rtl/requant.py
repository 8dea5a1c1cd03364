"""One lane of the requantization unit: onnxruntime's float32 requantization
(`ops.requant`, the spec) in integer logic, pipelined to take one accumulator a cycle.

    v = acc + bias                                  int32, wrapping
    y = clip(rne(fl32(fl32(v) * scale)) + zero, lo, hi)

with the scale held as its 24-bit significand and 7-bit exponent (`ops.requant.scale_fields`).
The stages are the spec's, each into registers:

    1  v = acc + bias; its sign and magnitude (32 bits: |-2**31| fits unsigned)
    2  the magnitude's leading one (a tree of narrow picks, `_leading_one`)
    3  the shift to a 24-bit significand: right 1-8 for a magnitude of 25-32 bits (float32
       rounds), left 0-23 for a shorter one (exact: the significand normalized)
    4  the normalized 24-bit significand a of float32(|v|) (a >= 2**23 for v != 0; 0 for 0),
       rounded to nearest even where it drops bits (a carry renormalizes), and its exponent
    5  a * significand: its four partial products (a and the significand split at bit 17,
       each piece within a DSP's 18 signed bits), each in a multiplier's output register
    6  their sum, the 48-bit product (a 24 x 24 product in one cycle, through DSPs without
       their registers, was every failing path of the unit's first route: 22 ns); beside it
       ea + the scale's exponent - 23
    7  the product's 24-bit significand p and its exponent e (f = p * 2**e): both significands
       are normalized, so the product's leading one is bit 47 or 46 and the rounding drops 24
       or 23 bits (no search: a 48-bit leading-one search here was a worst path)
    8  p * 2**e to the integer, to nearest even. p >= 2**23 for any v != 0, so
       f >= 2**(23 + e): an e >= -13 is past any clip and saturates, an e <= -25 rounds to 0,
       and the rest is a right shift by 14-24
    9  sign, + zero point, clip

`LATENCY` cycles from an input to its output, one input a cycle, no stall (a `valid` bit rides
along). Clip bounds and the zero point are 10-bit signed (|zero| <= 511, so any |r| >= 2**10
saturates).
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw.isa.requant import EXPONENT_BITS, SIGNIFICAND_BITS
from tilecraft.hw.rtl.dsp import registered_product

LATENCY = 9
ACC_BITS = 32
BOUND_BITS = 10  # zero point and clip bounds: signed, |x| <= 511
SATURATES = -13  # a product exponent from here up puts |r| >= 2**10: past any clip
LAST_SHIFT = 24  # p >> 25 and beyond round to 0 (p < 2**24)
SPLIT = 17  # the significands' low pieces: 17 bits unsigned, a DSP's 18 signed


def _leading_one(x) -> tuple:
    """(any bit set, the highest set bit's index) of x (a power-of-two width), as a tree:
    each level picks the upper half's index (its own bits with a 1 above them: a
    concatenation, no adder) where the upper half has a bit, else the lower half's. log2 of
    the width levels of narrow muxes (a search by shifting the whole word was each level a
    32-bit mux, and the route's worst path)."""
    if len(x) == 1:
        return x[0], Const(0, 0)
    half = len(x) // 2
    any_lo, at_lo = _leading_one(x[:half])
    any_hi, at_hi = _leading_one(x[half:])
    return any_lo | any_hi, Mux(any_hi, Cat(at_hi, Const(1, 1)), Cat(at_lo, Const(0, 1)))


def _round_shift(x, d, width: int):
    """x >> d rounded to nearest, ties to even (x unsigned, d a small unsigned amount >= 0):
    the guard bit (the highest dropped) and the sticky OR of the rest below it decide, with
    the kept lsb for a tie. No compare: a thermometer mask and an OR tree (a `rest > half`
    compare was a carry chain as wide as x)."""
    q = (x >> d)[:width]
    x2 = Cat(Const(0, 1), x)  # x * 2: bit d of it is x's guard bit, bits below d its sticky bits
    guard = (x2 >> d)[0]
    below = ~(Const((1 << len(x2)) - 1, len(x2)) << d)[: len(x2)]  # ones under bit d
    sticky = (x2 & below).any()
    return q + (guard & (sticky | q[0]))


class RequantLane(wiring.Component):
    """`ops.requant.requantize` for one accumulator a cycle, `LATENCY` cycles later; `dsp`:
    where the partial products are registered (`dsp.registered_product`: ECP5_DSP in a
    MULT18X18D's output register, None a registered `*`)."""

    valid: In(1)
    acc: In(signed(ACC_BITS))
    bias: In(signed(ACC_BITS))
    significand: In(SIGNIFICAND_BITS)
    exponent: In(signed(EXPONENT_BITS))
    zero: In(signed(BOUND_BITS))
    lo: In(signed(BOUND_BITS))
    hi: In(signed(BOUND_BITS))
    out_valid: Out(1)
    out: Out(signed(BOUND_BITS))

    def __init__(self, dsp: str | None = None):
        self.dsp = dsp
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        # the per-instruction constants ride along with each value (a pipeline of fields)
        stages = [self._fields(m, k) for k in range(LATENCY - 1)]
        first = stages[0]
        m.d.sync += [
            first["valid"].eq(self.valid),
            first["sig"].eq(self.significand),
            first["exp"].eq(self.exponent),
            first["zero"].eq(self.zero),
            first["lo"].eq(self.lo),
            first["hi"].eq(self.hi),
        ]
        for a, b in zip(stages, stages[1:]):
            m.d.sync += [b[k].eq(a[k]) for k in ("valid", "sig", "exp", "zero", "lo", "hi", "neg")]

        # 1: v and its magnitude
        v = Signal(signed(ACC_BITS))
        m.d.comb += v.eq(self.acc + self.bias)
        mag1 = Signal(ACC_BITS, name="mag1")
        m.d.sync += [stages[0]["neg"].eq(v < 0), mag1.eq(Mux(v < 0, -v, v))]
        # 2: the magnitude's leading one
        mag2 = Signal(ACC_BITS, name="mag2")
        nonzero = Signal(name="nonzero")
        top1 = Signal(range(ACC_BITS), name="top1")  # the leading one's index
        found, at = _leading_one(mag1)
        m.d.sync += [mag2.eq(mag1), nonzero.eq(found), top1.eq(at)]
        # 3: the shift to a 24-bit significand: float32 rounds a magnitude of 25-32 bits
        # (drops 1-8), a shorter one shifts left to normalize (exact)
        mag3 = Signal(ACC_BITS, name="mag3")
        long = Signal(name="long")
        drop1 = Signal(range(ACC_BITS - SIGNIFICAND_BITS + 1), name="drop1")
        lift = Signal(range(SIGNIFICAND_BITS + 1), name="lift")
        last = SIGNIFICAND_BITS - 1  # 23: the normalized significand's leading one
        m.d.sync += [
            mag3.eq(mag2),
            long.eq(top1 > last),
            drop1.eq(Mux(top1 > last, top1 - last, 0)),
            lift.eq(Mux(~nonzero | (top1 > last), 0, last - top1)),
        ]
        # 4: the normalized 24-bit significand of float32(|v|) and its exponent (a = 0 for 0)
        a = Signal(SIGNIFICAND_BITS, name="a")
        ea = Signal(signed(7), name="ea")  # -24 .. 9
        rounded = Signal(SIGNIFICAND_BITS + 1, name="rounded")
        m.d.comb += rounded.eq(_round_shift(mag3, drop1, SIGNIFICAND_BITS + 1))
        carry = rounded[SIGNIFICAND_BITS]
        lifted = (mag3 << lift)[:SIGNIFICAND_BITS]
        with m.If(long):
            m.d.sync += [a.eq(Mux(carry, rounded >> 1, rounded)), ea.eq(drop1 + carry)]
        with m.Else():
            m.d.sync += [a.eq(lifted), ea.eq(-lift)]
        # 5: the significands' partial products, each in a multiplier's output register
        sig = stages[3]["sig"]
        pieces = [(a[:SPLIT], a[SPLIT:]), (sig[:SPLIT], sig[SPLIT:])]
        partial = {
            (i, j): registered_product(m, pieces[0][i], pieces[1][j], f"pp{i}{j}", self.dsp)
            for i in (0, 1)
            for j in (0, 1)
        }
        ea4a = Signal.like(ea, name="ea4a")
        m.d.sync += ea4a.eq(ea)
        # 6: their sum, the product of the significands; the exponent less 23
        product = Signal(2 * SIGNIFICAND_BITS, name="product")
        e5 = Signal(signed(EXPONENT_BITS + 2), name="e5")
        cross = partial[0, 1] + partial[1, 0]
        m.d.sync += [
            product.eq(partial[0, 0] + (cross << SPLIT) + (partial[1, 1] << (2 * SPLIT))),
            e5.eq(ea4a + stages[4]["exp"] - (SIGNIFICAND_BITS - 1)),
        ]
        # 7: the product's 24-bit significand p and exponent e (f = p * 2**e): 24 bits
        # dropped if its bit 47 is set, else 23, rounded to nearest even
        p = Signal(SIGNIFICAND_BITS, name="p")
        e = Signal(signed(EXPONENT_BITS + 2), name="e")
        zero6 = Signal(name="zero6")
        top = product[2 * SIGNIFICAND_BITS - 1]
        wide = Signal(SIGNIFICAND_BITS + 1, name="wide")
        narrow = Signal(SIGNIFICAND_BITS + 1, name="narrow")
        m.d.comb += [
            wide.eq(_round_shift(product, Const(SIGNIFICAND_BITS), SIGNIFICAND_BITS + 1)),
            narrow.eq(_round_shift(product, Const(SIGNIFICAND_BITS - 1), SIGNIFICAND_BITS + 1)),
        ]
        rounded2 = Mux(top, wide, narrow)
        carry2 = rounded2[SIGNIFICAND_BITS]
        m.d.sync += [
            p.eq(Mux(carry2, rounded2 >> 1, rounded2)),
            e.eq(e5 + (SIGNIFICAND_BITS - 1) + top + carry2),
            zero6.eq(product == 0),
        ]
        # 8: to the integer: saturated, zero, or p >> (14..24) rounded to even
        r = Signal(BOUND_BITS + 1, name="r")  # |r| < 2**10, or saturated at 2**10
        shift = Signal(range(LAST_SHIFT + 1), name="shift")
        m.d.comb += shift.eq((-e)[: len(shift)])
        with m.If(zero6 | (e < -LAST_SHIFT)):
            m.d.sync += r.eq(0)
        with m.Elif(e >= SATURATES):
            m.d.sync += r.eq(1 << BOUND_BITS)
        with m.Else():
            m.d.sync += r.eq(_round_shift(p, shift, BOUND_BITS + 1))
        # 9: the sign, the zero point, the clip
        last = stages[7]
        y = Signal(signed(BOUND_BITS + 3), name="y")
        m.d.comb += y.eq(Mux(last["neg"], -r, r) + last["zero"])
        m.d.sync += [
            self.out.eq(Mux(y < last["lo"], last["lo"], Mux(y > last["hi"], last["hi"], y))),
            self.out_valid.eq(last["valid"]),
        ]
        return m

    @staticmethod
    def _fields(m: Module, k: int) -> dict:
        return {
            "valid": Signal(name=f"valid{k}"),
            "sig": Signal(SIGNIFICAND_BITS, name=f"sig{k}"),
            "exp": Signal(signed(EXPONENT_BITS), name=f"exp{k}"),
            "zero": Signal(signed(BOUND_BITS), name=f"zero{k}"),
            "lo": Signal(signed(BOUND_BITS), name=f"lo{k}"),
            "hi": Signal(signed(BOUND_BITS), name=f"hi{k}"),
            "neg": Signal(name=f"neg{k}"),
        }
