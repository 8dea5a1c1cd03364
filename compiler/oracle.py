"""Checks a program's outputs against the numpy oracle of the operator it was compiled from.

A program's `meta["kind"]` names the operator; each kind registers how to recompute its outputs
from its inputs with numpy.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler import blocked_gemm
from tilecraft.errors import ProgramError
from tilecraft.runtime.program import Program


def _gemm_oracle(program: Program, inputs: dict) -> dict:
    cfg = program.config
    a = blocked_gemm.unpack_c(cfg, inputs["a"])  # (M/B, K/Bi, B, Bi) -> (M, K)
    w = blocked_gemm.unpack_c(cfg, inputs["b"]).T  # (N, K) -> (K, N)
    expected = blocked_gemm.reference(cfg, a, w, program.meta["shift"])
    b_, bo = cfg.batch, cfg.block_out
    m, n = expected.shape
    return {"c": expected.reshape(m // b_, b_, n // bo, bo).transpose(0, 2, 1, 3)}


ORACLES = {"blocked_gemm": _gemm_oracle}


def check_outputs(program: Program, inputs: dict, outputs: dict) -> tuple[bool, str]:
    """(ok, message) comparing every output bit-exactly with the oracle."""
    kind = program.meta.get("kind")
    if kind not in ORACLES:
        raise ProgramError(
            f"program {program.name!r} (kind {kind!r}) has no numpy oracle; known kinds: "
            f"{', '.join(sorted(ORACLES))}"
        )
    expected = ORACLES[kind](program, inputs)
    lines, ok = [], True
    for name, want in expected.items():
        got = outputs[name]
        bad = int(np.count_nonzero(got != want))
        ok &= bad == 0
        lines.append(
            f"check {name}: "
            + ("bit-exact vs numpy" if not bad else f"{bad} of {want.size} values differ")
        )
    return ok, "\n".join(lines)
