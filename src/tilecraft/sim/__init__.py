"""The behavioral simulator: the ISA's executable spec, bit-exact and cycle-aware."""

from tilecraft.hw.timing import Timing
from tilecraft.sim.report import SimReport, StageStats
from tilecraft.sim.simulator import simulate

__all__ = ["SimReport", "StageStats", "Timing", "simulate"]
