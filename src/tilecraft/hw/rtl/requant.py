"""One lane of the requantization unit: onnxruntime's float32 requantization
(`ops.requant`, the spec) in integer logic, pipelined to take one accumulator a cycle.

    v = acc + bias                                  int32, wrapping
    y = clip(rne(fl32(fl32(v) * scale)) + zero, lo, hi)    (+ residual before the clip)

with the scale held as its 24-bit significand and 7-bit exponent (`ops.requant.scale_fields`).
Each stage is one step of the spec into registers, none deeper than a carry chain or a few
levels of narrow muxes (the lane alone routes on the ECP5 with room to spare, so that the
whole core's longer routes still meet 100 MHz):

    1  v = acc + bias
    2  its sign, and its magnitude (32 bits: |-2**31| fits unsigned)
    3  the magnitude's leading one (a tree of narrow picks, `_leading_one`)
    4  the magnitude normalized: shifted left until its leading one is bit 31
    5  float32(|v|): the normalized word's top 24 bits rounded to nearest even (a 32-bit
       magnitude drops up to 8 bits; a shorter one drops only zeros), a carry renormalizing
       to 2**23, so a is 2**23 <= a < 2**24 (0 for v = 0) and its exponent ea = leading one - 23
    6  a * significand: on the ECP5 its four partial products (a and the significand split
       at bit 17, each piece within a MULT18X18D's 18 signed bits), each in a multiplier's
       output register; elsewhere one registered product (two of a Xilinx DSP48's 25 x 18)
    7  the cross products' sum, the outer two side by side (they do not overlap), and the
       exponent of the whole product (without partial products: the product held)
    8  the 48-bit product
    9  its float32 rounding set up: both significands are normalized, so its leading one is
       bit 47 or 46 and it keeps 24 bits from there (no search), with the dropped bits'
       guard and sticky
   10  the rounded product: its significand p (2**23 <= p < 2**24, or 0) and exponent e
   11  what the integer rounding of p * 2**e needs: an e >= -13 is past any clip and
       saturates, an e <= -25 rounds to 0, the rest is a right shift by 14-24
   12  that shift, with its guard and sticky
   13  the rounded integer (or 0, or the saturated 2**10); with a residual, the zero point
       plus the residual
   14  the sign and the zero point
   15  the clip

`LATENCY` cycles from an input to its output, one input a cycle, no stall (a `valid` bit rides
along; each per-instruction field rides only as far as the stage that uses it). Clip bounds
and the zero point are 10-bit signed (|zero| <= 511, so any |r| >= 2**10 saturates).
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw.isa.requant import EXPONENT_BITS, SIGNIFICAND_BITS
from tilecraft.hw.rtl.dsp import registered_product

LATENCY = 15
ACC_BITS = 32
BOUND_BITS = 10  # zero point and clip bounds: signed, |x| <= 511
RESIDUAL_BITS = 8  # the residual add's operand: int8. |zero + residual| <= 639, so any
# |r| >= 2**10 still lands past a STORE's clip bounds, which are int8 (hw/isa/requant.py)
SATURATES = -13  # a product exponent from here up puts |r| >= 2**10: past any clip
LAST_SHIFT = 24  # p >> 25 and beyond round to 0 (p < 2**24)
SPLIT = 17  # the significands' low pieces: 17 bits unsigned, a DSP's 18 signed
KEPT = SIGNIFICAND_BITS  # a float32's significand bits
DROPPED = ACC_BITS - KEPT  # the normalized magnitude's bits below its significand


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


def _nearest_even(kept, guard, sticky):
    """The increment that rounds `kept` to nearest, ties to even, given the highest dropped
    bit (`guard`) and whether any bit below it is set (`sticky`)."""
    return guard & (sticky | kept[0])


def _rounded(kept, inc):
    """kept + inc (a KEPT-bit significand and its rounding increment) as a significand of
    KEPT bits and whether it carried: the increment of all ones leaves zeros below the
    carry, so the significand is 2**(KEPT - 1) and the exponent one more. The carry is
    worked out beside the adder (all ones, and an increment), not from its top bit, so the
    exponent's choice does not wait for the carry chain."""
    carry = kept.all() & inc
    return (kept + inc)[:KEPT] | (carry << (KEPT - 1)), carry


# A register's attributes that keep it a flip-flop: `keep` for yosys (its shift-register
# mapping passes over kept flip-flops; it ignores `shreg_extract`), `shreg_extract` for Vivado
FLIP_FLOPS = {"keep": 1, "shreg_extract": "no"}


def lane_ports(residual: bool = False) -> dict:
    """A lane's ports (`RequantLane`'s signature members), with the residual's input or not."""
    ports = {
        "valid": In(1),
        "acc": In(signed(ACC_BITS)),
        "bias": In(signed(ACC_BITS)),
        "significand": In(SIGNIFICAND_BITS),
        "exponent": In(signed(EXPONENT_BITS)),
        "zero": In(signed(BOUND_BITS)),
        "lo": In(signed(BOUND_BITS)),
        "hi": In(signed(BOUND_BITS)),
    }
    if residual:
        ports["residual"] = In(signed(RESIDUAL_BITS))
    return {**ports, "out_valid": Out(1), "out": Out(signed(BOUND_BITS))}


class RequantLane(wiring.Component):
    """`ops.requant.requantize` for one accumulator a cycle, `LATENCY` cycles later; `dsp`:
    where the partial products are registered (`dsp.registered_product`: ECP5_DSP in a
    MULT18X18D's output register, None a registered `*`). With `residual` (configs with
    `requant_residual`) an int8 `residual` input too, added to the zero point in stage 13
    (the same latency; a lane without it is the same Verilog as before the knob)."""

    def __init__(self, dsp: str | None = None, residual: bool = False):
        self.dsp, self.adds_residual = dsp, residual
        super().__init__(lane_ports(residual))

    def elaborate(self, platform):
        m = Module()

        # the stages' data registers have no reset: only `valid`'s do (a lane's values are
        # taken only with its valid), which keeps the core's reset net to the flip-flops that
        # need it (with the data's, 1x8x8 with the unit had 14,871 reset sinks against the
        # plain core's 6,704, routed on the fabric to every slice)
        # On the Xilinx parts (no `dsp`) they stay flip-flops: synth_xilinx otherwise maps
        # each chain of them (the parameters' delays) to SRL16E shift registers, a LUT each,
        # and the LUTs are the xc7z020's scarce resource (default with the unit and the
        # depthwise mode at 75.1% with them) where its flip-flops are not (40%)
        attrs = {} if self.dsp else FLIP_FLOPS

        def reg(value, name, shape=None, reset=False):  # value into a register of its own
            shape = shape if shape is not None else value.shape()
            r = Signal(shape, name=name, reset_less=not reset, attrs=attrs)
            m.d.sync += r.eq(value)
            return r

        def delayed(value, cycles, name, reset=False):  # value `cycles` registers later
            for k in range(cycles):
                value = reg(value, f"{name}_{k + 1}", reset=reset)
            return value

        # 1, 2: v, then its sign and magnitude
        v = reg(self.acc + self.bias, "v", signed(ACC_BITS))
        neg = reg(v[-1], "neg")
        mag = reg(Mux(v[-1], -v, v), "mag", ACC_BITS)
        # 3: the leading one
        found, at = _leading_one(mag)
        mag3 = reg(mag, "mag3")
        top = reg(at, "top", range(ACC_BITS))
        del found  # a zero magnitude normalizes to zero all the same
        # 4: normalized (leading one at bit 31: a left shift by 31 - top, which is ~top)
        norm = reg((mag3 << ~top)[:ACC_BITS], "norm", ACC_BITS)
        ea4 = reg(top - (KEPT - 1), "ea4", signed(7))  # -23 .. 8
        # 5: float32(|v|) = a * 2**ea, rounded to nearest even
        kept = norm[DROPPED:]
        inc = _nearest_even(kept, norm[DROPPED - 1], norm[: DROPPED - 1].any())
        a_value, a_carry = _rounded(kept, inc)
        a = reg(a_value, "a", KEPT)
        ea = reg(Mux(a_carry, ea4 + 1, ea4), "ea", signed(7))
        # 6: the significands' product. On the ECP5 (`dsp` set) as four partial products, each
        # in a MULT18X18D's output register (18 x 18 each); elsewhere one registered product,
        # which a Xilinx DSP48's 25 x 18 multiplier takes in two DSPs (four partial products
        # took four, pushing the xc7z020's default config with the unit to 81% of its DSPs)
        sig = delayed(self.significand, 5, "sig")
        ea6 = reg(ea, "ea6")
        exp = delayed(self.exponent, 6, "exp")
        if self.dsp is None:
            whole = reg(a * sig, "whole", 2 * KEPT)
            # 7: the product held a stage, as the partial products' sums take it
            cross = Const(0, 2 * SIGNIFICAND_BITS - SPLIT)
            outer = reg(whole, "outer", 2 * KEPT)
        else:
            pieces = [(a[:SPLIT], a[SPLIT:]), (sig[:SPLIT], sig[SPLIT:])]
            partial = {
                (i, j): registered_product(m, pieces[0][i], pieces[1][j], f"pp{i}{j}", self.dsp)
                for i in (0, 1)
                for j in (0, 1)
            }
            # 7: the cross products' sum; the outer two side by side (pp00 < 2**(2 SPLIT))
            cross = reg(partial[0, 1] + partial[1, 0], "cross", 2 * SIGNIFICAND_BITS - SPLIT)
            outer = reg(Cat(partial[0, 0][: 2 * SPLIT], partial[1, 1]), "outer", 2 * KEPT)
        e7 = reg(ea6 + exp - (KEPT - 1), "e7", signed(EXPONENT_BITS + 2))
        # 8: the product of the significands, f = product * 2**e
        product = reg(outer + (cross << SPLIT), "product", 2 * KEPT)
        e8 = reg(e7, "e8")
        # 9: its leading one is bit 47 or 46; 24 bits kept from there, the rest rounded away
        high = product[-1]
        kept9 = reg(Mux(high, product[KEPT:], product[KEPT - 1 : -1]), "kept9", KEPT)
        guard = Mux(high, product[KEPT - 1], product[KEPT - 2])
        sticky = Mux(high, product[: KEPT - 1].any(), product[: KEPT - 2].any())
        guard9, sticky9 = reg(guard, "guard9"), reg(sticky, "sticky9")
        eb = reg(e8 + (KEPT - 1) + high, "eb", signed(EXPONENT_BITS + 2))
        zero9 = reg(product == 0, "zero9")
        # 10: the rounded product p * 2**e
        p_value, p_carry = _rounded(kept9, _nearest_even(kept9, guard9, sticky9))
        p = reg(p_value, "p", KEPT)
        e = reg(Mux(p_carry, eb + 1, eb), "e", signed(EXPONENT_BITS + 2))
        zero10 = reg(zero9, "zero10")
        # 11: saturated, zero, or a right shift by 14..24
        p11 = reg(p, "p11")
        nothing = reg(zero10 | (e < -LAST_SHIFT), "nothing")
        saturated = reg(e >= SATURATES, "saturated")
        shift = reg((-e)[:5], "shift", range(LAST_SHIFT + 1))
        # 12: the shift, its guard (bit shift - 1 of p) and sticky (the bits below that)
        p2 = Cat(Const(0, 1), p11)  # p * 2: bit `shift` of it is p's guard bit
        below = ~(Const((1 << len(p2)) - 1, len(p2)) << shift)[: len(p2)]
        q = reg((p11 >> shift)[: BOUND_BITS + 1], "q", BOUND_BITS + 1)
        guard12 = reg((p2 >> shift)[0], "guard12")
        sticky12 = reg((p2 & below).any(), "sticky12")
        nothing12, saturated12 = reg(nothing, "nothing12"), reg(saturated, "saturated12")
        # 13: the integer |r| < 2**10, or saturated at 2**10
        rounded = q + _nearest_even(q, guard12, sticky12)
        r = reg(Mux(nothing12, 0, Mux(saturated12, 1 << BOUND_BITS, rounded)), "r", BOUND_BITS + 1)
        # 14: the sign and the zero point (with the residual: their sum, worked out in 13)
        if self.adds_residual:
            both = delayed(self.zero, 12, "zero") + delayed(self.residual, 12, "residual")
            zero = reg(both, "zero_residual", signed(BOUND_BITS + 1))
        else:
            zero = delayed(self.zero, 13, "zero")
        y = reg(Mux(delayed(neg, 11, "neg"), zero - r, zero + r), "y", signed(BOUND_BITS + 3))
        # 15: the clip
        lo, hi = delayed(self.lo, 14, "lo"), delayed(self.hi, 14, "hi")
        out = reg(Mux(y < lo, lo, Mux(y > hi, hi, y)), "clipped", signed(BOUND_BITS))
        m.d.comb += self.out.eq(out)
        m.d.sync += self.out_valid.eq(delayed(self.valid, LATENCY - 1, "valid", reset=True))
        return m
