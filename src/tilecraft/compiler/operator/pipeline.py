"""The compile pipeline, run one way: operator -> mapping -> schedule candidates -> lowering ->
token insertion -> assembly -> (measurement, when there are several) -> verification ->
`Program`. Each step is a function of the previous step's result and runs once per candidate;
`Compilation.seconds` says what each step cost. This is what the CLI, the benchmarks, the tuner
and the graph compiler call.

Candidates are measured with a `Timer` the caller passes (a program's cycles), by default the
cycle model of the runtime's `sim` device (`runtime.device.cycle_model`): the compiler imports
no simulator.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from types import MappingProxyType

from tilecraft.compiler.analysis.tokens import insert_tokens
from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.mapping.blocks import MappedConv, map_conv2d, map_dense, map_depthwise
from tilecraft.compiler.operator import schedule as S
from tilecraft.compiler.operator.builder import MAX_INSNS
from tilecraft.compiler.operator.heuristic import Ranked, rank
from tilecraft.compiler.operator.lowering import lower_conv
from tilecraft.compiler.operator.params import check_params
from tilecraft.compiler.operator.pool_epilogue import accumulator_range, check_monotone
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig, require_config
from tilecraft.ops import (
    Computation,
    Conv2d,
    ConvSchedule,
    Dense,
    DepthwiseConv2d,
    Epilogue,
    MaxPool2d,
)
from tilecraft.runtime.device import Timer, cycle_model
from tilecraft.runtime.program import MAX_DRAM_BYTES, Program

# The heuristic's ranking sends its best candidates (of distinct tilings) to the cycle model,
# at most MEASURED of them, and no more once the programs built total MEASURE_BUDGET
# instructions (each costs ~80 us an instruction to build and time): a small layer, where the
# estimate errs most (ResNet-18's 1x1 stride-2 layers: its 4th best measured 3.5% faster than
# its 2nd), gets the most; a large one, its best alone, or when its epilogue adds a residual its
# best of each of two reduction-step counts (MEASURE_AT_LEAST_RESIDUAL, whatever their size,
# `_spread_steps`): the estimate leaves out that the
# compute stage issues in order behind the residual's GEMM and the passes after it (the digits
# CNN's conv3 on a batch of 360, 1 x 5,000 instructions: 228 K and 231 K estimated, 315 K and
# 271 K measured). With the estimate counting the loads the slot caches save and the stalls
# where a resident operand changes, 1,000 instructions lose 0.02% of ResNet-18's cycles and
# 0.11% of MobileNetV2's against 2,000, and compile 13% sooner.
MEASURED = 6
MEASURE_BUDGET = 1_000
MEASURE_AT_LEAST_RESIDUAL = 2


@dataclass(frozen=True)
class Candidate:
    schedule: ConvSchedule
    estimate: float | None  # the heuristic's estimate (None: the user's schedule)
    cycles: int | None  # the cycle model's count (None: the only candidate, not measured)


@dataclass(frozen=True)
class Compilation:
    program: Program
    mapped: MappedConv
    candidates: tuple[Candidate, ...]  # those built, in the heuristic's order
    notes: tuple[str, ...]  # why each tile is the size it is
    seconds: Mapping[str, float]  # per step, over every candidate

    @property
    def schedule(self) -> ConvSchedule:
        return self.program.schedule

    def format(self) -> str:
        """What was compiled, how, what shaped the schedule and what compiling cost."""
        p, low = self.program, self.mapped
        lines = [f"{p.computation.describe()}, on {p.config.tag}"]
        if low.folded:
            lines.append("  kernel taps folded into the reduction (few input channels)")
        lines.append(f"  schedule: {self.schedule.describe()}")
        lines += [f"    {note}" for note in self.notes]
        for c in self.candidates:
            if c.cycles is not None:
                lines.append(
                    f"    measured {c.schedule.describe()}: {c.cycles:,} cycles "
                    f"(estimate {c.estimate:,.0f})"
                )
        lines.append(
            f"  {len(p.insns)} instructions, {len(p.uops)} micro-ops, {p.dram_size:,} DRAM "
            f"bytes; verified (tokens, deadlock, hazards, ranges)"
        )
        steps = ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in self.seconds.items())
        lines.append(f"  compiled in {sum(self.seconds.values()):.2f} s ({steps})")
        return "\n".join(lines)


class _Clock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[step] = self.seconds.get(step, 0.0) + time.perf_counter() - t0


@dataclass(frozen=True)
class Plan:
    """What can be known of a layer before any tensor exists: its mapping, the schedules worth
    building (best first) and how many to build and measure."""

    mapped: MappedConv
    ranked: tuple[Ranked, ...]
    wanted: int
    seconds: Mapping[str, float]


def plan_operator(
    cfg: HwConfig,
    op: Conv2d | Dense,
    epilogue: Epilogue | None = None,
    *,
    schedule: ConvSchedule | None = None,
    fold: bool | None = None,
    measure: int = MEASURED,
    max_insns: int = MAX_INSNS,
    pool: MaxPool2d | None = None,
) -> Plan:
    """Map `op` (with `pool`, a conv2d whose output's max pool is taken on its accumulators),
    check `schedule` or rank the legal space, and refuse a layer too large for any program
    (more than `max_insns` instructions with every schedule, or tensors beyond the 32-bit DRAM
    window) before its weights are made or anything is built."""
    require_config(cfg)
    for what, value in (("max_insns", max_insns), ("measure", measure)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ScheduleError(f"{what} must be a positive whole number; got {value!r}")
    clock = _Clock()
    epilogue = epilogue or Epilogue()
    with clock("map"):
        if isinstance(op, Dense):
            if fold:
                raise ScheduleError("a dense layer has no kernel taps to fold")
            low = map_dense(cfg, op, epilogue)
        elif isinstance(op, DepthwiseConv2d):
            if fold:
                raise ScheduleError("a depthwise layer's taps are not folded")
            low = map_depthwise(cfg, op, epilogue)
        else:
            low = map_conv2d(cfg, op, epilogue, fold, pool)
        if pool is not None and low.pool is None:
            raise ScheduleError(
                f"a max pool is taken on a conv2d's accumulators, not a {op.kind}'s"
            )
    tensors = low.tensor_bytes()
    if tensors > MAX_DRAM_BYTES:
        raise ScheduleError(
            f"too large: {low.describe()} has {tensors / 2**30:.1f} GiB of tensors; a program's "
            f"DRAM window holds at most {MAX_DRAM_BYTES / 2**30:.0f} GiB (split the layer)"
        )
    if schedule is not None:
        with clock("check"):
            S.check(cfg, low, schedule)
        ranked, wanted = [Ranked(schedule, None)], 1
    else:
        with clock("rank"):
            ranked, wanted = rank(cfg, low), measure
    sizes = [S.instruction_bound(cfg, low, r.schedule) for r in ranked]
    small = [(r, n) for r, n in zip(ranked, sizes) if n <= max_insns]
    if not small:
        raise ScheduleError(
            f"too large: {low.describe()} would need about {min(sizes):,} instructions with "
            f"{'this schedule' if schedule else 'any schedule'}, more than max_insns = "
            f"{max_insns:,} (a program that size already takes seconds to compile and "
            f"verify); split the layer by output channels or rows, or raise max_insns "
            f"(--max-insns)"
        )
    return Plan(low, tuple(r for r, _ in small), wanted, MappingProxyType(clock.seconds))


def compile_operator(
    cfg: HwConfig,
    op: Conv2d | Dense,
    epilogue: Epilogue | None = None,
    *,
    weight=None,
    bias=None,
    multiplier=None,
    acc_lo=None,
    acc_hi=None,
    multiplier2=None,
    schedule: ConvSchedule | None = None,
    fold: bool | None = None,
    name: str | None = None,
    measure: int = MEASURED,
    max_insns: int = MAX_INSNS,
    check: bool = True,
    timer: Timer | None = None,
    pool: MaxPool2d | None = None,
) -> Compilation:
    """Compile a conv2d or dense layer. Parameters given as arrays become constants of the
    program; those left None become named inputs. Without `schedule`, the heuristic ranks the
    legal space and its best candidates of distinct tilings are built and timed on the cycle
    model: at most `measure` (>= 1), at least MEASURE_AT_LEAST_RESIDUAL for an epilogue that adds
    a residual, and no more once they total MEASURE_BUDGET instructions (one alone is not
    timed, on `timer`: the cycle model unless given). A layer too large for any program is
    refused up front (`plan_operator`). With `pool` (a conv2d's), the program also takes that
    max pool of the output on the accumulators (operator.pool_epilogue), refused unless the
    weights and epilogue parameters are constants under which the epilogue never decreases.
    With `check` False the program is not verified here: for a caller that verifies the
    program it builds from this one (a network's chain)."""
    epilogue = epilogue or Epilogue()
    plan = plan_operator(
        cfg,
        op,
        epilogue,
        schedule=schedule,
        fold=fold,
        measure=measure,
        max_insns=max_insns,
        pool=pool,
    )
    clock = _Clock()
    clock.seconds.update(plan.seconds)
    low, ranked, wanted = plan.mapped, plan.ranked, plan.wanted
    with clock("map"):
        params = check_params(cfg, low, weight, bias, multiplier, acc_lo, acc_hi, multiplier2)
        if pool is not None:
            _check_monotone(epilogue, params)
    computation = Computation(low.source, epilogue, params.tensor_multiplier, pool)
    name = name or op.kind
    if not isinstance(name, str):  # the program file keeps it as a string
        raise ScheduleError(f"a program's name is a non-empty string, not {name!r}")
    built: list[tuple[Ranked, Program]] = []
    tilings = set()
    at_least = MEASURE_AT_LEAST_RESIDUAL if epilogue.residual else 1
    if epilogue.residual and schedule is None:
        ranked = _spread_steps(low, ranked, at_least)
    for r in ranked:
        if len(built) == wanted or (
            len(built) >= at_least and sum(len(p.insns) for _, p in built) >= MEASURE_BUDGET
        ):
            break
        tiling = _tiling(r.schedule)
        if tiling in tilings:
            continue  # the same tiles in another loop order or slot count: measure others
        try:
            with clock("lower"):
                lowered = lower_conv(cfg, low, r.schedule, params, name)
        except ScheduleError:
            if schedule is not None:
                raise
            continue  # e.g. more micro-op kernels than fit, which the estimate does not see
        with clock("tokens"):
            insns = insert_tokens(cfg, lowered.insns, lowered.uops, lowered.uop_region)
        with clock("assemble"):
            program = lowered.builder.build(insns, computation=computation, schedule=r.schedule)
        built.append((r, program))
        tilings.add(tiling)
    if not built:
        raise ScheduleError(f"no schedule for {low.describe()} fits the micro-op buffer")
    cycles: list[int | None] = [None] * len(built)
    if len(built) > 1:
        with clock("measure"):
            timer = timer or cycle_model()
            cycles = [int(timer(p)) for _, p in built]
    best = min(range(len(built)), key=lambda i: (cycles[i] or 0, i))
    program = built[best][1]
    if check:  # else the caller verifies what runs (a network: its chained program)
        with clock("verify"):
            verify(program)
    with clock("notes"):
        chooser = "the cost model" if schedule is None else "the given schedule"
        notes = tuple(S.shaping_limits(cfg, low, program.schedule, chooser))
    candidates = tuple(Candidate(r.schedule, r.estimate, c) for (r, _), c in zip(built, cycles))
    return Compilation(program, low, candidates, notes, MappingProxyType(clock.seconds))


def _check_monotone(epilogue: Epilogue, params) -> None:
    """Refuse a max pool on the accumulators unless the weights are constants under which
    the epilogue (with `params`) never decreases (`pool_epilogue.check_monotone`)."""
    if params.weight is None:
        raise ScheduleError(
            "a max pool on the accumulators needs the weights as a constant, to prove the "
            "epilogue never decreases; they were left as an input"
        )
    lo, hi = accumulator_range(params.weight)
    check_monotone(epilogue, lo, hi, params)


def check_pool(
    cfg: HwConfig, op: Conv2d, epilogue: Epilogue, pool: MaxPool2d, *, fold=None, **params
) -> None:
    """Raise a ScheduleError saying why `compile_operator` would refuse `pool` on `op`'s
    accumulators (with these parameters: `compile_operator`'s), before anything is built."""
    low = map_conv2d(cfg, op, epilogue, fold, pool)
    _check_monotone(epilogue, check_params(cfg, low, **params))


def _spread_steps(low: MappedConv, ranked: tuple[Ranked, ...], n: int) -> tuple[Ranked, ...]:
    """The ranking with the best of each of up to `n` reduction-step counts first. Where the
    epilogue adds a residual, the in-order compute stage holds the next tile's GEMMs behind the
    residual's GEMM, which waits on the passes before it: how much of that hides depends on the
    reduction steps a tile takes, which the estimate does not see (ResNet-18's conv_19 on the
    PYNQ-Z1: every tiling within 0.1% estimated; one step a tile measured 538-545 K, two steps
    473 K)."""
    firsts, counts = [], set()
    for r in ranked:
        steps = -(-low.icb // r.schedule.tile_ic)
        if steps not in counts and len(counts) < n:
            counts.add(steps)
            firsts.append(r)
    return (*firsts, *(r for r in ranked if r not in firsts))


def _tiling(s: ConvSchedule) -> tuple:
    """What a candidate's cycles mostly depend on: its tiles and buffering (twins that differ
    in loop order or accumulator slots alone measured within 0.1% on ResNet-18's layers)."""
    return (s.tile_oc, s.tile_ic, s.tile_oh, s.tile_ow, s.double_buffer)


def single_buffered(compilation: Compilation, **params) -> Program:
    """The same tiles without latency hiding (one buffer slot, loads, compute and stores taking
    turns): the baseline the benchmarks compare overlap against."""
    s = replace(compilation.schedule, double_buffer=False)
    low = compilation.mapped
    return compile_operator(
        compilation.program.config,
        low.source,
        low.epilogue,
        schedule=s,
        fold=low.folded,
        name=compilation.program.name,
        pool=low.pool,
        **params,
    ).program
