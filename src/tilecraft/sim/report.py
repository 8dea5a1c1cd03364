"""What a simulation run reports: cycles, per-stage figures, GEMM utilization, bytes moved."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class StageStats:
    instructions: int = 0
    busy_cycles: int = 0  # cycles executing instructions
    stall_cycles: int = 0  # cycles ready but waiting on a token (to pop or to push)


@dataclass
class SimReport:
    cycles: int
    clock_mhz: float
    macs_per_cycle: int
    instructions: int
    gemm_uops: int  # accumulating micro-ops (reset micro-ops not counted)
    alu_uops: int
    stages: dict[str, StageStats]
    dram_bytes: dict[str, int]  # read per buffer (insn, uop, inp, wgt, acc) and written (out)
    trace: dict | None = field(default=None, repr=False)

    @property
    def gemm_utilization(self) -> float:
        """Fraction of cycles the GEMM core did a full micro-op."""
        return self.gemm_uops / self.cycles if self.cycles else 0.0

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_mhz * 1e6)

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("trace")
        data["gemm_utilization"] = self.gemm_utilization
        data["seconds"] = self.seconds
        return data

    def format(self) -> str:
        lines = [
            f"cycles            {self.cycles:,} ({self.seconds * 1e3:.3f} ms at "
            f"{self.clock_mhz:g} MHz)",
            f"instructions      {self.instructions:,}",
            f"GEMM micro-ops    {self.gemm_uops:,}  utilization {self.gemm_utilization:.3f}",
            f"ALU micro-ops     {self.alu_uops:,}",
        ]
        for name, st in self.stages.items():
            lines.append(
                f"{name:8s} stage    {st.instructions:6d} insns  busy {st.busy_cycles:,}  "
                f"stalled {st.stall_cycles:,}"
            )
        moved = ", ".join(f"{k} {v:,}" for k, v in self.dram_bytes.items())
        lines.append(f"DRAM bytes        {moved}")
        return "\n".join(lines)
