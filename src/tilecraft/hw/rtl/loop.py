"""`LoopSequencer` walks a GEMM/ALU instruction's loop (i < iter_out, j < iter_in, micro-op u in
[uop_bgn, uop_end)) keeping running offsets (i*out + j*in) instead of multiplying."""

from __future__ import annotations

from amaranth import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw.isa import IsaSpec

STRIDED = ("dst", "src", "wgt")  # the micro-op indices a loop advances


def _per_index(bits: int) -> data.StructLayout:
    return data.StructLayout({f: unsigned(bits) for f in STRIDED})


class LoopSequencer(wiring.Component):
    def __init__(self, spec: IsaSpec, idx_bits: int):
        self.iter_bits = spec.field("iter_out").width
        uop = spec.field("uop_end").width
        super().__init__(
            {
                "start": In(1),
                "uop_bgn": In(uop),
                "uop_end": In(uop),
                "iter_out": In(self.iter_bits),
                "iter_in": In(self.iter_bits),
                "strides_out": In(_per_index(idx_bits)),  # per i, for dst, src and wgt
                "strides_in": In(_per_index(idx_bits)),  # per j
                "advance": In(1),
                "valid": Out(1),
                "u": Out(uop),
                "last": Out(1),
                "offsets": Out(_per_index(idx_bits + self.iter_bits + 1)),  # i*out + j*in
                # this step's src index is the step before's: one micro-op, and the loop step
                # left src where it was (inner src stride 0; at an outer step, both 0)
                "src_repeats": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        bgn = Signal.like(self.uop_bgn)
        i, j = Signal(self.iter_bits), Signal(self.iter_bits)
        strides_out, strides_in = Signal.like(self.strides_out), Signal.like(self.strides_in)
        outer = Signal.like(self.offsets)
        # the loops' values one before their last, latched at start: a step's "now last"
        # compares the counter itself, with no adder before the compare (the 92.4 MHz route
        # had `i + 1 == n_out - 1` on a path)
        end_2 = Signal.like(self.uop_end)
        n_out_2, n_in_2 = Signal(self.iter_bits), Signal(self.iter_bits)
        # latched at start: one micro-op with no inner src stride; and no outer one either
        same_in, same_out = Signal(), Signal()
        # whether u, j and i are at their last values, kept in registers (set from the next
        # value's compare as each one steps), so the step's enables start from flip-flops
        last_u, last_j, last_i = Signal(), Signal(), Signal()
        one_u, one_j = Signal(), Signal()  # the loops of one micro-op, of one inner step
        m.d.comb += self.last.eq(last_u & last_j & last_i)
        with m.If(self.start):
            m.d.sync += [
                bgn.eq(self.uop_bgn),
                end_2.eq(self.uop_end - 2),
                n_out_2.eq(self.iter_out - 2),
                n_in_2.eq(self.iter_in - 2),
                i.eq(0),
                j.eq(0),
                self.u.eq(self.uop_bgn),
                same_in.eq((self.uop_bgn + 1 == self.uop_end) & (self.strides_in.src == 0)),
                last_u.eq(self.uop_bgn + 1 == self.uop_end),
                one_u.eq(self.uop_bgn + 1 == self.uop_end),
                last_j.eq(self.iter_in == 1),
                one_j.eq(self.iter_in == 1),
                last_i.eq(self.iter_out == 1),
                same_out.eq(self.strides_out.src == 0),
                self.src_repeats.eq(0),
                self.valid.eq(
                    (self.iter_out != 0) & (self.iter_in != 0) & (self.uop_bgn < self.uop_end)
                ),
            ]
            m.d.sync += [
                strides_out.eq(self.strides_out),
                strides_in.eq(self.strides_in),
                outer.eq(0),
                self.offsets.eq(0),
            ]
        with m.Elif(self.valid & self.advance):
            with m.If(~last_u):
                m.d.sync += [self.u.eq(self.u + 1), last_u.eq(self.u == end_2)]
            with m.Else():
                m.d.sync += [self.u.eq(bgn), last_u.eq(one_u)]
                with m.If(~last_j):
                    m.d.sync += [j.eq(j + 1), self.src_repeats.eq(same_in)]
                    m.d.sync += last_j.eq(j == n_in_2)
                    for f in STRIDED:
                        off = self.offsets[f]
                        m.d.sync += off.eq(off + strides_in[f])
                with m.Else():
                    m.d.sync += [j.eq(0), last_j.eq(one_j)]
                    with m.If(~last_i):
                        m.d.sync += [i.eq(i + 1), self.src_repeats.eq(same_in & same_out)]
                        m.d.sync += last_i.eq(i == n_out_2)
                        for f in STRIDED:
                            nxt = outer[f] + strides_out[f]
                            m.d.sync += [outer[f].eq(nxt), self.offsets[f].eq(nxt)]
                    with m.Else():
                        m.d.sync += self.valid.eq(0)
        return m
