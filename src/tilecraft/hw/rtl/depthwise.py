"""The GEMM unit's depthwise mode (DEPTHWISE, configs with `depthwise_window` K): the window
filled a column at a time, and the array passes of each output.

For each output row, the engine reads the K plane rows of its windows column by column, K reads
of INP a column (no line buffers: docs/DEPTHWISE.md). A column's first K-1 pixels wait in
registers; with its last the window shifts a column. When the window is complete and on the
stride, its output runs through the GEMM core in `passes` passes, one a cycle under the next
column's reads (at most K, so they never hold the reads): each of the channel's tap groups
(BLOCK_IN taps an element, `HwConfig.depthwise_passes`), and with a packed core each half of a
multiplier pair in turn (the other half's weights zeroed). The first pass writes the output's
row (no zeroing), the later ones add to it.

The passes leave the engine as the GEMM pipeline's micro-ops do, at its index stage: a valid
flag, the accumulator row, whether it is the output's first pass and the instruction's last,
and the weight element to read; the window's taps for the pass reach the core `lat` cycles
later (`operands`), as a micro-op's INP data would.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilecraft.errors import ConfigError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Opcode, isa_for
from tilecraft.hw.isa.formats import DW_STRIDES
from tilecraft.hw.rtl.layouts import insn_layout
from tilecraft.hw.rtl.signatures import SRAM_READ_LATENCY


def array_passes(cfg: HwConfig, packed: bool) -> int:
    """The core's passes per output: the tap groups, each once per half of a packed pair."""
    return cfg.depthwise_passes * (2 if packed else 1)


def check_window(cfg: HwConfig, packed: bool) -> None:
    """ConfigError where the mode's array passes an output would not fit under its window's
    reads of a column (on a core that packs its multipliers, or not)."""
    passes, k = array_passes(cfg, packed), cfg.depthwise_window
    if passes > k:
        halves = 2 if packed else 1
        log_bi = next(b for b in range(12) if -(-k * k // (1 << b)) * halves <= k)
        raise ConfigError(
            f"config {cfg.tag}: the depthwise mode's {passes} array passes an output "
            f"(its taps over BLOCK_IN = {cfg.block_in} lanes"
            + (", each half of a packed multiplier pair" if packed else "")
            + f") exceed the window's {k} reads a column; the RTL runs them under the reads: "
            f"give the config log_block_in = log_block_out >= {log_bi}"
            + (
                ", or build for the ECP5, whose multipliers are not packed (`tilecraft hw "
                "timing --flow ecp5`)"
                if packed
                else ""
            )  # fmt: skip
        )


class DepthwiseEngine(wiring.Component):
    def __init__(self, cfg: HwConfig, packed: bool, rows: int):
        self.cfg, self.packed, self.rows = cfg, packed, rows
        self.passes = array_passes(cfg, packed)
        check_window(cfg, packed)
        if tuple(DW_STRIDES) != (1, 2):
            raise ConfigError(f"the engine halves a count for stride 2; strides {DW_STRIDES}")
        spec = isa_for(cfg)
        pixel = cfg.elem_bytes("inp") * 8
        super().__init__(
            {
                "start": In(1),
                "insn": In(insn_layout(spec, Opcode.DEPTHWISE)),
                "stop": In(1),  # the unit failed: read no more
                "inp_addr": Out(spec.inp_idx_bits),
                "inp_data": In(pixel),  # the read's pixel, SRAM_READ_LATENCY cycles later
                "valid": Out(1),  # a pass at the index stage
                "dst": Out(spec.acc_idx_bits),
                "fresh": Out(1),  # the output's first pass: written, not added
                "last": Out(1),  # the instruction's last pass
                "wgt_addr": Out(spec.wgt_idx_bits),
                "half": Out(1),  # the packed pair's lane of the pass at the core's input
                "operands": Out(cfg.batch * rows * cfg.block_in * cfg.inp_bits),
                "bad": Out(1),  # a range error or a bad plane (a pulse; nothing more runs)
                "busy": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        cfg, spec = self.cfg, isa_for(self.cfg)
        k, lat = cfg.depthwise_window, SRAM_READ_LATENCY
        f = Signal.like(self.insn)
        idx = spec.inp_idx_bits + 2  # wide enough that no address sum wraps
        # ---- the plane: latched at start, its counts a cycle later --------------------------
        setup = Signal()
        reading = Signal()
        out_rows_1, last_x, in_cols_1 = (Signal(idx, name=n) for n in ("oy_1", "last_x", "x_1"))
        row_step = Signal(idx)
        m.d.sync += setup.eq(self.start)
        with m.If(self.start):
            m.d.sync += f.eq(self.insn)
        rows, cols = f.in_rows, f.in_cols
        sy2, sx2 = f.stride_y == 2, f.stride_x == 2
        # the plane's checks on the instruction as it arrives, into a flip-flop that setup
        # reads (the 1x8x8 routes at seeds 1 and 2 had the latched fields' compares through
        # the unit's error into the compute stage's error report, 10.5-10.8 ns)
        new = self.insn
        good = (new.in_rows >= k) & (new.in_cols >= k)
        good &= (new.stride_y == 1) | (new.stride_y == 2)
        good &= (new.stride_x == 1) | (new.stride_x == 2)
        wgt_over = new.wgt_base + cfg.depthwise_passes > cfg.depth("wgt")
        plane_bad = Signal()
        with m.If(self.start):
            m.d.sync += plane_bad.eq(~good | wgt_over)
        span_x = cols - k  # the window's steps along a row, and down the plane
        odd_x = sx2 & span_x[0]  # the last column is not on the stride
        bad_plane = Signal()
        m.d.comb += bad_plane.eq(setup & plane_bad)
        oy, x, ky = Signal(idx), Signal(idx), Signal(range(k))
        row_addr, col_addr, rd = Signal(idx), Signal(idx), Signal(idx)
        # the compares of oy and x with the plane's ends, as flags worked out with each step
        # (the 1x8x8 route at seed 1 had `oy == out_rows_1` into the sequencer's next state)
        oy_end, x_end, x_out_end = Signal(), Signal(), Signal()  # oy == out_rows_1, x == ...
        rows_1_now = Mux(sy2, (rows - k) >> 1, rows - k)
        with m.If(setup):
            m.d.sync += [
                out_rows_1.eq(rows_1_now),
                in_cols_1.eq(cols - 1),
                last_x.eq(cols - 1 - odd_x),
                oy_end.eq(rows_1_now == 0),
                x_end.eq(cols == 1),
                x_out_end.eq(cols - 1 - odd_x == 0),
                row_step.eq(Mux(sy2, cols << 1, cols)),
                oy.eq(0),
                x.eq(0),
                ky.eq(0),
                row_addr.eq(f.inp_base),
                col_addr.eq(f.inp_base),
                rd.eq(f.inp_base),
                reading.eq(~bad_plane),
            ]
        # ---- the reads: K a column, the columns of a row, the output rows --------------------
        inp_over = reading & (rd >= cfg.depth("inp"))
        on_stride = ~sx2 | ~x[0]  # K is odd: (x - K + 1) is even when x is
        emit = Signal()
        last_out = Signal()
        m.d.comb += [
            self.inp_addr.eq(rd[: len(self.inp_addr)]),
            emit.eq(reading & ~inp_over & ~self.stop & (ky == k - 1) & (x >= k - 1) & on_stride),
            last_out.eq(oy_end & x_out_end),
        ]
        with m.If(reading & (inp_over | self.stop)):
            m.d.sync += reading.eq(0)
        with m.Elif(reading):
            with m.If(ky != k - 1):
                m.d.sync += [ky.eq(ky + 1), rd.eq(rd + cols)]
            with m.Elif(~x_end):
                m.d.sync += [ky.eq(0), x.eq(x + 1), col_addr.eq(col_addr + 1), rd.eq(col_addr + 1)]
                m.d.sync += [x_end.eq(x + 1 == in_cols_1), x_out_end.eq(x + 1 == last_x)]
            with m.Elif(~oy_end):
                nxt = row_addr + row_step
                m.d.sync += [ky.eq(0), x.eq(0), oy.eq(oy + 1)]
                m.d.sync += [row_addr.eq(nxt), col_addr.eq(nxt), rd.eq(nxt)]
                m.d.sync += [
                    oy_end.eq(oy + 1 == out_rows_1),
                    x_end.eq(in_cols_1 == 0),
                    x_out_end.eq(last_x == 0),
                ]
            with m.Else():
                m.d.sync += reading.eq(0)
        # ---- the passes of each output, at the index stage from the cycle after its read ----
        passes, halves = self.passes, 2 if self.packed else 1
        j = Signal(range(max(passes, 2)))
        out_addr = Signal(idx)  # the next output's accumulator row
        out_last = Signal()
        dst_over = Signal()
        with m.If(setup):
            m.d.sync += out_addr.eq(f.acc_base)
        # the pass's weight element in a register, stepped with j (the route at seed 4 had j
        # through the sum wgt_base + group into the weight memory's address, 10.95 ns)
        wgt_at = Signal.like(self.wgt_addr)
        with m.If(emit):
            m.d.sync += [
                self.valid.eq(1),
                j.eq(0),
                wgt_at.eq(f.wgt_base),
                self.dst.eq(out_addr[: len(self.dst)]),
                dst_over.eq(out_addr >= cfg.depth("acc")),
                out_addr.eq(out_addr + 1),
                out_last.eq(last_out),
            ]
        with m.Elif(self.valid & (j != passes - 1) & ~self.stop):
            m.d.sync += [j.eq(j + 1), wgt_at.eq(wgt_at + (j[0] if halves > 1 else 1))]
        with m.Else():
            m.d.sync += self.valid.eq(0)
        m.d.comb += [
            self.fresh.eq(j == 0),
            self.last.eq(out_last & (j == passes - 1)),
            self.wgt_addr.eq(wgt_at),
        ]
        m.d.comb += self.bad.eq(bad_plane | (inp_over & ~self.stop) | (self.valid & dst_over))
        m.d.comb += self.busy.eq(setup | reading | self.valid)
        # ---- the window: each read's pixel into its column, a column into the window --------
        tags = [(reading & ~inp_over, ky)]
        for n in range(lat):
            held = (Signal(name=f"rv{n}"), Signal(range(k), name=f"rky{n}"))
            m.d.sync += [held[0].eq(tags[-1][0]), held[1].eq(tags[-1][1])]
            tags.append(held)
        arrived, arrived_ky = tags[lat]
        pixel = len(self.inp_data)
        column = [Signal(pixel, name=f"col{r}", reset_less=True) for r in range(k - 1)]
        window = [  # window[kx][ky]: column kx (0 the oldest), row ky
            [Signal(pixel, name=f"win{c}_{r}", reset_less=True) for r in range(k)] for c in range(k)
        ]
        with m.If(arrived):
            for r in range(k - 1):
                with m.If(arrived_ky == r):
                    m.d.sync += column[r].eq(self.inp_data)
            with m.If(arrived_ky == k - 1):
                for c in range(k - 1):
                    m.d.sync += [window[c][r].eq(window[c + 1][r]) for r in range(k)]
                newest = [*column, self.inp_data]
                m.d.sync += [window[k - 1][r].eq(newest[r]) for r in range(k)]
        # the pass at the core's input: its tap group and half, lat cycles after the index stage
        core_j = j
        for n in range(lat):
            held = Signal.like(j, name=f"cj{n}")
            m.d.sync += held.eq(core_j)
            core_j = held
        core_group = core_j // halves if halves > 1 else core_j
        core_half = core_j % halves if halves > 1 else Const(0)
        m.d.comb += self.half.eq(core_half)
        b, bi, ib = cfg.batch, cfg.block_in, cfg.inp_bits
        lanes = []
        for r in range(b):
            for row in range(self.rows):
                for i in range(bi):
                    choices = []  # per tap group, per half: the lane's tap or zero
                    for g in range(cfg.depthwise_passes):
                        t = g * bi + i
                        for h in range(halves):
                            channel = row * halves + h
                            if t >= k * k:
                                choices.append(Const(0, ib))
                                continue
                            src = window[t % k][t // k]
                            lane = (r * bi + channel) * ib
                            choices.append(src[lane : lane + ib])
                    pick = core_group * halves + core_half if len(choices) > 1 else 0
                    lanes.append(_select(choices, pick) if len(choices) > 1 else choices[0])
        m.d.comb += self.operands.eq(Cat(*lanes))
        return m


def _select(choices: list, index) -> Signal:
    """choices[index] (a mux over a few values)."""
    out = choices[-1]
    for n in range(len(choices) - 2, -1, -1):
        out = Mux(index == n, choices[n], out)
    return out
