"""Registered ECP5 multipliers: MULT18X18D instances with their input and output registers on
(two cycles, as an operand register and a product register around a plain multiplier), for the
ECP5 flows, and `Mult18x18dModel`, the same pins for simulation.

The timing reason: nextpnr times a plain product as register -> route -> 3.9 ns of DSP ->
route -> register, and the register placed away from the DSP makes that the 92.4 MHz route's
most common failing path; with the DSP's own registers, the routes run from and to them.
Lattice's simulation model of MULT18X18D (its ECP5 library: input register, multiplier, an
optional pipeline register, output register) makes that two cycles; nextpnr times a cell with
both input registers and the output register as clocked (REGS_ALL) and writes REG_INPUTA/B_CLK
and REG_OUTPUT_CLK into the bitstream. yosys has no model of the cell (a blackbox), so the tests
run the same pins on `Mult18x18dModel`.
"""

from __future__ import annotations

from amaranth import Cat, ClockSignal, Const, Elaboratable, Instance, Module, Signal, signed
from amaranth.hdl import Value

ECP5_DSP = "ecp5-dsp"  # `packed`: one registered MULT18X18D instance per product
ECP5_DSP_MODEL = "ecp5-dsp-model"  # the same pins on Mult18x18dModel, for simulation
DSP_WIDTH = 18  # a MULT18X18D's operands


def mult18x18d_pins(a, b, product, input_registers: bool = True) -> dict:
    """Instance arguments of a signed MULT18X18D, a and b registered in the DSP and its product
    registered at P (two cycles), on the `sync` clock with CE0 high and RST0 low; without
    `input_registers`, a and b go straight into the multiplier (one cycle: for operands that
    come from flip-flops of their own, nextpnr then times them into P, REGS_OUTPUT)."""
    clk_in = "CLK0" if input_registers else "NONE"
    kw = {
        "p_REG_INPUTA_CLK": clk_in,
        "p_REG_INPUTB_CLK": clk_in,
        "p_REG_OUTPUT_CLK": "CLK0",
        "p_REG_PIPELINE_CLK": "NONE",
        "p_REG_INPUTC_CLK": "NONE",
        "p_REG_INPUTA_CE": "CE0",
        "p_REG_INPUTB_CE": "CE0",
        "p_REG_OUTPUT_CE": "CE0",
        "p_REG_INPUTA_RST": "RST0",
        "p_REG_INPUTB_RST": "RST0",
        "p_REG_OUTPUT_RST": "RST0",
        "p_GSR": "DISABLED",
        "p_RESETMODE": "SYNC",
        "p_MULT_BYPASS": "DISABLED",
        "p_SOURCEB_MODE": "B_SHIFT",
        "p_CLK0_DIV": "ENABLED",
        "i_CLK0": ClockSignal(),
        "i_CE0": Const(1),
        "i_RST0": Const(0),
        "i_SIGNEDA": Const(1),
        "i_SIGNEDB": Const(1),
        "i_SOURCEA": Const(0),
        "i_SOURCEB": Const(0),
    }

    def extended(x):  # sign-extended to the DSP's width
        return Cat(x, x[-1].replicate(DSP_WIDTH - len(x)))

    wide_a, wide_b = extended(a), extended(b)
    for k in range(DSP_WIDTH):
        kw[f"i_A{k}"], kw[f"i_B{k}"], kw[f"i_C{k}"] = wide_a[k], wide_b[k], Const(0)
    for k in range(2 * DSP_WIDTH):
        kw[f"o_P{k}"] = product[k]
    return kw


def registered_product(m: Module, a: Value, b: Value, name: str, dsp: str | None) -> Signal:
    """a * b in a register, a cycle after a and b (which should be flip-flops of their own):
    with `dsp` ECP5_DSP the register is a MULT18X18D's output register (a plain product is
    timed flip-flop -> route -> DSP -> route -> flip-flop, the 81.1 MHz route's worst path, 12.3
    ns with 7.9 of routing), ECP5_DSP_MODEL the same pins simulated, else a registered `*`.
    Each operand fits the DSP's signed 18 bits: up to 17 bits unsigned or 18 signed."""
    product = Signal((a * b).shape(), name=name)
    if dsp is None:
        m.d.sync += product.eq(a * b)
        return product

    def as_signed(x):  # an unsigned operand gets a zero above it
        if x.shape().signed:
            return x
        return Cat(x, Const(0, 1)).as_signed()

    wide_a, wide_b = as_signed(a), as_signed(b)
    for x in (wide_a, wide_b):
        if len(x) > DSP_WIDTH:
            raise ValueError(f"a {len(x)}-bit signed operand does not fit a {DSP_WIDTH}-bit DSP")
    p = Signal(2 * DSP_WIDTH, name=f"{name}_p")
    pins = mult18x18d_pins(wide_a, wide_b, p, input_registers=False)
    cell = Instance("MULT18X18D", **pins) if dsp == ECP5_DSP else Mult18x18dModel(pins)
    m.submodules[f"{name}_dsp"] = cell
    m.d.comb += product.eq(p[: len(product)])
    return product


class Mult18x18dModel(Elaboratable):
    """MULT18X18D at its pins, for the modes `mult18x18d_pins` uses (signed operands, the
    input registers (both, or neither) and the output register on CLK0 = the sync domain, CE0
    high, RST0 low, no pipeline register): what simulation runs in place of the instance."""

    def __init__(self, pins: dict):
        self._MustUse__silence = True  # a refused set of pins is not an unused elaboratable
        p = {k[2:]: v for k, v in pins.items() if k.startswith("p_")}
        # the input registers both on or both off
        self.input_registers = p.get("REG_INPUTA_CLK") == "CLK0"
        clk_in = "CLK0" if self.input_registers else "NONE"
        want = {
            "REG_INPUTA_CLK": clk_in,
            "REG_INPUTB_CLK": clk_in,
            "REG_OUTPUT_CLK": "CLK0",
            "REG_PIPELINE_CLK": "NONE",
            "MULT_BYPASS": "DISABLED",
        }
        for name, value in want.items():
            if p.get(name) != value:
                raise ValueError(f"the model covers {name}={value!r}, not {p.get(name)!r}")
        for pin in ("CE0", "RST0", "SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB"):
            if not isinstance(pins[f"i_{pin}"], Const):
                raise ValueError(f"the model covers {pin} tied to a constant")
        if pins["i_CE0"].value != 1 or pins["i_RST0"].value != 0:
            raise ValueError("the model covers CE0 high and RST0 low")
        if pins["i_SIGNEDA"].value != 1 or pins["i_SIGNEDB"].value != 1:
            raise ValueError("the model covers signed operands")
        self._MustUse__silence = False
        self.pins = pins

    def elaborate(self, platform):
        m = Module()
        pins = self.pins
        a_reg = Signal(signed(DSP_WIDTH), reset_less=True)
        b_reg = Signal(signed(DSP_WIDTH), reset_less=True)
        p_reg = Signal(signed(2 * DSP_WIDTH), reset_less=True)
        a = Cat(*(pins[f"i_A{k}"] for k in range(DSP_WIDTH)))
        b = Cat(*(pins[f"i_B{k}"] for k in range(DSP_WIDTH)))
        domain = m.d.sync if self.input_registers else m.d.comb
        domain += [a_reg.eq(a), b_reg.eq(b)]
        m.d.sync += p_reg.eq(a_reg * b_reg)
        m.d.comb += [pins[f"o_P{k}"].eq(p_reg[k]) for k in range(2 * DSP_WIDTH)]
        return m
