"""What the cycle model needs to know of each instruction, worked out once from the decoded
table: its stage and compute unit, the token queues it pops and pushes, its cycles without DRAM,
and, for a LOAD or STORE, its AXI bursts as the RTL's burst planner cuts them."""

from __future__ import annotations

import functools
from bisect import bisect_right
from itertools import accumulate

import numpy as np

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import (
    BUFFER_NAMES,
    POP_QUEUES,
    PUSH_QUEUES,
    STAGE_OF,
    MemId,
    Opcode,
    Stage,
    Unit,
    unit_of,
)
from tilecraft.hw.timing import Timing, busy_cycles, dma_shape, pad_split


class Plan:
    """Per-instruction facts the engine needs, computed once from the decoded table."""

    def __init__(self, cfg: HwConfig, timing: Timing, rows: list[dict], stages: np.ndarray):
        self.rows = rows
        self.stage = stages.tolist()
        self.unit: list[Unit | None] = []  # compute-stage instructions' unit (None: barrier)
        self.pops: list[tuple[int, ...]] = []
        self.pushes: list[tuple[int, ...]] = []
        self.busy: list[int] = []  # cycles without DRAM
        self.post: list[int] = []  # cycles after the data (padding written after it)
        self.writes: list[int] = []  # LOAD: cycles from its first data beat to its last write
        self.drain: list[int] = []  # LOAD of narrow elements: cycles its writes take (one each)
        self.box: list[int] = []  # LOAD: cycles from its start to its last write, at the least
        self.bursts: list[list[tuple[int, int]]] = []  # AXI bursts (beats, presentation delay)
        self.lead: list[int] = []  # LOAD/STORE: from its start to its first burst's request
        # a requantizing STORE: its shape as its unit paces it (`requant_shape`); None for the
        # rest. One into INP (`to_inp`) has no bursts: its unit's rows go into INP's write port
        self.unit_shape: list[tuple[int, int, int, int] | None] = []
        self.dram_bytes: list[int] = []
        # an INP LOAD or a STORE into INP: they take turns on INP's write port (sim/engine.py)
        self.inp_writer: list[bool] = []
        for k, row in enumerate(rows):
            s = STAGE_OF[self.stage[k]]
            pops = tuple(q for f, q in POP_QUEUES[s].items() if q is not None and row[f])
            pushes = tuple(q for f, q in PUSH_QUEUES[s].items() if q is not None and row[f])
            self.pops.append(pops)
            self.pushes.append(pushes)
            op = row["opcode"]
            self.inp_writer.append(
                bool(row["to_inp"])
                if op == Opcode.STORE
                else op == Opcode.LOAD and row["mem"] == MemId.INP and row["x_size"] != 0
            )
            self.unit.append(unit_of(op) if s == Stage.COMPUTE else None)
            if row["opcode"] in (Opcode.LOAD, Opcode.STORE):
                runs, _, _, nbytes = dma_shape(cfg, row)
                name = "out" if op == Opcode.STORE else BUFFER_NAMES[row["mem"]]
                eb = cfg.elem_bytes(name)
                to_inp = op == Opcode.STORE and row["to_inp"]  # no DRAM: the unit's rows into INP
                bursts = (
                    []
                    if to_inp
                    else timing.bursts(
                        row["dram_base"] * eb,
                        row["y_size"],
                        row["x_size"] * eb,
                        row["x_stride"] * eb,
                    )
                )
                lat = timing.dram_latency if bursts else 0
                overhead = timing.dma_overhead if bursts else timing.barrier_overhead
                if row["x_size"] and (row["y_size"] or op == Opcode.LOAD):
                    overhead += timing.dma_plan  # STORE skips the plan when y_size is 0 too
                lead = timing.dma_overhead + timing.dma_plan
                self.lead.append(lead)
                requant = op == Opcode.STORE and row["requant"] and (bursts or to_inp and nbytes)
                self.unit_shape.append(requant_shape(cfg, timing, row) if requant else None)
                lead, trail, _ = pad_split(row) if bursts else (0, 0, 0)
                # the loader writes its padded box in order, one element a cycle, each data
                # element once its beats have come: zeros before the data while the DRAM
                # answers, the rest as the data allows (`write_bounds`)
                self.busy.append(overhead + max(lat, lead * timing.pad_ii))
                self.post.append(trail * timing.pad_ii)
                box, tail = (0, 0)
                if op == Opcode.LOAD and bursts:
                    box, tail = _load_write_bounds(
                        timing, eb, *(int(row[f]) for f in _LOAD_BOX), row["dram_base"] * eb % 4096
                    )
                self.box.append(box)
                self.writes.append(tail)
                narrow = eb < timing.axi_bytes and op == Opcode.LOAD
                self.drain.append(row["x_size"] * row["y_size"] if narrow and bursts else 0)
                self.bursts.append(bursts)
                self.dram_bytes.append(0 if to_inp else nbytes)
            else:
                self.busy.append(busy_cycles(timing, row))
                self.post.append(0)
                self.writes.append(0)
                self.drain.append(0)
                self.box.append(0)
                self.lead.append(0)
                self.unit_shape.append(None)
                self.bursts.append([])
                self.dram_bytes.append(0)


def requant_shape(cfg: HwConfig, timing: Timing, row) -> tuple[int, int, int, int]:
    """A requantizing STORE as its unit paces it (sim/requant_pace.py): its elements, rows per
    parameter set (a set per row with `param_per_row`), passes per row through the lanes
    (`requant_lanes` of a row's BATCH x BLOCK_OUT a cycle), beats per element."""
    n = row["x_size"] * row["y_size"]
    passes = -(-cfg.batch * cfg.block_out // cfg.requant_lanes)
    beats = -(-cfg.elem_bytes("out") // timing.axi_bytes)
    return n, row["x_size"] if row["param_per_row"] else n, passes, beats


_LOAD_BOX = ("x_size", "y_size", "x_stride", "x_pad0", "x_pad1", "y_pad0", "y_pad1")


@functools.lru_cache(maxsize=1 << 14)
def _load_write_bounds(timing: Timing, eb: int, *box_and_page: int) -> tuple[int, int]:
    """`write_bounds` of a LOAD by what it depends on: its box (`_LOAD_BOX`) and its DRAM
    address's place in a 4 KiB page (the bursts' cut). A layer's loads repeat a few shapes."""
    row = dict(zip(_LOAD_BOX, box_and_page))
    bursts = timing.bursts(
        box_and_page[-1], row["y_size"], row["x_size"] * eb, row["x_stride"] * eb
    )
    return write_bounds(timing, row, eb, bursts)


def write_bounds(timing: Timing, row, eb: int, bursts: list[tuple[int, int]]) -> tuple[int, int]:
    """A LOAD's last scratchpad write, bounded two ways: from its start, the first write
    (`Timing.first_write`) and then its whole padded box one element a cycle; and from its
    first data beat, each data element's arrival (its beats through the stream of `bursts`,
    `burst_gap` idle cycles between them) and then every element after it in the box. The
    writer goes in order, so its last write is the larger: the latest arrival plus what
    follows it. Per row the larger is at the row's first or last data element (elements of
    a beat or more each get later faster than the box shrinks; narrower ones, slower).
    Elements of several beats in padded rows are followed element by element (`_streamed`):
    the element stream between the data and the writer runs only so far ahead of it."""
    x, y = int(row["x_size"]), int(row["y_size"])
    width = int(row["x_pad0"]) + x + int(row["x_pad1"])
    rows = int(row["y_pad0"]) + y + int(row["y_pad1"])
    box = timing.first_write + width * rows * timing.pad_ii
    firsts = list(accumulate((count for count, _ in bursts[:-1]), initial=0))

    def arrival(beat: int) -> int:  # from the first beat: the beats before it and the gaps
        return beat + (bisect_right(firsts, beat) - 1) * timing.burst_gap

    axi = timing.axi_bytes
    lag = timing.write_lag - (eb < axi)  # a beat of several elements: one goes on at once
    tail = 0
    beats = -(-eb // axi)
    if beats > 1 and y and int(row["x_pad0"]) + int(row["x_pad1"]):
        shape = (x, y, int(row["x_pad0"]), int(row["x_pad1"]), int(row["y_pad1"]))
        tail = _streamed(timing, shape, beats, tuple(firsts), lag)
    for r in range(y):
        for c in {0, x - 1}:
            e = r * x + c
            beat = ((e + 1) * eb - 1) // axi  # the beat its last byte comes in
            after = (x - 1 - c) + int(row["x_pad1"]) + (y - 1 - r) * width
            after += int(row["y_pad1"]) * width
            tail = max(tail, arrival(beat) + lag + after * timing.pad_ii)
    return box, tail


@functools.lru_cache(maxsize=1 << 14)
def _streamed(
    timing: Timing, shape: tuple[int, ...], beats: int, firsts: tuple[int, ...], lag: int
) -> int:
    """The last write, from the first data beat, of a LOAD whose elements take several beats
    and whose rows have padding (`shape`: x_size, y_size, x_pad0, x_pad1, y_pad1; `firsts`: each
    burst's first beat): each element reaches the writer through the element stream, which
    takes a beat a cycle once the beat is in, and holds at most `Timing.stream_ahead` elements
    the writer has not written (hw/rtl/loader.py), so the pads between rows let it run ahead
    only so far. Element by element, in the writer's order; loads of one shape share it."""
    x, y, x_pad0, x_pad1, y_pad1 = shape
    gap = timing.burst_gap
    pad0, pad1 = x_pad0 * timing.pad_ii, x_pad1 * timing.pad_ii
    ahead, late = timing.stream_ahead, lag - 1  # a beat is taken `late` cycles after it comes

    def arrival(beat: int) -> int:
        return beat + (bisect_right(firsts, beat) - 1) * gap + late

    written: list[int] = []  # each data element's write
    free = w = -(1 << 30)  # the stream's next beat, the writer's last write
    for r in range(y):
        if r:
            w += pad0  # the row's leading pads (the first row's are written before its data)
        for c in range(x):
            e = r * x + c
            start = max(free, arrival(e * beats))
            if e >= ahead:
                start = max(start, written[e - ahead] + 1)
            end = max(start + beats - 1, arrival(e * beats + beats - 1))
            free = end + 1
            w = max(w + 1, end + 1)
            written.append(w)
        w += pad1
    return w + y_pad1 * (x_pad0 + x + x_pad1) * timing.pad_ii
