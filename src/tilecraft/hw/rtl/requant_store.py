"""A requantizing STORE's elements: its accumulator rows read through their bank's read port
(held for the STORE, sim/engine.py), requantized by `requant_lanes` lanes (`requant.RequantLane`,
the spec's arithmetic), one element out per row, in order.

For each set of `per_set` data rows (the whole transfer, or one row of it with
`param_per_row`) the stream reads the set's three parameter rows (hw/isa/requant.py: bias,
scale, clip) into registers, then its data rows. A set's parameters are read once the rows
before them have all entered the lanes (each lane carries its constants along its stages), so
the registers never change under a row being fed. A row of N = batch x block_out lanes takes
N / requant_lanes passes through the lanes, channel c's parameters in lane c of each batch row;
the passes' bytes are put together into the element the store writes (the narrowed row's
layout).
"""

from __future__ import annotations

from contextlib import nullcontext

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import isa_for
from tilecraft.hw.isa.requant import BOUND_BITS, EXPONENT_BITS, SIGNIFICAND_BITS, ZERO_BITS
from tilecraft.hw.rtl.queues import FlaggedFIFO
from tilecraft.hw.rtl.requant import ACC_BITS, RequantLane
from tilecraft.hw.rtl.signatures import SRAM_READ_LATENCY, ReadAddress

# data rows read ahead of the lanes: a read holds its place from its issue until its row has
# left the queue (the read's latency, then the queue's write and its level's update), and fewer
# places than those cycles stall the reads (4 places gave 4 rows in 5 cycles, measured)
ROW_QUEUE = SRAM_READ_LATENCY + 2
# the queue's storage: its places rounded up to a power of two (FlaggedFIFO's pointers wrap
# without a compare; a LUT RAM holds 16 or 32 rows either way)
ROW_STORAGE = 1 << (ROW_QUEUE - 1).bit_length()


class BankHold(wiring.Signature):
    """A unit outside the compute stage asking for an accumulator bank's read port (`want`,
    `bank`), and the compute stage's answer (`granted`, held until `want` drops): no GEMM or
    ALU instruction runs in the bank while it is granted."""

    def __init__(self):
        super().__init__({"want": Out(1), "bank": Out(1), "granted": In(1)})


class RequantStream(wiring.Component):
    def __init__(self, cfg: HwConfig, dsp: str | None = None):
        self.cfg, self.dsp = cfg, dsp  # dsp: where the lanes' products are registered
        spec = isa_for(cfg)
        self.lanes = cfg.batch * cfg.block_out
        if self.lanes % cfg.requant_lanes or cfg.acc_bits != ACC_BITS:
            self._MustUse__used = True  # refused, not forgotten: no UnusedElaboratable warning
            raise ValueError(
                f"the requant lanes take {ACC_BITS}-bit accumulators, {cfg.requant_lanes} of "
                f"them dividing a row's {self.lanes} (config {cfg.tag})"
            )
        idx = spec.acc_idx_bits
        ports = {
            "start": In(1),  # a pulse with the transfer's fields
            "base": In(idx),  # its first data row
            "total": In(32),  # its data rows
            "per_set": In(32),  # data rows per parameter set
            "param_base": In(idx),
            "go": In(1),  # the bank is held: reads may issue
            "room": In(1),  # the store can take one more element in flight
            "acc": Out(ReadAddress(idx, self.lanes * cfg.acc_bits)),
            "issued": Out(1),  # a data row's read went out this cycle
            "out_valid": Out(1),
            "out": Out(self.lanes * cfg.out_bits),
            # a parameter row read since `start` holds a scale that is not a normalized float32
            # or an empty clip (the simulator's IllegalInstructionError, sim/semantics.py)
            "bad_params": Out(1),
        }
        if cfg.requant_residual:  # the residual add: INP rows from res_base, one a data row
            inp_row = cfg.batch * cfg.block_in * cfg.inp_bits
            ports["residual"] = In(1)  # the transfer adds one
            ports["res_base"] = In(spec.inp_idx_bits)
            ports["inp"] = Out(ReadAddress(spec.inp_idx_bits, inp_row))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        n, lanes = self.lanes, cfg.requant_lanes
        passes = n // lanes
        ab = cfg.acc_bits

        # ---- reads: a set's three parameter rows, then its data rows -------------------
        row = Signal.like(self.base)  # the next data row
        rows_left = Signal(32)
        set_left = Signal(32)  # data rows left in this set
        per_set = Signal(32)  # the transfer's rows per set, kept (the input holds only at start)
        param_at = Signal.like(self.param_base)
        params_read = Signal(range(4))  # this set's parameter rows read (3: all)
        in_pipe = Signal(range(SRAM_READ_LATENCY + 1))  # data reads not back yet
        # the row queue writes a landing row on the landing alone: the reads count its places
        # (`held`, below), so it is never full when one lands (the 96.3 MHz route at seed 3
        # had SyncFIFO's level through its write enable and back into the level, 10.39 ns)
        m.submodules.rows = queue = FlaggedFIFO(n * ab, ROW_STORAGE, counted=True)
        rows = queue.r_stream
        if cfg.requant_residual:  # the rows' residuals, a queue beside theirs (the same
            # writes and reads, so the same levels)
            rb = cfg.inp_bits
            m.submodules.res_rows = res_queue = FlaggedFIFO(n * rb, ROW_STORAGE, counted=True)
            res_rows = res_queue.r_stream
            m.d.comb += res_rows.ready.eq(rows.ready)
        feeding = Signal()  # a row is in the lanes' passes
        drained = (in_pipe == 0) & ~rows.valid & ~feeding
        read_param = Signal()
        read_data = Signal()
        # the read decision from flip-flops alone (its compares and the parameter row's
        # address kept in registers as their inputs change: the route's next path after the
        # lanes' was rows_left's compare into the bank's read address)
        any_left = Signal()  # rows_left != 0
        need_params = Signal()  # params_read != 3
        param_addr = Signal.like(self.param_base)  # param_at + params_read
        # room in the row queue for one more read: a flip-flop, its compare taken on next
        # cycle's count (below), so no adder lies between the queue and the read decision
        space = Signal(init=1)
        with m.If(self.start):
            m.d.sync += [
                row.eq(self.base),
                rows_left.eq(self.total),
                any_left.eq(self.total != 0),
                set_left.eq(self.per_set),
                per_set.eq(self.per_set),
                param_at.eq(self.param_base),
                param_addr.eq(self.param_base),
                params_read.eq(0),
                need_params.eq(1),
            ]
        with m.Elif(self.go & any_left):
            with m.If(need_params):
                m.d.comb += read_param.eq(drained)
            with m.Else():
                m.d.comb += read_data.eq(self.room & space)
        with m.If(read_param):
            m.d.sync += [
                params_read.eq(params_read + 1),
                need_params.eq(params_read != 2),
                param_addr.eq(param_addr + 1),
            ]
        with m.If(read_data):
            m.d.sync += [
                row.eq(row + 1),
                rows_left.eq(rows_left - 1),
                any_left.eq(rows_left != 1),
            ]
            with m.If(set_left == 1):  # the set's last row: the next set's parameters next
                m.d.sync += [
                    set_left.eq(per_set),
                    params_read.eq(0),
                    need_params.eq(1),
                    param_at.eq(param_at + 3),
                    param_addr.eq(param_at + 3),
                ]
            with m.Else():
                m.d.sync += set_left.eq(set_left - 1)
        # the address from flip-flops alone: a parameter row's while the set needs one (only
        # then does read_param fire), else the next data row's; a cycle without a read reads a
        # row no one takes (the 83.2 MHz route had the store stage's state through the read
        # decision into the bank's read address, 11.2 ns)
        m.d.comb += [
            self.acc.addr.eq(Mux(need_params, param_addr, row)),
            self.issued.eq(read_data),
        ]
        residual = cfg.requant_residual
        if residual:  # the data row's residual, read from INP's own port beside it: its row
            # stepped with the data row's (a flip-flop: no adder before the address)
            res_row = Signal.like(self.res_base)
            res_on = Signal()  # whether the transfer adds one
            with m.If(self.start):
                m.d.sync += [res_row.eq(self.res_base), res_on.eq(self.residual)]
            with m.Elif(read_data):
                m.d.sync += res_row.eq(res_row + 1)
            m.d.comb += self.inp.addr.eq(res_row)

        # ---- the reads' data, SRAM_READ_LATENCY cycles later -----------------------------
        kind = Cat(read_param, read_data, params_read)  # what each read was, carried along
        if residual:  # and whether its transfer adds a residual
            kind = Cat(kind, res_on)
        for step in range(SRAM_READ_LATENCY):
            held = Signal.like(kind, name=f"read_kind_{step + 1}")
            m.d.sync += held.eq(kind)
            kind = held
        param_back, data_back, which = kind[0], kind[1], kind[2:4]
        in_pipe_next = in_pipe + read_data - data_back
        m.d.sync += in_pipe.eq(in_pipe_next)
        data = self.acc.data

        # the parameters (read before any row of their set enters the lanes) without a reset,
        # as the lanes' data registers (requant.py)
        def params(shape, name):
            return [Signal(shape, name=f"{name}{c}", reset_less=True) for c in range(cfg.block_out)]

        bias, sig = params(signed(ab), "bias"), params(SIGNIFICAND_BITS, "sig")
        exp, zero = params(signed(EXPONENT_BITS), "exp"), params(signed(ZERO_BITS), "zero")
        lo, hi = params(signed(BOUND_BITS), "lo"), params(signed(BOUND_BITS), "hi")
        with m.If(param_back):
            for c in range(cfg.block_out):  # lane c of the first batch row: channel c's
                word = data[c * ab : (c + 1) * ab]
                with m.Switch(which):
                    with m.Case(0):
                        m.d.sync += bias[c].eq(word)
                    with m.Case(1):
                        m.d.sync += [
                            sig[c].eq(word[:SIGNIFICAND_BITS]),
                            exp[c].eq(word[SIGNIFICAND_BITS : SIGNIFICAND_BITS + EXPONENT_BITS]),
                        ]
                    with m.Case(2):
                        m.d.sync += [
                            zero[c].eq(word[:ZERO_BITS]),
                            lo[c].eq(word[ZERO_BITS : ZERO_BITS + BOUND_BITS]),
                            hi[c].eq(word[ZERO_BITS + BOUND_BITS : ZERO_BITS + 2 * BOUND_BITS]),
                        ]
        # the simulator's refusals, on the lanes the unit takes (channel c's, of the first batch
        # row): a scale's significand without its top bit, a clip whose lo is above its hi.
        # Checked on the registers a cycle after the set's clip row lands, not on the row as it
        # lands (the bank's read data behind its bank select: 12.7 ns on the 78.7 MHz route)
        set_in = Signal()  # a set's scale and clip are in the registers
        m.d.sync += set_in.eq(param_back & (which == 2))
        refused = Cat(*(~sig[c][-1] | (lo[c] > hi[c]) for c in range(cfg.block_out)))
        with m.If(self.start):
            m.d.sync += self.bad_params.eq(0)
        with m.Elif(set_in & refused.any()):
            m.d.sync += self.bad_params.eq(1)
        m.d.comb += [queue.w_stream.payload.eq(data), queue.w_stream.valid.eq(data_back)]
        if residual:  # the residual beside its row (zeros where the transfer adds none)
            m.d.comb += res_queue.w_stream.payload.eq(Mux(kind[4], self.inp.data, 0))
            m.d.comb += res_queue.w_stream.valid.eq(data_back)
        # the rows read and not yet taken by the lanes (on their way and in the queue), counted
        # as one: a row's landing moves it from one to the other, so the count is not on the
        # landing's path (the 73.2 MHz route: the queue's write through its level and the sum
        # with in_pipe into `space`, 11.25 ns). The queue never refuses a landing (`space`).
        # The read decision picks between the count and compare worked out without it (as the
        # store stage's `space`), so no adder lies behind it.
        held = Signal(range(ROW_QUEUE + 1))
        kept = held - (rows.ready & rows.valid)
        m.d.sync += [
            held.eq(Mux(read_data, kept + 1, kept)),
            space.eq(Mux(read_data, kept < ROW_QUEUE - 1, kept < ROW_QUEUE)),
        ]

        # ---- the lanes: a row in `passes` passes of `lanes` ------------------------------
        feed = Signal()
        if passes == 1:  # a row a pass: no pass counter (nor its selects into every lane input,
            # about a thousand LUT inputs on one flip-flop in 1x8x8 with 8 lanes)
            m.d.comb += [feeding.eq(0), feed.eq(rows.valid), rows.ready.eq(feed)]
        else:
            part = Signal(range(passes))
            m.d.comb += feeding.eq(part != 0)
            m.d.comb += feed.eq(rows.valid | feeding)
            with m.If(feed):
                with m.If(part == passes - 1):
                    m.d.comb += rows.ready.eq(1)
                    m.d.sync += part.eq(0)
                with m.Else():
                    m.d.sync += part.eq(part + 1)
        lane_units = []
        for i in range(lanes):
            m.submodules[f"lane{i}"] = lane = RequantLane(self.dsp, bool(residual))
            lane_units.append(lane)
            m.d.comb += lane.valid.eq(feed)
            for p in range(passes):
                k = p * lanes + i  # the row's lane this lane takes in pass p
                c = k % cfg.block_out
                with m.If(part == p) if passes > 1 else nullcontext():
                    m.d.comb += [
                        lane.acc.eq(rows.payload[k * ab : (k + 1) * ab]),
                        lane.bias.eq(bias[c]),
                        lane.significand.eq(sig[c]),
                        lane.exponent.eq(exp[c]),
                        lane.zero.eq(zero[c]),
                        lane.lo.eq(lo[c]),
                        lane.hi.eq(hi[c]),
                    ]
                    if residual:
                        m.d.comb += lane.residual.eq(res_rows.payload[k * rb : (k + 1) * rb])

        # ---- out: the passes' bytes put together, LATENCY cycles later --------------------
        ob = cfg.out_bits
        done = lane_units[0].out_valid
        bytes_ = Cat(*(lane.out[:ob] for lane in lane_units))
        if passes == 1:
            m.d.comb += [self.out_valid.eq(done), self.out.eq(bytes_)]
        else:
            got = Signal(range(passes))
            kept = Signal((passes - 1) * lanes * ob, reset_less=True)  # taken with `got` only
            with m.If(done):
                with m.If(got == passes - 1):
                    m.d.sync += got.eq(0)
                with m.Else():
                    m.d.sync += [got.eq(got + 1), kept.eq(Cat(kept[lanes * ob :], bytes_))]
            m.d.comb += [
                self.out_valid.eq(done & (got == passes - 1)),
                self.out.eq(Cat(kept, bytes_)),
            ]
        return m
