"""What each instruction of a program touches, worked out statically (no data needed).

`accesses` walks the instruction table in program order, keeps the micro-op scratchpad's
contents up to date from LOAD UOP instructions (micro-op words come from the program's own
micro-op region), and yields one `Access` per instruction: its stage, the scratchpad rows it
reads and writes, and the DRAM bytes it reads and writes. Out-of-range indices are reported as
`problems` rather than raised, so the verifier can name every rule an instruction breaks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from tilecraft.hw.config import SCRATCHPADS, HwConfig
from tilecraft.hw.isa import BUFFER_NAMES, AluOp, IsaSpec, MemId, Opcode, Stage, isa_for, stage_of
from tilecraft.hw.isa.formats import DW_STRIDES
from tilecraft.hw.isa.requant import PARAM_ROWS
from tilecraft.hw.timing import depthwise_outputs


@dataclass
class Access:
    index: int
    stage: Stage
    reads: dict[str, np.ndarray] = field(default_factory=dict)
    writes: dict[str, np.ndarray] = field(default_factory=dict)
    dram_reads: list[tuple[int, int]] = field(default_factory=list)  # byte ranges [lo, hi)
    dram_writes: list[tuple[int, int]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    first_dst: int | None = None  # GEMM/ALU: the accumulator row of the first micro-op


def accesses(
    cfg: HwConfig, table: np.ndarray, uops: np.ndarray, uop_region: int
) -> Iterator[Access]:
    """`table`: decoded instructions; `uops`: the micro-op table (dst, src, wgt columns) stored
    at DRAM element `uop_region` (in micro-op elements). The scratchpad rows of identical
    loops and loads are worked out once and shared (read-only) between their accesses: a
    program repeats a handful of shapes thousands of times."""
    depth = {b: cfg.depth(b) for b in SCRATCHPADS}
    sram_uops = {c: np.zeros(depth["uop"], np.int64) for c in ("dst", "src", "wgt")}
    spec = isa_for(cfg)
    names = table.dtype.names
    shapes: dict[tuple, tuple] = {}  # footprint key -> (reads, writes, first_dst, problems)
    generation = 0  # bumped by every LOAD UOP: loops read the micro-ops loaded since
    for k, values in enumerate(table.tolist()):
        r = dict(zip(names, values))
        op, mem = r["opcode"], r["mem"]
        a = Access(k, stage_of(op, mem))
        if op == Opcode.LOAD:
            _load(cfg, r, mem, depth, a, shapes)
            if mem == MemId.UOP and not a.problems and r["x_size"]:
                _fill_uops(cfg, r, uops, uop_region, sram_uops, a)
                generation += 1
        elif op == Opcode.STORE:
            _store(cfg, r, depth, a)
        elif op in (Opcode.GEMM, Opcode.ALU):
            key = (generation, op) + tuple(r[f] for f in _LOOP_FIELDS)
            if key not in shapes:
                _loop(r, op, depth, sram_uops, a, spec)
                shapes[key] = _frozen(a)
            a.reads, a.writes, a.first_dst, a.problems = _shared(shapes[key])
        elif op == Opcode.DEPTHWISE:
            _depthwise(cfg, r, depth, a)
        yield a


def footprint_key(cfg: HwConfig, table: np.ndarray) -> np.ndarray:
    """`table` reduced to what its footprints depend on: every field, but an ALU immediate only
    as whether it clears the row (`_clears`). Layers of one shape differ in their
    requantization's immediates alone, so they share one key."""
    key = table.copy()
    spec = isa_for(cfg)
    alu = np.flatnonzero((table["opcode"] == Opcode.ALU) & (table["use_imm"] != 0))
    key["imm"] = 0
    key["imm"][alu] = [
        _clears(op, imm, spec)
        for op, imm in zip(table["alu_op"][alu].tolist(), table["imm"][alu].tolist())
    ]
    return key


_LOOP_FIELDS = (
    "uop_bgn",
    "uop_end",
    "iter_out",
    "iter_in",
    "dst_out",
    "dst_in",
    "src_out",
    "src_in",
    "wgt_out",
    "wgt_in",
    "reset",
    "alu_op",
    "use_imm",
    "imm",
)


def _frozen(a: Access) -> tuple:
    for rows in (*a.reads.values(), *a.writes.values()):
        rows.flags.writeable = False
    return a.reads, a.writes, a.first_dst, a.problems


def _shared(shape: tuple) -> tuple:
    """A cached footprint for one more access: its own dicts and list, the same row arrays."""
    reads, writes, first_dst, problems = shape
    return dict(reads), dict(writes), first_dst, list(problems)


def _load(cfg, r, mem, depth, a: Access, shapes: dict) -> None:
    name = BUFFER_NAMES[mem]  # an IntEnum key: a plain int finds it
    x, y = r["x_size"], r["y_size"]
    if x == 0:
        return
    width = r["x_pad0"] + x + r["x_pad1"]
    count = width * (r["y_pad0"] + y + r["y_pad1"])
    base = r["sram_base"]
    if base + count > depth[name]:
        a.problems.append(
            f"writes {name} rows [{base}, {base + count}) beyond its {depth[name]} rows"
        )
        return
    key = (name, base, count)
    if key not in shapes:
        rows = np.arange(base, base + count)
        rows.flags.writeable = False
        shapes[key] = rows
    a.writes[name] = shapes[key]
    eb = cfg.elem_bytes(name)
    a.dram_reads.extend(_dram_rows(r, eb))


def _store(cfg, r, depth, a: Access) -> None:
    x, y = r["x_size"], r["y_size"]
    if x == 0 or y == 0:
        return
    base, count = r["sram_base"], x * y
    if base + count > depth["acc"]:
        a.problems.append(f"reads out rows [{base}, {base + count}) beyond its {depth['acc']} rows")
        return
    a.reads["acc"] = np.arange(base, base + count)
    if r["residual"] and not r["requant"]:
        a.problems.append("adds a residual without requant: only the requantization unit adds one")
        return
    if r["requant"]:  # its parameter rows (hw/isa/requant.py)
        sets = y if r["param_per_row"] else 1
        params = r["param_base"] + np.arange(sets * len(PARAM_ROWS))
        if params[-1] >= depth["acc"]:
            a.problems.append(
                f"reads requant param rows [{params[0]}, {params[-1] + 1}) beyond its "
                f"{depth['acc']} rows"
            )
            return
        a.reads["acc"] = np.concatenate([a.reads["acc"], params])
        if r["residual"]:  # its residual's INP rows, one per data row
            rows = r["residual_base"] + np.arange(count)
            if rows[-1] >= depth["inp"]:
                a.problems.append(
                    f"reads residual inp rows [{rows[0]}, {rows[-1] + 1}) beyond its "
                    f"{depth['inp']} rows"
                )
                return
            a.reads["inp"] = rows
    if r["to_inp"]:  # its rows into INP rows from dram_base, x_stride apart (no DRAM)
        rows = (r["dram_base"] + r["x_stride"] * np.arange(y)[:, None] + np.arange(x)).ravel()
        if rows.max() >= depth["inp"]:
            a.problems.append(
                f"writes inp rows up to {int(rows.max())} beyond its {depth['inp']} rows"
            )
            return
        a.writes["inp"] = np.unique(rows)
        return
    a.dram_writes.extend(_dram_rows(r, cfg.elem_bytes("out")))


def _dram_rows(r, eb: int) -> list[tuple[int, int]]:
    x, y, stride, start = (
        r["x_size"],
        r["y_size"],
        r["x_stride"],
        r["dram_base"],
    )
    if x == 0 or y == 0:
        return []
    if stride == x or y == 1:
        return [(start * eb, (start + (y - 1) * stride + x) * eb)]
    return [((start + i * stride) * eb, (start + i * stride + x) * eb) for i in range(y)]


def _depthwise(cfg: HwConfig, r, depth, a: Access) -> None:
    """A DEPTHWISE reads its plane and its weight elements, and writes (does not read) its
    outputs (sim/semantics.py `depthwise`)."""
    k = cfg.depthwise_window
    if not k:
        a.problems.append(f"is a DEPTHWISE, but config {cfg.tag} has no depthwise mode")
        return
    rows, cols = r["in_rows"], r["in_cols"]
    out_rows, out_cols = depthwise_outputs(k, r)
    strides = (r["stride_y"], r["stride_x"])
    if out_rows == 0 or out_cols == 0 or not set(strides) <= set(DW_STRIDES):
        a.problems.append(
            f"plane {rows}x{cols} with stride {strides}: a DEPTHWISE needs at least the {k}x{k} "
            f"window and strides in {DW_STRIDES}"
        )
        return
    a.first_dst = r["acc_base"]
    read = (out_rows - 1) * r["stride_y"] + k  # the plane's rows its windows read
    spans = (
        ("inp", r["inp_base"], read * cols, a.reads),
        ("wgt", r["wgt_base"], cfg.depthwise_passes, a.reads),
        ("acc", r["acc_base"], out_rows * out_cols, a.writes),
    )
    for buf, base, count, where in spans:
        if base + count > depth[buf]:
            a.problems.append(
                f"{'writes' if where is a.writes else 'reads'} {buf} rows [{base}, "
                f"{base + count}) beyond its {depth[buf]} rows"
            )
            return
        where[buf] = np.arange(base, base + count)


def _fill_uops(cfg, r, uops, uop_region, sram_uops, a: Access) -> None:
    first = r["dram_base"] - uop_region
    x, y, stride = r["x_size"], r["y_size"], r["x_stride"]
    src = (first + np.arange(y)[:, None] * stride + np.arange(x)[None, :]).reshape(-1)
    if src.size and (first < 0 or src.max() >= len(uops)):
        a.problems.append(
            f"loads micro-ops {first}..{int(src.max())} but the program's micro-op region holds "
            f"{len(uops)} (0..{len(uops) - 1})"
        )
        return
    dst = a.writes["uop"]
    width = r["x_pad0"] + x + r["x_pad1"]
    # padded micro-op rows are zero micro-ops; copy only the data rows
    rows = (
        r["sram_base"]
        + (r["y_pad0"] + np.arange(y)[:, None]) * width
        + r["x_pad0"]
        + np.arange(x)[None, :]
    ).reshape(-1)
    for col in ("dst", "src", "wgt"):
        sram_uops[col][dst] = 0
        sram_uops[col][rows] = uops[col][src]


def _distinct(rows: np.ndarray, depth: int) -> np.ndarray:
    """`rows` (all below `depth`) without repeats, ascending: a mark per scratchpad row, no
    sort (a loop visits few distinct rows many times)."""
    if rows.size < 64:
        return np.unique(rows)
    marks = np.zeros(depth, bool)
    marks[rows] = True
    return np.flatnonzero(marks)


def _clears(op: int, imm: int, spec: IsaSpec) -> bool:
    """x * 0, and a left shift by the full lane width (SHR by -bits), give 0 whatever x is."""
    if op == AluOp.MUL:
        return imm == 0
    return op == AluOp.SHR and spec.shr_amount(imm) <= -spec.config.acc_bits


def _loop(r, op, depth, sram_uops, a: Access, spec: IsaSpec) -> None:
    bgn, end = r["uop_bgn"], r["uop_end"]
    if not bgn < end <= depth["uop"]:
        a.problems.append(
            f"micro-op range [{bgn}, {end}) is empty or beyond the {depth['uop']}-entry buffer"
        )
        return
    a.reads["uop"] = np.arange(bgn, end)
    a.first_dst = int(sram_uops["dst"][bgn])
    i = np.arange(r["iter_out"], dtype=np.int64)[:, None, None]
    j = np.arange(r["iter_in"], dtype=np.int64)[None, :, None]

    def idx(col: str, out: str, inner: str) -> np.ndarray:
        """The rows the loop visits, in loop order (repeats included)."""
        base = sram_uops[col][bgn:end][None, None, :]
        return (base + i * r[out] + j * r[inner]).reshape(-1)

    dst = idx("dst", "dst_out", "dst_in")
    if dst.size and dst.max() >= depth["acc"]:
        a.problems.append(f"dst index {int(dst.max())} is beyond the {depth['acc']} acc rows")
        return
    dst = _distinct(dst, depth["acc"])
    a.writes["acc"] = dst
    if op == Opcode.GEMM:
        if r["reset"]:
            return
        a.reads["acc"] = dst
        for buf, col, out, inner in (
            ("inp", "src", "src_out", "src_in"),
            ("wgt", "wgt", "wgt_out", "wgt_in"),
        ):
            rows = idx(col, out, inner)
            if rows.size and rows.max() >= depth[buf]:
                a.problems.append(
                    f"{col} index {int(rows.max())} is beyond the {depth[buf]} {buf} rows"
                )
                return
            a.reads[buf] = _distinct(rows, depth[buf])
        return
    if r["use_imm"] and _clears(r["alu_op"], r["imm"], spec):
        return  # the result does not depend on the row: it initializes it
    reads = [dst]
    if not r["use_imm"]:
        src = idx("src", "src_out", "src_in")
        if src.size and src.max() >= depth["acc"]:
            a.problems.append(f"src index {int(src.max())} is beyond the {depth['acc']} acc rows")
            return
        reads.append(src)
    a.reads["acc"] = _distinct(np.concatenate(reads), depth["acc"])
