"""The behavioral simulator: the ISA's executable spec, bit-exact and cycle-aware."""

from tilecraft.sim.report import SimReport, StageStats
from tilecraft.sim.simulator import simulate
from tilecraft.sim.timing import Timing

__all__ = ["SimReport", "StageStats", "Timing", "simulate"]
