"""The GEMM core: BATCH x BLOCK_IN int8 inputs times BLOCK_OUT x BLOCK_IN int8 weights, the
BATCH x BLOCK_OUT dot products as accumulator-width sums, one pair per cycle, pipelined.

With `packed`, two products that share an input lane share one multiplier (the DSP48E1 trick,
cf. Xilinx WP486): a * ((w1 << 16) + w0) = (a*w1 << 16) + a*w0, and since |a*w0| <= 2**14 the
low product is the sign-extended low 16 bits and the high one the rest. A 16x16 array then needs
128 multipliers instead of 256 (a Zynq-7020 has 220 DSP48E1).

With `packed=ECP5_DSP` (the ECP5 flows), each product is a MULT18X18D instance with its input
and output registers on, in place of the operand and product flip-flops: the same latency and
cycles (see dsp.py).

On a config with the depthwise mode (`depthwise_window`), each multiplier row may take its own
inputs (`dw_inp`, selected by `dw`) in place of the one input row all rows share: a
multiplier row is an output lane, or with `packed` a pair of them (the unit then gives each
pass one lane of the pair its channel's taps and zeroes the other's weights).
"""

from __future__ import annotations

from amaranth import Cat, Instance, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import HwConfig
from tilecraft.hw.rtl.dsp import (
    DSP_WIDTH,
    ECP5_DSP,
    ECP5_DSP_MODEL,
    Mult18x18dModel,
    mult18x18d_pins,
)

PACK_SHIFT = 16


def multipliers_packed(cfg: HwConfig, packed: bool | str | None = None) -> bool:
    """Whether a GemmCore built with `packed` pairs its products on one multiplier: never on
    the ECP5's MULT18X18D instances, by the config's choice where `packed` is None."""
    if packed in (ECP5_DSP, ECP5_DSP_MODEL):
        return False
    return cfg.packs_multipliers if packed is None else bool(packed)


class GemmCore(wiring.Component):
    LATENCY = 4  # operands (the packed weights combined), products, the adder trees' first
    # levels, the rest

    def __init__(self, cfg: HwConfig, packed: bool | str | None = None):
        self.cfg = cfg
        self.dsp = packed if packed in (ECP5_DSP, ECP5_DSP_MODEL) else None
        if self.dsp and (cfg.inp_bits > DSP_WIDTH or (1 << cfg.log_wgt_width) > DSP_WIDTH):
            raise ValueError(f"MULT18X18D operands are at most {DSP_WIDTH} bits")
        self.packed = multipliers_packed(cfg, packed)
        if self.packed and (cfg.block_out % 2 or cfg.inp_bits > 8 or cfg.log_wgt_width > 3):
            raise ValueError("multiplier packing needs int8 operands and an even BLOCK_OUT")
        b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
        members = {
            "inp": In(b * bi * cfg.inp_bits),
            "wgt": In(bo * bi * (1 << cfg.log_wgt_width)),
            "valid": In(1),
            "sums": Out(b * bo * cfg.acc_bits),
            "sums_valid": Out(1),
        }
        if cfg.depthwise_window:  # each multiplier row's own inputs, in the depthwise mode
            members["dw"] = In(self.rows)  # the mode's select, a copy per multiplier row
            members["dw_inp"] = In(b * self.rows * bi * cfg.inp_bits)
        super().__init__(members)

    @property
    def rows(self) -> int:
        """Multiplier rows: output lanes, or pairs of them when packed."""
        return self.cfg.block_out // 2 if self.packed else self.cfg.block_out

    @property
    def multipliers(self) -> int:
        c = self.cfg
        n = c.batch * c.block_in * c.block_out
        return n // 2 if self.packed else n

    def elaborate(self, platform):
        m = Module()
        c = self.cfg
        b, bi, bo = c.batch, c.block_in, c.block_out
        ib, wb, ab = c.inp_bits, 1 << c.log_wgt_width, c.acc_bits

        def inp(r, i):
            return self.inp[(r * bi + i) * ib : (r * bi + i + 1) * ib].as_signed()

        def operand(r, row, i):
            """Multiplier row `row`'s input lane i: the shared row's, or its own."""
            if not c.depthwise_window:
                return inp(r, i)
            k = (r * self.rows + row) * bi + i
            return Mux(self.dw[row], self.dw_inp[k * ib : (k + 1) * ib].as_signed(), inp(r, i))

        def wgt(o, i):
            return self.wgt[(o * bi + i) * wb : (o * bi + i + 1) * wb].as_signed()

        prod = {}  # (r, o, i) -> registered product
        # the datapath's registers have no reset (only `valid` says what they hold)
        sums = Signal.like(self.sums, reset_less=True)
        m.d.comb += self.sums.eq(sums)
        if self.dsp:  # the DSPs' own registers hold the operands and the products
            for r in range(b):
                for o in range(bo):
                    for i in range(bi):
                        product = Signal(2 * DSP_WIDTH, name=f"p{r}_{o}_{i}")
                        pins = mult18x18d_pins(operand(r, o, i), wgt(o, i), product)
                        cell = (
                            Instance("MULT18X18D", **pins)
                            if self.dsp == ECP5_DSP
                            else Mult18x18dModel(pins)
                        )
                        m.submodules[f"mult{r}_{o}_{i}"] = cell
                        prod[r, o, i] = product[: ib + wb].as_signed()
        # the operands are registered first, the packed weights already combined, so only a
        # flip-flop sits in front of each multiplier (its adder would otherwise be on the path)
        weights = {}
        for i in range(bi if not self.dsp else 0):
            if self.packed:
                for o in range(0, bo, 2):
                    w = Signal(signed(wb + PACK_SHIFT + 1), name=f"w{o}_{i}", reset_less=True)
                    m.d.sync += w.eq((wgt(o + 1, i) << PACK_SHIFT) + wgt(o, i))
                    weights[o, i] = w
            else:
                for o in range(bo):
                    w = Signal(signed(wb), name=f"w{o}_{i}", reset_less=True)
                    m.d.sync += w.eq(wgt(o, i))
                    weights[o, i] = w
        for r in range(b if not self.dsp else 0):
            for i in range(bi):
                a = Signal(signed(ib), name=f"a{r}_{i}", reset_less=True)
                m.d.sync += a.eq(inp(r, i))
                own = {}  # the depthwise mode's inputs: an operand register per multiplier row
                for row in range(self.rows if c.depthwise_window else 0):
                    own[row] = Signal(signed(ib), name=f"a{r}_{row}_{i}", reset_less=True)
                    m.d.sync += own[row].eq(operand(r, row, i))
                if self.packed:
                    for o in range(0, bo, 2):
                        both = Signal(
                            signed(ib + wb + PACK_SHIFT + 1), name=f"p{r}_{o}_{i}", reset_less=True
                        )
                        m.d.sync += both.eq(own.get(o // 2, a) * weights[o, i])
                        low = both[:PACK_SHIFT].as_signed()
                        high = (both - low) >> PACK_SHIFT
                        prod[r, o, i], prod[r, o + 1, i] = low, high
                else:
                    for o in range(bo):
                        p = Signal(signed(ib + wb), name=f"p{r}_{o}_{i}", reset_less=True)
                        m.d.sync += p.eq(own.get(o, a) * weights[o, i])
                        prod[r, o, i] = p
        # the adder trees, registered halfway (their first levels, then the rest); from the
        # DSPs, after the first level: their products cross to the fabric's adders (5.6 ns of
        # routing on the 92.9 MHz route, whose two levels after it made a 10.5 ns path)
        levels = bi.bit_length() - 1
        split = min(1, levels) if self.dsp else (levels + 1) // 2  # levels before the register
        for r in range(b):
            for o in range(bo):
                terms = [prod[r, o, i] for i in range(bi)]
                level = 0
                while len(terms) > 1:
                    terms = [x + y for x, y in zip(terms[0::2], terms[1::2])] + (
                        [terms[-1]] if len(terms) % 2 else []
                    )
                    level += 1
                    if level == split:
                        held = []
                        for t, term in enumerate(terms):
                            h = Signal(signed(len(term)), name=f"s{r}_{o}_{t}", reset_less=True)
                            m.d.sync += h.eq(term)
                            held.append(h)
                        terms = held
                if split == 0:  # BLOCK_IN 1: nothing to add, one register stands in
                    h = Signal(signed(len(terms[0])), name=f"s{r}_{o}", reset_less=True)
                    m.d.sync += h.eq(terms[0])
                    terms = [h]
                lane = r * bo + o
                m.d.sync += sums[lane * ab : (lane + 1) * ab].eq(terms[0])
        valid = Signal(self.LATENCY - 1)
        m.d.sync += [valid.eq(Cat(self.valid, valid)), self.sums_valid.eq(valid[-1])]
        return m
