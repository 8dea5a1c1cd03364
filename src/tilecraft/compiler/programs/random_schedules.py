"""Seeded random layers with random legal schedules, for the differential tests of the cycle
model against the RTL across the schedule space: odd channel counts, non-square maps,
kernels 1-7, strides 1-3, padding, every epilogue option, and a schedule drawn from
`operator.schedule.space` (both loop orders, single and double buffering, 2 and 4 accumulator
slots, ragged last tiles). Each program is verified and compiled with exactly the schedule
drawn, so a cycle difference between two devices is the model's or the RTL's."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft.compiler.mapping.blocks import map_conv2d, map_dense
from tilecraft.compiler.operator.params import random_params
from tilecraft.compiler.operator.pipeline import compile_operator
from tilecraft.compiler.operator.schedule import instruction_bound, space
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.ops import Conv2d, ConvSchedule, Dense, Epilogue, Multiplier
from tilecraft.runtime.layout import pack_inputs, random_inputs
from tilecraft.runtime.program import Program

MAX_INSNS = 4_000  # a drawn schedule's program at most this long (an RTL run stays short)
MAX_DRAM = 1 << 20  # and its DRAM within the RTL bench's model, with room to spare


@dataclass(frozen=True)
class Drawn:
    """A drawn layer, its schedule and the program compiled with it, with random inputs."""

    seed: int
    op: Conv2d | Dense
    epilogue: Epilogue
    schedule: ConvSchedule
    program: Program
    inputs: dict

    def describe(self) -> str:
        return (f"seed {self.seed}: {self.op.describe()}, {self.epilogue.describe()}, "
                f"{self.schedule.describe()}")  # fmt: skip


def _epilogue(rng: np.random.Generator, residual_ok: bool = True) -> Epilogue:
    multiplier = [Multiplier.NONE, Multiplier.TENSOR, Multiplier.CHANNEL][rng.integers(3)]
    acc_bounds = multiplier is Multiplier.CHANNEL and bool(rng.integers(2))
    pre_shift = int(rng.integers(1, 8)) if acc_bounds and rng.integers(2) else 0
    residual = residual_ok and bool(rng.integers(2))
    return Epilogue(
        bias=bool(rng.integers(2)),
        multiplier=multiplier,
        shift=int(rng.integers(0, 16)),
        residual=residual,
        relu=bool(rng.integers(2)) and (residual or not acc_bounds),  # else the bounds clip
        acc_bounds=acc_bounds,
        pre_shift=pre_shift,
        offset=int(rng.integers(-20, 21)) if rng.integers(4) == 0 else 0,
    )


def _operator(rng: np.random.Generator) -> Conv2d | Dense:
    if rng.integers(6) == 0:
        return Dense(int(rng.integers(1, 20)), int(rng.integers(1, 70)), int(rng.integers(1, 70)))
    kh, kw = int(rng.integers(1, 8)), int(rng.integers(1, 8))
    sh, sw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    ph, pw = int(rng.integers(0, (kh + 1) // 2 + 1)), int(rng.integers(0, (kw + 1) // 2 + 1))
    h = int(rng.integers(max(1, kh - 2 * ph), 15))
    w = int(rng.integers(max(1, kw - 2 * pw), 15))
    ic, oc = int(rng.integers(1, 50)), int(rng.integers(1, 50))
    return Conv2d(1, ic, h, w, oc, kernel=(kh, kw), stride=(sh, sw), pad=(ph, pw))


def draw(cfg: HwConfig, seed: int) -> Drawn:
    """A verified program of a random layer under a random legal schedule (a few draws per
    seed until one fits the bounds above)."""
    for attempt in range(200):
        rng = np.random.default_rng([seed, attempt])
        op = _operator(rng)
        ep = _epilogue(rng)
        try:
            low = map_dense(cfg, op, ep) if isinstance(op, Dense) else map_conv2d(cfg, op, ep)
        except ScheduleError:
            continue
        schedules = list(space(cfg, low))
        if not schedules:
            continue
        s = schedules[int(rng.integers(len(schedules)))]
        if instruction_bound(cfg, low, s) > MAX_INSNS:
            continue
        params = random_params(op, ep, rng)
        fold = low.folded if isinstance(op, Conv2d) else None
        try:
            program = compile_operator(cfg, op, ep, schedule=s, fold=fold, **params).program
        except ScheduleError:
            continue  # e.g. more micro-op kernels than fit, which the space does not see
        if program.dram_size > MAX_DRAM:
            continue
        inputs = pack_inputs(program, random_inputs(program, rng))
        return Drawn(seed, op, ep, s, program, inputs)
    raise AssertionError(f"no layer and schedule drawn for seed {seed} within the bounds")
