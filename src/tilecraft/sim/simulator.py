"""Run a program image from DRAM, as the hardware would: read `count` instruction words at an
address, route them to the three stages, execute bit-exactly and time it with the cycle model."""

from __future__ import annotations

import numpy as np

from tilecraft.errors import AccessError, ExecutionError, HazardError, IllegalInstructionError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import (
    BUFFER_NAMES,
    INSN_BYTES,
    LOAD_MEMS,
    POP_QUEUES,
    PUSH_QUEUES,
    AluOp,
    MemId,
    Opcode,
    Stage,
    Unit,
    as_words,
    decode,
    format_row,
    isa_for,
    stage_of,
    unit_of,
)
from tilecraft.hw.timing import Timing, alu_hazards, depthwise_outputs
from tilecraft.sim import semantics
from tilecraft.sim.engine import STAGE_NAMES, Engine
from tilecraft.sim.machine import Machine
from tilecraft.sim.plan import Plan
from tilecraft.sim.races import RaceChecker
from tilecraft.sim.report import SimReport, StageStats
from tilecraft.sim.trace import chrome_trace

_EXEC = {
    Opcode.LOAD: semantics.load,
    Opcode.STORE: semantics.store,
    Opcode.GEMM: semantics.gemm,
    Opcode.ALU: semantics.alu,
    Opcode.DEPTHWISE: semantics.depthwise,
}


def simulate(
    config: HwConfig, dram: np.ndarray, insn_addr: int, insn_count: int, **options
) -> SimReport:
    """Execute `insn_count` instructions at byte `insn_addr` of `dram` (a uint8 array, updated
    in place) and return the report; options as `run_image`. Raises `ExecutionError` subclasses
    for illegal programs and `DeadlockError` when the stages block each other."""
    return run_image(config, dram, insn_addr, insn_count, **options)[0]


def model_report(program, timing: Timing | None = None) -> SimReport:
    """The cycle model alone on a Program (timing does not depend on data): what the schedule
    search and the benchmarks measure candidates with."""
    report, _ = run_image(
        program.config,
        program.dram_image(),
        program.insn_offset,
        len(program.insns),
        timing=timing,
        functional=False,
        check_races=False,
    )
    return report


def run_image(
    config: HwConfig,
    dram: np.ndarray,
    insn_addr: int,
    insn_count: int,
    *,
    timing: Timing | None = None,
    trace: bool = False,
    check_races: bool = True,
    functional: bool = True,
    order: list[tuple[int, dict]] | None = None,
) -> tuple[SimReport, Machine]:
    """`simulate`, also returning the final machine state (scratchpads) for inspection.

    `functional=False` runs the cycle model only (timing never depends on data): the schedule
    search uses it to measure candidates quickly; outputs and scratchpads are left untouched.
    `order`, a list, receives each instruction whose semantics ran, as (index, decoded row), in
    the order they ran: what `replay` takes to run the same instructions again on other data.
    """
    timing = timing or Timing.from_config(config)
    table, words = _instructions(config, dram, insn_addr, insn_count)
    stages = _validate(table, words, config)
    rows = _rows_of(table)
    plan = Plan(config, timing, rows, stages)
    machine = Machine(config, dram)
    races = RaceChecker(config, lambda k: format_row(rows[k])) if check_races else None
    events: list = []
    counts = {"gemm": 0, "alu": 0}

    last_footprint: dict[Unit, tuple] = {}  # unit -> (index, footprint) of its latest

    def execute(k: int, stage: Stage, start: int, stop: int, overlaps: int | None) -> None:
        row = rows[k]
        op = row["opcode"]
        loads_uops = op == Opcode.LOAD and row["mem"] == MemId.UOP
        run = _EXEC.get(op) if functional or loads_uops else None
        if run is not None:
            footprint = _run(run, machine, k, row)
            if order is not None and functional:
                order.append((k, row))
            if races is not None:
                races.check(k, stage, start, stop, footprint)
            unit = unit_of(op)
            if unit is not None and functional:
                if overlaps is not None:
                    j, theirs = last_footprint[unit_of(rows[overlaps]["opcode"])]
                    assert j == overlaps
                    _check_overlap(config, k, j, footprint, theirs, rows, half)
                last_footprint[unit] = (k, footprint)
        if op in (Opcode.GEMM, Opcode.ALU):
            steps = row["iter_out"] * row["iter_in"] * (row["uop_end"] - row["uop_bgn"])
            if op == Opcode.ALU:
                counts["alu"] += steps
            elif not row["reset"]:
                counts["gemm"] += steps
        elif op == Opcode.DEPTHWISE:  # its outputs' passes through the array
            out_rows, out_cols = depthwise_outputs(config.depthwise_window, row)
            counts["gemm"] += out_rows * out_cols * config.depthwise_passes
        if trace:
            unit = unit_of(op) if stage == Stage.COMPUTE else None
            lane = STAGE_NAMES[stage] + ("" if unit is None else "/" + unit.name.lower())
            events.append((lane, k, start, stop, format_row(row)))

    def half(k: int) -> int:
        row = rows[k]
        if row["opcode"] == Opcode.DEPTHWISE:
            return config.acc_bank(int(row["acc_base"]))
        return config.acc_bank(int(machine.uop_dst[row["uop_bgn"]]))

    def waits(k: int) -> int:
        row = rows[k]
        if row["opcode"] != Opcode.ALU:
            return 0
        return timing.alu_hazard * alu_hazards(row, machine.uop_dst, machine.uop_src)

    engine = Engine(config, timing, plan, execute, half, insn_addr, waits)
    engine.run()
    cycles = engine.check_finish()
    report = _report(config, table, plan, engine, cycles, counts, events if trace else None)
    return report, machine


def replay(config: HwConfig, dram: np.ndarray, order, plans: list | None = None) -> Machine:
    """Run the semantics of a timed `run_image`'s instructions in the `order` it recorded, on
    `dram` (the same program's image with other data; updated in place), without the cycle
    model: the same scratchpads and DRAM that run would give on this data, since neither the
    order nor any instruction's footprint depends on data (nor do the timed run's report and
    race check, which hold for this run too). `plans`: the loop plans of an earlier run of
    the same instructions (`Machine.plans`), taken again where its micro-ops were the same."""
    machine = Machine(config, dram, plans)
    for k, row in order:
        _run(_EXEC[row["opcode"]], machine, k, row)
    return machine


def _instructions(config: HwConfig, dram: np.ndarray, insn_addr: int, insn_count: int):
    """The decoded table of the `insn_count` instructions at byte `insn_addr`, and their words."""
    end = insn_addr + insn_count * INSN_BYTES
    if insn_addr < 0 or insn_count < 1 or end > dram.size:
        raise AccessError(
            f"instructions at DRAM bytes [{insn_addr}, {end}) are outside the mapped region of "
            f"{dram.size} bytes (or the count {insn_count} is not positive)"
        )
    words = as_words(dram[insn_addr:end])
    return decode(isa_for(config), words), words


def _rows_of(table: np.ndarray) -> list[dict]:
    return [dict(zip(table.dtype.names, vals)) for vals in table.tolist()]


def _run(semantics, machine: Machine, k: int, row: dict):
    """Instruction k's semantics on `machine`; an ExecutionError names the instruction."""
    try:
        return semantics(machine, row)
    except ExecutionError as exc:
        raise type(exc)(exc.message, index=k, insn=format_row(row)) from None


def _check_overlap(cfg, k: int, j: int, mine, theirs, rows, half) -> None:
    """Instructions k and j ran at the same time on the two compute units, let through by the
    interlock because their first micro-ops write different accumulator halves. Each half is a
    bank with one read and one write port, so each instruction must keep every accumulator
    row it reads or writes in its own half."""
    for idx, fp in ((k, mine), (j, theirs)):
        own = half(idx)
        for verb, touched in (("reads", fp.reads), ("writes", fp.writes)):
            if touched.get("acc") is None:
                continue
            acc = _rows(touched["acc"])
            stray = acc[acc // cfg.acc_bank_rows != own]
            if stray.size:
                other = j if idx == k else k
                raise HazardError(
                    f"runs on one compute unit while instruction {other} "
                    f"({format_row(rows[other])}) runs on the other: their first micro-ops "
                    f"write different accumulator banks, so the interlock let them overlap, "
                    f"but instruction {idx} {verb} acc row {int(stray[0])}, outside its bank "
                    f"(rows {own * cfg.acc_bank_rows}..{(own + 1) * cfg.acc_bank_rows - 1}); "
                    f"keep each instruction's accumulator rows in its first micro-op's bank, "
                    f"or order the two",
                    index=k,
                    insn=format_row(rows[k]),
                )


def _rows(rows) -> np.ndarray:
    return np.arange(*rows) if isinstance(rows, tuple) else np.asarray(rows)


def _validate(table: np.ndarray, words: np.ndarray, cfg: HwConfig) -> np.ndarray:
    """Stage of every instruction; IllegalInstructionError for what the hardware can't run
    (the whole table checked at once; the first bad instruction is then named)."""
    ops, mems = table["opcode"], table["mem"]
    load, store = ops == Opcode.LOAD, ops == Opcode.STORE
    stages = np.full(len(table), int(Stage.COMPUTE), np.int64)
    stages[load & np.isin(mems, (MemId.INP, MemId.WGT))] = Stage.LOAD
    stages[store] = Stage.STORE
    bad = ~np.isin(ops, list(Opcode._value2member_map_))
    bad |= load & ~np.isin(mems, LOAD_MEMS)
    bad |= store & (mems != MemId.OUT)
    bad |= (ops == Opcode.ALU) & ~np.isin(table["alu_op"], list(AluOp._value2member_map_))
    if not cfg.depthwise_window:
        bad |= ops == Opcode.DEPTHWISE
    for s in Stage:  # a flag with no queue on the instruction's stage
        for flag, q in {**POP_QUEUES[s], **PUSH_QUEUES[s]}.items():
            if q is None:
                bad |= (stages == s) & (table[flag] != 0)
    if bad.any():
        _name_invalid(table, words, int(np.argmax(bad)), cfg)
    return stages


def _name_invalid(table: np.ndarray, words: np.ndarray, first: int, cfg: HwConfig) -> None:
    """Raise the IllegalInstructionError of the first bad instruction."""
    ops, mems = table["opcode"], table["mem"]
    k = first
    op = int(ops[k])
    word = f"word 0x{int(words[k, 1]):016x}{int(words[k, 0]):016x}"
    if op not in Opcode._value2member_map_:
        valid = ", ".join(f"{o.name}={o.value}" for o in Opcode)
        raise IllegalInstructionError(f"unknown opcode {op} ({word}); valid: {valid}", index=k)
    if op == Opcode.LOAD and int(mems[k]) not in LOAD_MEMS:
        raise IllegalInstructionError(
            f"LOAD to memory id {int(mems[k])}; valid: UOP=0, WGT=1, INP=2, ACC=3", index=k
        )
    if op == Opcode.DEPTHWISE and not cfg.depthwise_window:
        raise IllegalInstructionError(
            f"DEPTHWISE ({word}) on config {cfg.tag}, which has no depthwise mode: run the "
            f"program on a config with depthwise_window > 0",
            index=k,
        )
    if op == Opcode.STORE and int(mems[k]) != MemId.OUT:
        raise IllegalInstructionError(f"STORE from memory id {int(mems[k])}; valid: OUT=4", index=k)
    if op == Opcode.ALU and int(table["alu_op"][k]) not in AluOp._value2member_map_:
        raise IllegalInstructionError(
            f"unknown ALU op {int(table['alu_op'][k])}; valid: "
            + ", ".join(f"{a.name}={a.value}" for a in AluOp),
            index=k,
        )
    s = stage_of(op, int(mems[k]))
    for flag, q in {**POP_QUEUES[s], **PUSH_QUEUES[s]}.items():
        if q is None and table[flag][k]:
            raise IllegalInstructionError(
                f"flag {flag} has no token queue on the {s.name.lower()} stage",
                index=k,
                insn=format_row(table[k]),
            )
    raise AssertionError(f"instruction {first} was found invalid but breaks no rule")


def _report(cfg, table, plan, engine, cycles, counts, events) -> SimReport:
    stages = {}
    for s in Stage:
        ks = engine.queues[s]
        stages[STAGE_NAMES[s]] = StageStats(
            instructions=len(ks),
            busy_cycles=int(sum(engine.end[k] - engine.start[k] for k in ks)),
            stall_cycles=int(engine.stall[s]),
        )
    moved = {"insn": len(table) * INSN_BYTES, "uop": 0, "inp": 0, "wgt": 0, "acc": 0, "out": 0}
    for k in range(len(table)):
        if plan.dram_bytes[k]:
            moved[BUFFER_NAMES[MemId(int(table["mem"][k]))]] += plan.dram_bytes[k]
    return SimReport(
        cycles=int(cycles),
        clock_mhz=cfg.clock_mhz,
        macs_per_cycle=cfg.macs_per_cycle,
        instructions=len(table),
        gemm_uops=int(counts["gemm"]),
        alu_uops=int(counts["alu"]),
        stages=stages,
        dram_bytes=moved,
        trace=chrome_trace(events, cfg.clock_mhz) if events is not None else None,
    )
