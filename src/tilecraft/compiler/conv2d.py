"""conv2d and dense onto the accelerator: the public entry points.

    program = conv2d(cfg, Conv2d(1, 64, 56, 56, 64, kernel=3, pad=1), Epilogue(shift=8, relu=True),
                     weight=w)

Pipeline (named passes, in order): lower (mapping.lower: blocks, tap folding) -> schedule
(given, or heuristic.choose) -> legality (schedule.check) -> emit (lowering: tensorize, DMA
plan, epilogue, double buffering) -> insert_tokens -> encode -> verify. Parameters given as
arrays become constants in the program; those left None become named inputs.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler import schedule as sched_mod
from tilecraft.compiler.lowering import ConvEmitter
from tilecraft.compiler.mapping import lower
from tilecraft.compiler.ops import Conv2d, Epilogue
from tilecraft.compiler.schedule import ConvSchedule
from tilecraft.compiler.verify import verify
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.runtime.program import Program


def build(
    cfg: HwConfig,
    op: Conv2d,
    epilogue: Epilogue,
    schedule: ConvSchedule,
    params: dict,
    *,
    fold: bool | None = None,
    name: str | None = None,
    check: bool = True,
    meta: dict | None = None,
) -> Program:
    """Lower, emit and (with `check`) verify one scheduled convolution."""
    low = lower(cfg, op, epilogue, fold)
    sched_mod.check(cfg, low, schedule)
    program = ConvEmitter(cfg, low, schedule, params, name or "conv2d").emit()
    program.meta = {
        "kind": "conv2d",
        "op": {
            "n": op.n,
            "ic": op.ic,
            "h": op.h,
            "w": op.w,
            "oc": op.oc,
            "kernel": list(op.kernel),
            "stride": list(op.stride),
            "pad": list(op.pad),
        },
        "epilogue": {
            "bias": epilogue.bias,
            "multiplier": epilogue.multiplier,
            "shift": epilogue.shift,
            "residual": epilogue.residual,
            "relu": epilogue.relu,
            "clip": list(epilogue.clip),
        },
        "schedule": schedule.to_dict(),
        "folded": low.folded,
        "macs": op.macs,
        **(meta or {}),
    }
    if epilogue.multiplier == "tensor":
        program.meta["epilogue"]["multiplier_value"] = int(params["multiplier"])
    if check:
        verify(program)
    return program


def _compile(cfg, op, epilogue, params, schedule, fold, name, meta) -> Program:
    """The program for `schedule`, or for the heuristic's choice; not yet verified."""
    from tilecraft.compiler.heuristic import choose

    m = params.get("multiplier")
    if epilogue.multiplier == "tensor" and (
        m is None or np.ndim(m) != 0 or not -(1 << 15) <= int(m) < (1 << 15)
    ):
        raise ScheduleError(
            f"a per-tensor multiplier must be given at compile time as an int in "
            f"[-32768, 32767] (it is an immediate), not {m!r}"
        )
    if schedule is None:
        choice = choose(cfg, op, epilogue, fold=fold, params=params)
        program = choice.program
        meta = {**meta, "schedule_notes": choice.notes, "schedule_candidates": choice.candidates}
    else:
        program = build(cfg, op, epilogue, schedule, params, fold=fold, check=False)
    program.name = name
    program.meta.update(meta)
    return program


def conv2d(
    cfg: HwConfig,
    op: Conv2d,
    epilogue: Epilogue | None = None,
    *,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    multiplier=None,
    schedule: ConvSchedule | None = None,
    fold: bool | None = None,
    name: str | None = None,
) -> Program:
    """Compile one conv2d (NCHW int8 input "input", OIHW int8 "weight", int8 "output").

    Without `schedule`, the heuristic picks one (heuristic.choose) and the program's
    `meta["schedule_notes"]` says which limits shaped it. The program is verified.
    """
    params = {"weight": weight, "bias": bias, "multiplier": multiplier}
    program = _compile(
        cfg, op, epilogue or Epilogue(), params, schedule, fold, name or "conv2d", {}
    )
    verify(program)
    return program


def dense(
    cfg: HwConfig,
    m: int,
    k: int,
    n: int,
    epilogue: Epilogue | None = None,
    *,
    weight: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    multiplier=None,
    schedule: ConvSchedule | None = None,
    name: str | None = None,
) -> Program:
    """Compile x (M, K) int8 @ weight (K, N) int8 -> (M, N) int8 through the epilogue.

    Runs as a 1x1 convolution over BATCH images of ceil(M/BATCH) rows each (runtime.layout
    ``rows``), so every batch lane is used whatever M is.
    """
    op = Conv2d(cfg.batch, k, -(-m // cfg.batch), 1, n, kernel=1)
    w = None if weight is None else np.asarray(weight).T.reshape(n, k, 1, 1)
    params = {"weight": w, "bias": bias, "multiplier": multiplier}
    meta = {"kind": "dense", "dense": {"m": m, "k": k, "n": n}}
    program = _compile(
        cfg, op, epilogue or Epilogue(), params, schedule, False, name or "dense", meta
    )
    _relayout_dense(program, m, k, n)
    verify(program)
    return program


def _relayout_dense(program: Program, m: int, k: int, n: int) -> None:
    """Name the dense tensors by their matrix layouts (rows) instead of the conv's NCHW."""
    from dataclasses import replace

    fixed = []
    for b in program.buffers:
        if b.name == "input":
            b = replace(b, layout={"pack": "rows", "logical": [m, k]})
        elif b.name == "output":
            b = replace(b, layout={"pack": "rows", "logical": [m, n], "block": "out"})
        elif b.name == "weight":
            b = replace(b, layout={**b.layout, "dense": True, "logical": [k, n]})
        elif b.name == "residual":
            b = replace(b, layout={"pack": "rows", "logical": [m, n]})
        fixed.append(b)
    program.buffers = fixed
