"""Hypothesis strategies for random instructions and micro-ops of the swept configs."""

from __future__ import annotations

from hypothesis import strategies as st

from tilecraft.hw.config import preset
from tilecraft.hw.isa import (
    Alu,
    AluOp,
    Depthwise,
    Finish,
    Gemm,
    Load,
    MemId,
    Opcode,
    Store,
    Uop,
    isa_for,
)

CONFIGS = ["default", "1x8x8", "2x16x16", "1x32x32", "default+rq8", "1x8x8+dw3", "default+rq8+dw5"]
LOAD_MEMS = [MemId.UOP, MemId.WGT, MemId.INP, MemId.ACC]
FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
SKIP = {"opcode", "mem", "alu_op", *FLAGS}  # set from enums / flags, not from ranges


def config(name: str):
    """A swept preset by name; `+rqN` adds a requantization unit of N lanes, `+dwK` the
    depthwise mode for K x K windows."""
    base, *units = name.split("+")
    cfg = preset(base)
    for unit in units:
        knob = {"rq": "requant_lanes", "dw": "depthwise_window"}[unit[:2]]
        cfg = cfg.replace(**{knob: int(unit[2:])})
    return cfg


def _fields(draw, spec, op):
    """Every numeric field of `op` drawn from its encodable range (booleans for 1-bit ones)."""
    out = {}
    for f in spec.formats[op]:
        if f.name in SKIP:
            continue
        if f.name in ("reset", "use_imm", "requant", "param_per_row"):
            out[f.name] = draw(st.booleans())
        else:
            out[f.name] = draw(st.integers(f.lo, f.hi))
    out.update({name: draw(st.booleans()) for name in FLAGS})
    return out


@st.composite
def instructions(draw, spec):
    kind = draw(st.sampled_from(list(spec.formats)))
    values = _fields(draw, spec, kind)
    if kind == Opcode.LOAD:
        return Load(mem=draw(st.sampled_from(LOAD_MEMS)), **values)
    if kind == Opcode.STORE:
        for pad in ("y_pad0", "y_pad1", "x_pad0", "x_pad1", "pad_value"):
            values.pop(pad, None)
        return Store(**values)
    if kind == Opcode.GEMM:
        return Gemm(**values)
    if kind == Opcode.ALU:
        return Alu(op=draw(st.sampled_from(list(AluOp))), **values)
    if kind == Opcode.DEPTHWISE:
        return Depthwise(**values)
    return Finish(**values)


@st.composite
def programs(draw):
    spec = isa_for(config(draw(st.sampled_from(CONFIGS))))
    return spec, draw(st.lists(instructions(spec), min_size=1, max_size=12))


@st.composite
def uop_lists(draw):
    spec = isa_for(config(draw(st.sampled_from(CONFIGS))))
    uop = st.builds(Uop, **{name: st.integers(0, f.hi) for name, f in spec.uop.fields.items()})
    return spec, draw(st.lists(uop, max_size=20))
