"""The GEMM core: BATCH x BLOCK_IN int8 inputs times BLOCK_OUT x BLOCK_IN int8 weights, the
BATCH x BLOCK_OUT dot products as accumulator-width sums, one pair per cycle, pipelined.

With `packed`, two products that share an input lane share one multiplier (the DSP48E1 trick,
cf. Xilinx WP486): a * ((w1 << 16) + w0) = (a*w1 << 16) + a*w0, and since |a*w0| <= 2**14 the
low product is the sign-extended low 16 bits and the high one the rest. A 16x16 array then needs
128 multipliers instead of 256 (a Zynq-7020 has 220 DSP48E1).
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import HwConfig

PACK_SHIFT = 16


class GemmCore(wiring.Component):
    LATENCY = 4  # operands (the packed weights combined), products, the adder trees' first
    # levels, the rest

    def __init__(self, cfg: HwConfig, packed: bool | None = None):
        self.cfg = cfg
        self.packed = (cfg.block_out % 2 == 0) if packed is None else packed
        if self.packed and (cfg.block_out % 2 or cfg.inp_bits > 8 or cfg.log_wgt_width > 3):
            raise ValueError("multiplier packing needs int8 operands and an even BLOCK_OUT")
        b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
        super().__init__(
            {
                "inp": In(b * bi * cfg.inp_bits),
                "wgt": In(bo * bi * (1 << cfg.log_wgt_width)),
                "valid": In(1),
                "sums": Out(b * bo * cfg.acc_bits),
                "sums_valid": Out(1),
            }
        )

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

        def wgt(o, i):
            return self.wgt[(o * bi + i) * wb : (o * bi + i + 1) * wb].as_signed()

        # the operands are registered first, the packed weights already combined, so only a
        # flip-flop sits in front of each multiplier (its adder would otherwise be on the path)
        weights = {}
        for i in range(bi):
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
        prod = {}  # (r, o, i) -> registered product
        # the datapath's registers have no reset (only `valid` says what they hold)
        sums = Signal.like(self.sums, reset_less=True)
        m.d.comb += self.sums.eq(sums)
        # an input lane feeds a multiplier per output (per pair, packed): two copies of its
        # register, each for half of them, halve the fan-out the route to the DSPs spreads
        # (the 92.4 MHz route's most common failing path was a0_i -> DSP -> p). The second
        # copy loads only with `valid`, as nothing reads a product without it, so yosys keeps
        # it (a plain copy it merges back into one).
        outputs = bo // 2 if self.packed else bo
        copies = 2 if outputs >= 4 else 1
        for r in range(b):
            for i in range(bi):
                lane = []
                for k in range(copies):
                    a = Signal(signed(ib), name=f"a{r}_{i}" + (f"_{k}" if k else ""),
                               reset_less=True)  # fmt: skip
                    if k == 0:
                        m.d.sync += a.eq(inp(r, i))
                    else:
                        with m.If(self.valid):
                            m.d.sync += a.eq(inp(r, i))
                    lane.append(a)

                def a_for(o, lane=lane):  # the copy output `o` (packed: its pair) reads
                    return lane[(o // 2 if self.packed else o) * copies // outputs]

                if self.packed:
                    for o in range(0, bo, 2):
                        both = Signal(
                            signed(ib + wb + PACK_SHIFT + 1), name=f"p{r}_{o}_{i}", reset_less=True
                        )
                        m.d.sync += both.eq(a_for(o) * weights[o, i])
                        low = both[:PACK_SHIFT].as_signed()
                        high = (both - low) >> PACK_SHIFT
                        prod[r, o, i], prod[r, o + 1, i] = low, high
                else:
                    for o in range(bo):
                        p = Signal(signed(ib + wb), name=f"p{r}_{o}_{i}", reset_less=True)
                        m.d.sync += p.eq(a_for(o) * weights[o, i])
                        prod[r, o, i] = p
        # the adder trees, registered halfway (their first levels, then the rest)
        split = (bi.bit_length() - 1 + 1) // 2  # levels before the middle register
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
