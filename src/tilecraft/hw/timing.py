"""The cycle model's parameters and per-instruction costs, all in one place.

The DRAM-facing numbers (clock, AXI width, latency, burst length) come from HwConfig; the
micro-architectural ones (pipeline depths, initiation intervals, per-instruction overhead) are
here, calibrated against the RTL. A DMA costs latency + data beats + a gap per burst, and its
data beats hold the one shared DRAM port (fetch, load, compute and store all use it; see
sim/dram_port.py for the order bursts take it in).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from tilecraft.hw.config import ALU_MUL_LANES, HwConfig
from tilecraft.hw.isa import BUFFER_NAMES, AluOp, Opcode, insns_per_burst


@dataclass(frozen=True)
class Timing:
    axi_bytes: int
    dram_latency: int
    burst_len: int
    # Calibrated against the RTL (hw/, under cocotb + Verilator; see tests/sim/test_rtl.py):
    insn_overhead: int = 4  # decode and issue of a GEMM/ALU instruction (its first micro-op
    # read, SRAM_READ_LATENCY; the unit starts a cycle after the issue decision)
    barrier_overhead: int = 3  # LOAD/FINISH on the compute stage that moves no data
    dma_overhead: int = 7  # LOAD/STORE: decode, range checks, burst planning before the address
    dma_plan: int = 2  # LOAD/STORE that move elements: the registered plan before the checks
    # (the multiplies, then the sums: pipelined for the clock, see hw/rtl/loader.py)
    gemm_ii: int = 1  # cycles per GEMM micro-op
    gemm_depth: int = 10  # GEMM pipeline drain: micro-op (3), indices, SRAM (3), operands,
    # products, the adder trees (2), accumulate (hw/rtl/units.py: every SRAM read is registered)
    reset_depth: int = 3  # a reset writes zeros from registers after its indices' range check
    alu_ii_imm: int = 1  # cycles per ALU micro-op with an immediate (one acc read)
    alu_ii_tensor: int = 2  # with a tensor operand (two acc reads on one port; one where the
    # src is the micro-op before's, see alu_repeats)
    alu_depth: int = 8  # micro-op (3), indices, read (3), lane ops, pick, write (overlapping)
    alu_hazard: int = 1  # a micro-op of one phase (immediate, or a repeated src) that reads
    # the row the micro-op before writes waits for that write (see alu_hazards)
    alu_mul_groups: int = 1  # MUL: lane groups the shared multipliers take in turn
    alu_mul_tail: int = 3  # MUL: from the last lane group's pick to its products
    burst_gap: int = 1  # idle data-bus cycles between DRAM bursts
    dram_queue: int = 32  # bursts the DRAM holds accepted and not yet served (axi_dram.v's
    # QUEUE): past them an address waits for a burst's last beat, and a waiting read wins
    read_buffer: int = 32  # beats a read client holds ahead of a consumer slower than the
    # data bus (its FIFO, hw/rtl/dma.py ReadClient): past them, R waits for the consumer
    read_grant: int = 1  # a read transfer's first burst waits for the arbiter's registered
    # pick (a cycle), which is free again the cycle after the previous transfer's last burst
    row_delay: int = 1  # a new row's first burst follows the last one's acceptance (the burst
    # planner works out each row a cycle ahead, see hw/rtl/dma.py)
    pad_ii: int = 1  # cycles per zero-padding element written
    write_lag: int = 3  # from a data beat's arrival (the model's) to the LOAD's write of it
    stream_ahead: int = 2  # elements of several beats the loader's element stream holds
    # ready for its writer (its register and the ReadyBuffer after it, hw/rtl/loader.py)
    first_write: int = 5  # from a LOAD's start to its first scratchpad write (the loader writes
    # its padded box one element a cycle from then: however early the data comes, it waits)
    dispatch_ii: int = 1  # cycles for fetch to route one instruction
    queue_latency: int = 2  # a routed instruction reaches its stage (block-RAM command queue)
    queue_extra: int = 2  # commands a stage's queue holds beyond cmd_queue_depth: the register
    # and the ready buffer behind the block RAM (hw/rtl/top.py)
    queue_free: int = 3  # from a stage taking a command to fetch seeing a full queue's room
    store_tail: int = 0  # STORE completes with its last write response
    # A requantizing STORE (hw/rtl/requant_store.py) asks for its bank as it starts and is
    # granted it `hold_grant` cycles later, or once the GEMM/ALU instructions running in the
    # bank end; its unit reads from the later of the grant (`unit_release` after such an end)
    # and `requant_start` (the plan and the checks),
    # at the pace sim/requant_pace.py works out: `requant_set_gap` cycles more where a parameter
    # set starts (the rows before drain into the lanes, then its three rows are read: measured
    # on the RTL's stream, tests/hw/rtl/test_requant_store.py), a row out `requant_latency`
    # cycles after its last pass enters the lanes, at most `requant_ahead` rows read and not
    # yet written (the store's element FIFO, hw/rtl/stages.py REQUANT_AHEAD)
    hold_grant: int = 1
    requant_start: int = 5
    requant_set_gap: int = 7
    requant_latency: int = 19
    requant_ahead: int = 26
    hold_release: int = 1  # from a requantizing STORE's end to a GEMM/ALU instruction issuing
    # into the bank it held (its request falls, then the grant: hw/rtl/compute.py). Measured:
    # 0 put 25 and 23 of 36 programs exact against the RTL (1x8x8 and default, 8 lanes), 1
    # puts 33 and 29, 2 puts 21 and 21
    unit_release: int = 2  # from the end of the GEMM/ALU instruction a requantizing STORE's
    # grant waited for (one in the bank it asked for) to its unit's first read. Measured on
    # 310 random and pace programs of six configs with the unit against the RTL's recorded
    # cycles: 0 and 1 put 296 exact, 2 all 310, 3 puts 295
    token_latency: int = 1  # from an instruction's completion to its token being poppable
    issue_ii: int = 6  # compute-stage cycles between issuing two GEMM/ALU instructions
    barrier_issue: int = 2  # from issuing a GEMM/ALU to a LOAD/FINISH (once the units are idle)
    unit_handoff: int = 3  # a unit's next instruction reads its first micro-op once it is idle
    push_hold: int = 1  # an instruction that pushes a token frees its unit or stage a cycle late
    barrier_restart: int = 1  # from a compute-stage LOAD's completion to the next LOAD's start
    fetch_streams: bool = True  # dispatch an instruction as soon as its own beats arrive
    fetch_start: int = 1  # from START to fetch's first request (it checks the program's range)
    fetch_request: int = 6  # from a request (the cycle after the previous burst's last dispatch)
    # to the burst's address: fetch enters its REQUEST state, the burst planner takes 4 cycles,
    # the skid buffer on AR one more
    dual_issue: bool = True  # GEMM and ALU units overlap across accumulator halves
    # The GEMM core's depthwise mode (configs with `depthwise_window` K, hw/rtl/depthwise.py):
    # its window fills a column at a time, K reads of INP a column of the plane (no line
    # buffers: docs/DEPTHWISE.md); an output's array passes (`dw_passes`: its tap groups, each
    # once per half of a packed multiplier pair) run under the next column's reads. After the
    # last read: its passes, then `dw_depth` (the window, the core and the write, as a GEMM
    # micro-op's from its INP read on). Measured on the GEMM unit under Amaranth's simulator.
    dw_window: int = 0
    dw_passes: int = 1
    dw_depth: int = 7

    @classmethod
    def from_config(cls, cfg: HwConfig, **overrides) -> Timing:
        lanes = cfg.batch * cfg.block_out
        overrides.setdefault("alu_mul_groups", lanes // min(ALU_MUL_LANES, lanes))
        if cfg.depthwise_window:
            packed = 2 if cfg.packs_multipliers else 1
            overrides.setdefault("dw_window", cfg.depthwise_window)
            overrides.setdefault("dw_passes", cfg.depthwise_passes * packed)
        return cls(
            axi_bytes=cfg.axi_bytes,
            dram_latency=cfg.dram_latency,
            burst_len=cfg.burst_len,
            **overrides,
        )

    @property
    def burst_bytes(self) -> int:
        return self.burst_len * self.axi_bytes

    def transfer(self, runs: int, run_bytes: int) -> int:
        """Bus cycles to move `runs` contiguous runs of `run_bytes` each (beats plus gaps)."""
        if runs == 0 or run_bytes == 0:
            return 0
        beats = -(-run_bytes // self.axi_bytes)
        bursts = -(-beats // self.burst_len)
        return runs * (beats + bursts * self.burst_gap)

    def fetch_chunk(self) -> int:
        """Instructions fetch reads per burst."""
        return insns_per_burst(self.burst_bytes)

    def bursts(self, addr: int, rows: int, row_bytes: int, stride: int) -> list[tuple[int, int]]:
        """The AXI bursts of a 2-D transfer, cut as the RTL's burst planner cuts them: rows back
        to back are one run, a run is split at `burst_len` beats and at 4 KiB boundaries (`addr`
        is relative to the DRAM region, whose base is 4 KiB aligned). Each burst is (beats,
        cycles from the previous burst's acceptance to this one being presented): 1 within a
        run, `row_delay` at the start of a new run."""
        if rows == 0 or row_bytes == 0:
            return []
        if stride == row_bytes:
            rows, row_bytes = 1, rows * row_bytes
        # the cut depends on the address only through its place in a 4 KiB page
        return _cut(
            addr % 4096, rows, row_bytes, stride, self.axi_bytes, self.burst_len, self.row_delay
        )


@functools.lru_cache(maxsize=1 << 16)
def _cut(
    addr: int,
    rows: int,
    row_bytes: int,
    stride: int,
    axi_bytes: int,
    burst_len: int,
    row_delay: int,
) -> list[tuple[int, int]]:
    """`Timing.bursts` for an address within the first page (shared: callers only read it)."""
    page = 4096 // axi_bytes
    out = []
    for r in range(rows):
        start = addr + r * stride
        cur, end = start // axi_bytes, -(-(start + row_bytes) // axi_bytes)
        delay = row_delay
        while cur < end:
            beats = min(end - cur, burst_len, page - cur % page)
            out.append((beats, delay))
            cur += beats
            delay = 1
    return out


def dma_shape(cfg: HwConfig, row) -> tuple[int, int, int, int]:
    """(runs, run_bytes, pad_elements, bytes) of a LOAD or STORE row of the instruction table."""
    op = row["opcode"]
    name = "out" if op == Opcode.STORE else BUFFER_NAMES[row["mem"]]
    eb = cfg.elem_bytes(name)
    x, y, stride = row["x_size"], row["y_size"], row["x_stride"]
    if x == 0 or y == 0:
        pads = 0
        if x and op == Opcode.LOAD:
            width = row["x_pad0"] + x + row["x_pad1"]
            pads = width * (row["y_pad0"] + row["y_pad1"])
        return 0, 0, pads, 0
    nbytes = x * y * eb
    runs, run_bytes = (1, nbytes) if stride == x else (y, x * eb)
    pads = 0
    if op == Opcode.LOAD:
        width = row["x_pad0"] + x + row["x_pad1"]
        pads = width * (row["y_pad0"] + y + row["y_pad1"]) - x * y
    return runs, run_bytes, pads, nbytes


def pad_split(row) -> tuple[int, int, int]:
    """A LOAD's zero elements written before its first data element, after its last one, and
    in between (row-major over the padded box)."""
    x, y = row["x_size"], row["y_size"]
    if x == 0:
        return 0, 0, 0
    width = row["x_pad0"] + x + row["x_pad1"]
    lead = row["y_pad0"] * width + row["x_pad0"]
    trail = row["x_pad1"] + row["y_pad1"] * width
    total = width * (row["y_pad0"] + y + row["y_pad1"]) - x * y
    return lead, trail, total - lead - trail


def busy_cycles(t: Timing, row) -> int:
    """Cycles a GEMM/ALU/FINISH instruction keeps the compute stage (no DRAM involved)."""
    op = row["opcode"]
    if op == Opcode.FINISH:
        return t.barrier_overhead
    if op == Opcode.DEPTHWISE:
        steps = depthwise_steps(t.dw_window, t.dw_passes, row)
        return t.insn_overhead + steps + t.dw_passes + t.dw_depth
    steps = row["iter_out"] * row["iter_in"] * max(row["uop_end"] - row["uop_bgn"], 0)
    if op == Opcode.GEMM:
        depth = t.reset_depth if row["reset"] else t.gemm_depth
        return t.insn_overhead + steps * t.gemm_ii + depth
    ii = t.alu_ii_imm if row["use_imm"] else t.alu_ii_tensor
    if row["alu_op"] == AluOp.MUL:  # then one cycle per lane group, the multiplier's tail
        ii += t.alu_mul_groups + t.alu_mul_tail
    saved = 0 if row["use_imm"] else alu_repeats(row) * (t.alu_ii_tensor - t.alu_ii_imm)
    return t.insn_overhead + steps * ii - saved + t.alu_depth


def depthwise_outputs(window: int, row) -> tuple[int, int]:
    """The output rows and columns of a DEPTHWISE over its plane (0 where the plane is smaller
    than the window)."""
    rows = max((row["in_rows"] - window) // max(row["stride_y"], 1) + 1, 0)
    cols = max((row["in_cols"] - window) // max(row["stride_x"], 1) + 1, 0)
    return rows, cols


def depthwise_steps(window: int, passes: int, row) -> int:
    """A DEPTHWISE's cycles on the GEMM core: for each output row, `window` reads of INP for
    every column of the plane (the window's rows of that column), up to the last output's
    column (at stride 2 the plane's last column is past it where the window's steps along a
    row are odd: its reads are not waited for); each output's array passes beyond `window`
    hold the reads."""
    rows, cols = depthwise_outputs(window, row)
    if rows == 0 or cols == 0:
        return 0
    in_cols = row["in_cols"]
    past_last = int(row["stride_x"] == 2 and (in_cols - window) % 2 == 1)
    return rows * window * in_cols - window * past_last + max(passes - window, 0) * rows * cols


def alu_hazards(row, uop_dst: np.ndarray, uop_src: np.ndarray) -> int:
    """An ALU instruction's micro-ops that wait `Timing.alu_hazard` cycles: those of one phase
    (not MUL; an immediate op, or a tensor op whose src repeats, see alu_repeats) that read the
    row the micro-op before them writes: their dst, or the src they repeat (hw/rtl/units.py
    AluUnit's `hazard`). `uop_dst`/`uop_src` are the micro-op memory's columns."""
    n_out, n_in = int(row["iter_out"]), int(row["iter_in"])
    bgn, end = int(row["uop_bgn"]), int(row["uop_end"])
    n_u = end - bgn
    tensor = not row["use_imm"]
    if row["alu_op"] == AluOp.MUL or n_out * n_in * n_u < 2:
        return 0
    if tensor and (n_u != 1 or row["src_in"] != 0):
        return 0  # every micro-op reads its src: two phases, its X two cycles after
    i = np.arange(n_out, dtype=np.int64)[:, None, None]
    j = np.arange(n_in, dtype=np.int64)[None, :, None]
    u = np.arange(bgn, end)
    dst = (uop_dst[u] + i * int(row["dst_out"]) + j * int(row["dst_in"])).ravel()
    same = dst[1:] == dst[:-1]
    if not tensor:
        return int(np.count_nonzero(same))
    src = (uop_src[u] + i * int(row["src_out"]) + j * int(row["src_in"])).ravel()
    repeats = np.ones((n_out, n_in), bool)  # one micro-op, no inner src stride
    repeats[:, 0] = row["src_out"] == 0
    repeats = repeats.ravel()[1:]
    return int(np.count_nonzero(repeats & (same | (src[1:] == dst[:-1]))))


def alu_repeats(row) -> int:
    """An ALU instruction's micro-ops whose src index is the one before's: with one micro-op,
    every step of the inner loop when its src stride is 0, and the outer loop's steps too when
    both src strides are 0 (hw/rtl/loop.py `LoopSequencer.src_repeats`). A tensor op does not
    read that src again: the unit's copy of the row is current."""
    n_out, n_in = row["iter_out"], row["iter_in"]
    if row["uop_end"] - row["uop_bgn"] != 1 or row["src_in"] != 0 or n_out * n_in == 0:
        return 0
    return n_out * (n_in - 1) + (n_out - 1 if row["src_out"] == 0 else 0)
