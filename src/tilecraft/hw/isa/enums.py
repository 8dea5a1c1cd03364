"""Typed opcodes, memory ids, ALU ops and pipeline stages. Values are the encoded bit patterns."""

from __future__ import annotations

from enum import IntEnum


class Opcode(IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4
    DEPTHWISE = 5  # configs with the depthwise mode only (HwConfig.depthwise_window)


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

    SHR is an arithmetic shift whose amount is signed: negative shifts left. CLIP is MAX then
    MIN in one pass, min(max(x, lo), hi), with both bounds in its operand (`clip_operand`): a
    quantized layer's ReLU and int8 clip, which took two passes over every accumulator.
    """

    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4
    CLIP = 5


CLIP_BOUND_BITS = 8  # each CLIP bound is a signed byte of the operand: hi bits 0-7, lo 8-15


def clip_fits(lo: int, hi: int) -> bool:
    """Whether CLIP can clamp to [lo, hi] (both signed bytes, lo <= hi)."""
    half = 1 << (CLIP_BOUND_BITS - 1)
    return -half <= lo <= hi < half


def clip_operand(lo: int, hi: int) -> int:
    """CLIP's operand for [lo, hi], as a signed 16-bit immediate (a tensor operand's lanes
    hold the same in their low 16 bits)."""
    if not clip_fits(lo, hi):
        half = 1 << (CLIP_BOUND_BITS - 1)
        raise ValueError(f"CLIP bounds [{lo}, {hi}]: need {-half} <= lo <= hi <= {half - 1}")
    mask = (1 << CLIP_BOUND_BITS) - 1
    value = ((lo & mask) << CLIP_BOUND_BITS) | (hi & mask)
    return value - (1 << 2 * CLIP_BOUND_BITS) if value >> (2 * CLIP_BOUND_BITS - 1) else value


def clip_bounds(operand):
    """(lo, hi) a CLIP operand (an int or an integer array) names."""
    mask, half = (1 << CLIP_BOUND_BITS) - 1, 1 << (CLIP_BOUND_BITS - 1)
    hi = ((operand & mask) ^ half) - half
    lo = (((operand >> CLIP_BOUND_BITS) & mask) ^ half) - half
    return lo, hi


class Stage(IntEnum):
    """The three execution stages; fetch routes each instruction to one of them."""

    LOAD = 0
    COMPUTE = 1
    STORE = 2


STAGE_OF = {int(s): s for s in Stage}  # a stage by its number, without an enum call


class Unit(IntEnum):
    """The compute stage's two execution units."""

    GEMM = 0
    ALU = 1


BARRIER = None  # the unit of the compute stage's LOAD (UOP/ACC) and FINISH: both units'


def unit_of(opcode: int) -> Unit | None:
    """The compute unit that runs `opcode`; BARRIER (None) for the compute stage's LOAD
    (UOP/ACC) and FINISH, which wait for both units (and for LOAD/STORE, which run on their
    own stages)."""
    return _UNIT_OF.get(int(opcode), BARRIER)


_UNIT_OF = {
    int(Opcode.GEMM): Unit.GEMM,
    int(Opcode.DEPTHWISE): Unit.GEMM,
    int(Opcode.ALU): Unit.ALU,
}


class TokenQueue(IntEnum):
    """The four dependence-token queues, named producer->consumer."""

    LOAD_TO_COMPUTE = 0
    COMPUTE_TO_LOAD = 1
    COMPUTE_TO_STORE = 2
    STORE_TO_COMPUTE = 3

    @property
    def producer(self) -> Stage:
        return QUEUE_ENDS[self][0]

    @property
    def push_flag(self) -> str:
        return QUEUE_ENDS[self][1]

    @property
    def consumer(self) -> Stage:
        return QUEUE_ENDS[self][2]

    @property
    def pop_flag(self) -> str:
        return QUEUE_ENDS[self][3]


def stage_of(opcode: int, mem: int) -> Stage:
    """Fetch routing: LOAD INP/WGT -> load; LOAD UOP/ACC, GEMM, ALU, FINISH -> compute;
    STORE -> store."""
    if opcode == Opcode.LOAD:
        return Stage.LOAD if mem in (MemId.INP, MemId.WGT) else Stage.COMPUTE
    if opcode == Opcode.STORE:
        return Stage.STORE
    return Stage.COMPUTE


# Each queue's producer stage and the flag it pushes with, its consumer and the flag it pops
# with: for the load stage "next" is compute; for compute "prev" is load and "next" is store; for
# store "prev" is compute. The rest below is derived from this table.
QUEUE_ENDS: dict[TokenQueue, tuple[Stage, str, Stage, str]] = {
    TokenQueue.LOAD_TO_COMPUTE: (Stage.LOAD, "push_next", Stage.COMPUTE, "pop_prev"),
    TokenQueue.COMPUTE_TO_LOAD: (Stage.COMPUTE, "push_prev", Stage.LOAD, "pop_next"),
    TokenQueue.COMPUTE_TO_STORE: (Stage.COMPUTE, "push_next", Stage.STORE, "pop_prev"),
    TokenQueue.STORE_TO_COMPUTE: (Stage.STORE, "push_prev", Stage.COMPUTE, "pop_next"),
}


def queue_between(producer: Stage, consumer: Stage) -> TokenQueue | None:
    """The queue that carries tokens from `producer` to `consumer` (None: there is none)."""
    return _QUEUE_BETWEEN.get((producer, consumer))


def _flags(end: int, flags: tuple[str, str]) -> dict[Stage, dict[str, TokenQueue | None]]:
    table: dict[Stage, dict[str, TokenQueue | None]] = {s: dict.fromkeys(flags) for s in Stage}
    for q, ends in QUEUE_ENDS.items():
        table[ends[end]][ends[end + 1]] = q
    return table


# Which queue each dependence flag pops from / pushes to, per stage (None: illegal there).
_QUEUE_BETWEEN = {(ends[0], ends[2]): q for q, ends in QUEUE_ENDS.items()}
POP_QUEUES = _flags(2, ("pop_prev", "pop_next"))
PUSH_QUEUES = _flags(0, ("push_prev", "push_next"))
