"""What the cycle model needs to know of each instruction, worked out once from the decoded
table: its stage and compute unit, the token queues it pops and pushes, its cycles without DRAM,
and, for a LOAD or STORE, its AXI bursts as the RTL's burst planner cuts them."""

from __future__ import annotations

import numpy as np

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import (
    BUFFER_NAMES,
    POP_QUEUES,
    PUSH_QUEUES,
    STAGE_OF,
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
        self.writes: list[int] = []  # LOAD: scratchpad rows written, one per cycle at most
        self.bursts: list[list[tuple[int, int]]] = []  # AXI bursts (beats, presentation delay)
        self.dram_bytes: list[int] = []
        for k, row in enumerate(rows):
            s = STAGE_OF[self.stage[k]]
            pops = tuple(q for f, q in POP_QUEUES[s].items() if q is not None and row[f])
            pushes = tuple(q for f, q in PUSH_QUEUES[s].items() if q is not None and row[f])
            self.pops.append(pops)
            self.pushes.append(pushes)
            op = row["opcode"]
            self.unit.append(unit_of(op) if s == Stage.COMPUTE else None)
            if row["opcode"] in (Opcode.LOAD, Opcode.STORE):
                runs, _, _, nbytes = dma_shape(cfg, row)
                name = "out" if op == Opcode.STORE else BUFFER_NAMES[row["mem"]]
                eb = cfg.elem_bytes(name)
                bursts = timing.bursts(
                    row["dram_base"] * eb, row["y_size"], row["x_size"] * eb, row["x_stride"] * eb
                )
                lat = timing.dram_latency if bursts else 0
                overhead = timing.dma_overhead if bursts else timing.barrier_overhead
                if row["x_size"] and (row["y_size"] or op == Opcode.LOAD):
                    overhead += timing.dma_plan  # STORE skips the plan when y_size is 0 too
                lead, trail, mid = pad_split(row) if bursts else (0, 0, 0)
                # zeros before the data are written while the DRAM answers; after it, serially;
                # between rows, in the gaps between elements (if an element takes several beats)
                # or, rows being separate bursts, in the DRAM's gap between them
                slow = eb > timing.axi_bytes
                hidden = 0
                if runs > 1 and not slow:
                    between = row["x_pad0"] + row["x_pad1"]
                    hidden = (row["y_size"] - 1) * min(between, timing.burst_gap)
                self.busy.append(overhead + max(lat, lead * timing.pad_ii))
                self.post.append((trail + (0 if slow else mid - hidden)) * timing.pad_ii)
                narrow = eb < timing.axi_bytes and op == Opcode.LOAD
                self.writes.append(row["x_size"] * row["y_size"] if narrow and bursts else 0)
                self.bursts.append(bursts)
                self.dram_bytes.append(nbytes)
            else:
                self.busy.append(busy_cycles(timing, row))
                self.post.append(0)
                self.writes.append(0)
                self.bursts.append([])
                self.dram_bytes.append(0)
