"""Catches two stages touching the same scratchpad rows at overlapping times.

A correct program orders every cross-stage use of a scratchpad with tokens. When one is missing
the hardware races, and the simulator would otherwise just pick an order silently: instead it
raises `HazardError` naming both instructions. Tracked: INP/WGT (written by load, read by
compute; INP also written by a STORE into INP and read by a STORE's residual add) and ACC
(written by compute, read by store as OUT). Two writers of INP never overlap in time (they
take turns on its write port, see sim/engine.py); which goes first is the verifier's `waw`
rule's to check.
"""

from __future__ import annotations

import numpy as np

from tilecraft.errors import HazardError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import Stage
from tilecraft.sim.semantics import Footprint

_WRITER = {"inp": (Stage.LOAD, Stage.STORE), "wgt": (Stage.LOAD,), "acc": (Stage.COMPUTE,)}
_READER = {  # INP also read by a STORE's residual add (`requant_residual`)
    "inp": (Stage.COMPUTE, Stage.STORE),
    "wgt": (Stage.COMPUTE,),
    "acc": (Stage.STORE,),
}


class RaceChecker:
    def __init__(self, cfg: HwConfig, describe):
        self.describe = describe  # instruction index -> text
        self.write_end = {b: np.full(cfg.depth(b), -1, np.int64) for b in _WRITER}
        self.writer = {b: np.full(cfg.depth(b), -1, np.int64) for b in _WRITER}
        self.read_end = {b: np.full(cfg.depth(b), -1, np.int64) for b in _WRITER}
        self.reader = {b: np.full(cfg.depth(b), -1, np.int64) for b in _WRITER}

    def check(self, k: int, stage: Stage, start: int, end: int, fp: Footprint) -> None:
        for buf, rows in fp.reads.items():
            if stage in _READER.get(buf, ()):
                idx = _index(rows)
                self._conflict(k, start, buf, idx, self.write_end, self.writer, "being written")
                self.read_end[buf][idx] = np.maximum(self.read_end[buf][idx], end)
                self.reader[buf][idx] = k
        for buf, rows in fp.writes.items():
            if stage in _WRITER.get(buf, ()):
                idx = _index(rows)
                self._conflict(k, start, buf, idx, self.read_end, self.reader, "being read")
                self.write_end[buf][idx] = end
                self.writer[buf][idx] = k

    def _conflict(self, k, start, buf, idx, ends, owners, what) -> None:
        live = ends[buf][idx] > start
        if np.any(live):
            pos = int(np.argmax(live))
            row = int(np.arange(ends[buf].size)[idx][pos])
            other = int(owners[buf][row])
            raise HazardError(
                f"touches {buf} row {row} at cycle {start} while instruction {other} "
                f"({self.describe(other)}) has it {what} until cycle {int(ends[buf][row])}: "
                f"a dependence token is missing between them",
                index=k,
                insn=self.describe(k),
            )


def _index(rows):
    return slice(*rows) if isinstance(rows, tuple) else rows
