"""Checks a program's outputs against the numpy oracle of the operator it was compiled from.

A program's `meta["kind"]` names the operator; each kind registers how to recompute its
outputs from its *logical* inputs (runtime.layout unpacks anything packed) with numpy.
Parameters baked into the program as constants are unpacked from it.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler import blocked_gemm, reference
from tilecraft.compiler.ops import Conv2d, Epilogue
from tilecraft.errors import ProgramError
from tilecraft.runtime import layout
from tilecraft.runtime.program import Program


def _gemm_oracle(program: Program, inputs: dict) -> dict:
    cfg = program.config
    a = blocked_gemm.unpack_c(cfg, inputs["a"])  # (M/B, K/Bi, B, Bi) -> (M, K)
    w = blocked_gemm.unpack_c(cfg, inputs["b"]).T  # (N, K) -> (K, N)
    expected = blocked_gemm.reference(cfg, a, w, program.meta["shift"])
    b_, bo = cfg.batch, cfg.block_out
    m, n = expected.shape
    return {"c": expected.reshape(m // b_, b_, n // bo, bo).transpose(0, 2, 1, 3)}


def _param(program: Program, inputs: dict, name: str):
    if name in inputs:
        return inputs[name]
    if name in program.constants:
        return layout.unpack(program.config, program.buffer(name).layout, program.constants[name])
    return None


def _epilogue_args(program: Program, inputs: dict) -> tuple[Epilogue, dict]:
    e = dict(program.meta["epilogue"])
    value = e.pop("multiplier_value", None)
    ep = Epilogue(**{**e, "clip": tuple(e["clip"])})
    params = {
        "bias": _param(program, inputs, "bias"),
        "multiplier": value if value is not None else _param(program, inputs, "multiplier"),
        "residual": inputs.get("residual"),
    }
    return ep, params


def _conv_oracle(program: Program, inputs: dict) -> dict:
    m = program.meta["op"]
    op = Conv2d(
        m["n"],
        m["ic"],
        m["h"],
        m["w"],
        m["oc"],
        kernel=tuple(m["kernel"]),
        stride=tuple(m["stride"]),
        pad=tuple(m["pad"]),
    )
    ep, params = _epilogue_args(program, inputs)
    weight = _param(program, inputs, "weight")
    return {"output": reference.conv2d(op, ep, inputs["input"], weight, **params)}


def _dense_oracle(program: Program, inputs: dict) -> dict:
    ep, params = _epilogue_args(program, inputs)
    weight = _param(program, inputs, "weight")
    return {"output": reference.dense(ep, inputs["input"], weight, **params)}


ORACLES = {"blocked_gemm": _gemm_oracle, "conv2d": _conv_oracle, "dense": _dense_oracle}


def expected_outputs(program: Program, inputs: dict) -> dict:
    kind = program.meta.get("kind")
    if kind not in ORACLES:
        raise ProgramError(
            f"program {program.name!r} (kind {kind!r}) has no numpy oracle; known kinds: "
            f"{', '.join(sorted(ORACLES))}"
        )
    return ORACLES[kind](program, inputs)


def check_outputs(program: Program, inputs: dict, outputs: dict) -> tuple[bool, str]:
    """(ok, message) comparing every output bit-exactly with the oracle; `inputs` and
    `outputs` are logical tensors (runtime.layout.unpack_outputs)."""
    expected = expected_outputs(program, inputs)
    lines, ok = [], True
    for name, want in expected.items():
        got = outputs[name]
        bad = int(np.count_nonzero(got != want)) if got.shape == want.shape else want.size
        ok &= bad == 0
        lines.append(
            f"check {name}: "
            + ("bit-exact vs numpy" if not bad else f"{bad} of {want.size} values differ")
        )
    return ok, "\n".join(lines)
