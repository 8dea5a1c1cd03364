"""The main job (`tilecraft example`): the double-buffered blocked GEMM and the same tiles with
serialized tokens, both run on the simulator and checked bit-exactly against the reference; the
figures say what the overlap gained."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tilecraft.compiler.programs.blocked_gemm import blocked_gemm
from tilecraft.hw.config import HwConfig
from tilecraft.ops import Gemm, GemmTiles
from tilecraft.ops.reference import gemm
from tilecraft.runtime import Program, get_device
from tilecraft.runtime.layout import pack_inputs, unpack_outputs
from tilecraft.sim import SimReport


@dataclass(frozen=True)
class Run:
    program: Program
    report: SimReport
    mismatches: int  # output values that differ from the reference

    @property
    def bit_exact(self) -> bool:
        return self.mismatches == 0

    def to_dict(self) -> dict:
        r = self.report
        return {
            "bit_exact": self.bit_exact,
            "mismatches": self.mismatches,
            "cycles": r.cycles,
            "gemm_utilization": r.gemm_utilization,
            "instructions": r.instructions,
            "report": r.to_dict(),
        }


@dataclass(frozen=True)
class Example:
    config: str
    op: Gemm
    tiles: GemmTiles
    seed: int
    overlap: Run
    serial: Run

    @property
    def speedup(self) -> float:
        return self.serial.report.cycles / self.overlap.report.cycles

    @property
    def ok(self) -> bool:
        return self.overlap.bit_exact and self.serial.bit_exact

    def to_dict(self) -> dict:
        return {
            "config": self.config,
            "M": self.op.m,
            "K": self.op.k,
            "N": self.op.n,
            "tiles": [self.tiles.tm, self.tiles.tn, self.tiles.tk],
            "seed": self.seed,
            "overlap": self.overlap.to_dict(),
            "serial": self.serial.to_dict(),
            "speedup": self.speedup,
        }

    def format(self) -> str:
        op, t = self.op, self.tiles
        lines = [
            f"blocked GEMM {op.m}x{op.k} . {op.k}x{op.n} int8 on {self.config}, "
            f"tiles (blocks) m,n,k = {t.tm},{t.tn},{t.tk}"
        ]
        for label, run in (("overlap", self.overlap), ("serial", self.serial)):
            status = "bit-exact vs numpy" if run.bit_exact else f"{run.mismatches} MISMATCHES"
            lines.append(
                f"  {label:8s} {run.report.cycles:9,} cycles  GEMM utilization "
                f"{run.report.gemm_utilization:.3f}  {run.report.instructions} insns  {status}"
            )
        lines.append(f"  overlap gained {self.speedup:.2f}x over serialized tokens")
        return "\n".join(lines)


def run_example(
    cfg: HwConfig, m: int = 64, k: int = 256, n: int = 128, *, seed: int = 0, trace: bool = False
) -> Example:
    """Build the double-buffered GEMM and the same tiles serialized, run both on the simulator
    (the overlapped one traced if asked) and check them against the reference."""
    overlapped = blocked_gemm(cfg, m, k, n, overlap=True)  # validates the shape first
    serial = blocked_gemm(cfg, m, k, n, tiles=replace(overlapped.schedule, overlap=False))
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    op = overlapped.computation.op
    expected = gemm(op, a, b)
    device = get_device("sim")
    runs = []
    for program in (overlapped, serial):
        result = device.run(
            program, pack_inputs(program, {"a": a, "b": b}), trace=trace and program is overlapped
        )
        got = unpack_outputs(program, result.outputs)["c"]
        runs.append(Run(program, result.report, int(np.count_nonzero(got != expected))))
    return Example(cfg.tag, op, overlapped.schedule, seed, *runs)
