"""conv2d and dense onto the accelerator: the public entry points.

    program = conv2d(cfg, Conv2d(1, 64, 56, 56, 64, kernel=3, pad=1), Epilogue(shift=8, relu=True),
                     weight=w)

Each compiles through the pipeline (`operator.pipeline`): mapping, schedule (given, or the
heuristic's), lowering, tokens, assembly, verification. Parameters given as arrays become
constants in the program; those left None become named inputs. `compile_conv2d` and
`compile_dense` also return what the compiler considered and what each step cost.
"""

from __future__ import annotations

from tilecraft.compiler.operator.pipeline import Compilation, compile_operator
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.ops import Conv2d, Dense, Epilogue
from tilecraft.runtime.program import Program


def compile_conv2d(
    cfg: HwConfig, op: Conv2d, epilogue: Epilogue | None = None, **options
) -> Compilation:
    """Compile one conv2d (NCHW int8 input "input", OIHW int8 "weight", int8 "output"); the
    `options` are `compile_operator`'s (parameters, schedule, fold, name, timer, ...)."""
    if not isinstance(op, Conv2d):
        raise ScheduleError(f"compile_conv2d takes a Conv2d, not {type(op).__name__}")
    return compile_operator(cfg, op, epilogue, **options)


def conv2d(cfg: HwConfig, op: Conv2d, epilogue: Epilogue | None = None, **options) -> Program:
    """The verified program of `compile_conv2d`; without `schedule` the heuristic picks one."""
    return compile_conv2d(cfg, op, epilogue, **options).program


def compile_dense(
    cfg: HwConfig, m: int, k: int, n: int, epilogue: Epilogue | None = None, **options
) -> Compilation:
    """Compile x (M, K) int8 @ weight (K, N) int8 -> (M, N) int8 through the epilogue (the
    `options` are `compile_operator`'s). It runs as a 1x1 convolution over BATCH images of
    ceil(M/BATCH) rows each (runtime.layout `Rows`), so every batch lane is used whatever M
    is."""
    return compile_operator(cfg, Dense(m, k, n), epilogue, **options)


def dense(cfg: HwConfig, m: int, k: int, n: int, epilogue: Epilogue | None = None, **options):
    """The verified program of `compile_dense`."""
    return compile_dense(cfg, m, k, n, epilogue, **options).program
