"""Typed opcodes, memory ids, ALU ops and pipeline stages. Values are the encoded bit patterns."""

from __future__ import annotations

from enum import IntEnum


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemId(IntEnum):
    """Scratchpad a LOAD writes or a STORE reads. OUT is the narrowed view of ACC."""

    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4


# The scratchpad (HwConfig buffer name) each memory id addresses, and what LOAD may target.
BUFFER_NAMES: dict[MemId, str] = {
    MemId.UOP: "uop",
    MemId.WGT: "wgt",
    MemId.INP: "inp",
    MemId.ACC: "acc",
    MemId.OUT: "out",
}
LOAD_MEMS = (MemId.UOP, MemId.WGT, MemId.INP, MemId.ACC)


class AluOp(IntEnum):
    """Lane-wise accumulator ops; results wrap at the accumulator width.

    SHR is an arithmetic shift whose amount is signed: negative shifts left.
    """

    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


class Stage(IntEnum):
    """The three execution stages; fetch routes each instruction to one of them."""

    LOAD = 0
    COMPUTE = 1
    STORE = 2


class TokenQueue(IntEnum):
    """The four dependence-token queues, named producer->consumer."""

    LOAD_TO_COMPUTE = 0
    COMPUTE_TO_LOAD = 1
    COMPUTE_TO_STORE = 2
    STORE_TO_COMPUTE = 3


def stage_of(opcode: int, mem: int) -> Stage:
    """Fetch routing: LOAD INP/WGT -> load; LOAD UOP/ACC, GEMM, ALU, FINISH -> compute;
    STORE -> store."""
    if opcode == Opcode.LOAD:
        return Stage.LOAD if mem in (MemId.INP, MemId.WGT) else Stage.COMPUTE
    if opcode == Opcode.STORE:
        return Stage.STORE
    return Stage.COMPUTE


# Which queue each dependence flag pops from / pushes to, per stage (None: flag is illegal there).
POP_QUEUES: dict[Stage, dict[str, TokenQueue | None]] = {
    Stage.LOAD: {"pop_prev": None, "pop_next": TokenQueue.COMPUTE_TO_LOAD},
    Stage.COMPUTE: {
        "pop_prev": TokenQueue.LOAD_TO_COMPUTE,
        "pop_next": TokenQueue.STORE_TO_COMPUTE,
    },
    Stage.STORE: {"pop_prev": TokenQueue.COMPUTE_TO_STORE, "pop_next": None},
}
PUSH_QUEUES: dict[Stage, dict[str, TokenQueue | None]] = {
    Stage.LOAD: {"push_prev": None, "push_next": TokenQueue.LOAD_TO_COMPUTE},
    Stage.COMPUTE: {
        "push_prev": TokenQueue.COMPUTE_TO_LOAD,
        "push_next": TokenQueue.COMPUTE_TO_STORE,
    },
    Stage.STORE: {"push_prev": TokenQueue.STORE_TO_COMPUTE, "push_next": None},
}
