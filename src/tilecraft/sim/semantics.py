"""What each instruction does, one function per kind: the ISA's executable spec.

Each function takes the machine and one decoded instruction (a dict-like row), mutates the
machine, and returns the scratchpad rows it read and wrote (for the race checker). One GEMM or ALU
instruction's whole micro-op loop runs as numpy array operations.

Rules beyond the ISA summary in docs/ARCHITECTURE.md:
- accumulator arithmetic wraps at the accumulator width (two's complement);
- SHR takes its amount from the low log_acc_width+1 bits of the operand, read as signed:
  amount >= 0 is an arithmetic right shift, amount < 0 a left shift by -amount (so for 32-bit
  lanes the amount is in [-32, 31], and a left shift by 32 gives 0);
- CLIP clamps to [lo, hi] read from the low 16 bits of its operand as two signed bytes (hi in
  bits 0-7, lo in 8-15): min(max(x, lo), hi), so hi wins where lo > hi;
- STORE narrows each lane by truncation to its low out_bits (VTA's rule; saturate with CLIP, or
  MIN/MAX); a STORE with `requant` (configs with a requantization unit) requantizes each lane
  instead (`ops.requant.requantize`, onnxruntime's float32 arithmetic) with the parameters of
  accumulator rows param_base.. (hw/isa/requant.py: bias, scale, zero point and clip; lane c of
  the first batch row holds channel c's); its data rows and parameter rows lie in one bank (the
  unit reads them through that bank's read port, sim/engine.py);
- a STORE with `residual` (configs with `requant_residual`; with `requant` only) adds INP
  row residual_base + i, int8 lane for lane, to its data row i after the unit's rounding;
- a STORE with `to_inp` (configs with `store_to_inp`; with `requant` only) writes its
  requantized rows into INP rows dram_base + y * x_stride + x instead of DRAM;
- a LOAD with x_size = 0 moves nothing and pads nothing (it only carries tokens);
- a LOAD pads with zeros, an INP LOAD with `pad_value` in every lane (other memories ignore it);
- GEMM and ALU run their loop in the order i (outer), j (inner), micro-op; an ALU instruction
  whose micro-ops read a row an earlier micro-op of the same instruction wrote sees the new value;
- DEPTHWISE (configs with `depthwise_window` K) writes each window's sum, lane by lane, over
  the accumulator rows it names (no reset needed, nothing added to what was there); taps of
  its last weight element past K*K are not read, nor plane rows below its last window; its
  strides are 1 or 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tilecraft.errors import AccessError, IllegalInstructionError
from tilecraft.hw.isa import BUFFER_NAMES, AluOp, IsaSpec, MemId, clip_bounds
from tilecraft.hw.isa.formats import DW_STRIDES
from tilecraft.hw.isa.requant import PARAM_ROWS, SIGNIFICAND_BITS, unpack_clip, unpack_scale
from tilecraft.hw.timing import depthwise_outputs
from tilecraft.ops.requant import ScaleFields, requantize
from tilecraft.sim.machine import Machine


@dataclass
class Footprint:
    """Scratchpad rows an instruction touched: buffer name -> index array or (lo, hi) range."""

    reads: dict
    writes: dict


NOTHING = Footprint({}, {})


def load(m: Machine, r) -> Footprint:
    mem = MemId(r["mem"])
    name = BUFFER_NAMES[mem]
    if r["x_size"] == 0:
        return NOTHING
    cfg = m.config
    eb = cfg.elem_bytes(name)
    width = r["x_pad0"] + r["x_size"] + r["x_pad1"]
    height = r["y_pad0"] + r["y_size"] + r["y_pad1"]
    base, count = r["sram_base"], width * height
    _check_sram(name, base, count, cfg.depth(name))
    sram = m.sram(name)
    y, x = r["y_size"], r["x_size"]
    raw = _dram_rows(m, r["dram_base"] * eb, y, x * eb, r["x_stride"] * eb)
    data = raw.view(sram.dtype.newbyteorder("<")).reshape((y, x) + sram.shape[1:])
    if count == x * y:  # no padding
        sram[base : base + count].reshape(data.shape)[...] = data
    else:
        block = sram[base : base + count].reshape((height, width) + sram.shape[1:])
        block[...] = int(r["pad_value"]) if mem == MemId.INP else 0  # others pad with zeros
        y0, x0 = r["y_pad0"], r["x_pad0"]
        block[y0 : y0 + y, x0 : x0 + x] = data
    if mem == MemId.UOP:
        _decode_uops(m, base, count)
    elif mem == MemId.INP:
        m.inp_f[base : base + count] = m.inp[base : base + count]
    elif mem == MemId.WGT:
        m.wgt_f[base : base + count] = m.wgt[base : base + count]
    return Footprint({}, {name: (base, base + count)})


def store(m: Machine, r) -> Footprint:
    cfg = m.config
    y, x = r["y_size"], r["x_size"]
    base, count = r["sram_base"], x * y
    if count == 0:
        return NOTHING
    _check_sram("out", base, count, cfg.depth("acc"))
    eb = cfg.elem_bytes("out")
    values = m.acc[base : base + count]
    reads = {"acc": (base, base + count)}
    if r["requant"]:
        per_row = x if r["param_per_row"] else count
        banks = {cfg.acc_bank(base), cfg.acc_bank(base + count - 1)}
        if len(banks) > 1:
            raise AccessError(
                f"STORE with requant: its rows {base}..{base + count - 1} cross the accumulator's "
                f"bank boundary (banks of {cfg.acc_bank_rows} rows); the unit reads one bank"
            )
        res_rows = _residual_rows(m, r, count)
        res = None if res_rows is None else m.inp[res_rows].astype(np.int64)
        values, params = _requantized(m, values, r["param_base"], per_row, banks.pop(), res)
        reads = {"acc": np.concatenate([np.arange(base, base + count), params])}
        if res_rows is not None:
            reads["inp"] = res_rows
    elif r["residual"]:
        raise IllegalInstructionError(
            "STORE with residual without requant: only the requantization unit adds a residual"
        )
    if r["to_inp"]:
        return Footprint(reads, {"inp": _store_inp(m, r, values)})
    rows = values.astype(m.out_dtype).view(np.uint8).reshape(y, x * eb)
    start, stride = r["dram_base"] * eb, r["x_stride"] * eb
    _check_dram(m, start, y, x * eb, stride)
    if stride >= x * eb and start + y * stride <= m.dram.size:
        m.dram[start : start + y * stride].reshape(y, stride)[:, : x * eb] = rows
    elif r["x_stride"] >= x:  # the last row's stride runs past DRAM's end
        as_strided(m.dram[start:], shape=(y, x * eb), strides=(stride, 1))[...] = rows
    else:  # overlapping rows: later rows win
        for k in range(y):
            m.dram[start + k * stride : start + k * stride + x * eb] = rows[k]
    return Footprint(reads, {})


def _store_inp(m: Machine, r, values: np.ndarray) -> np.ndarray:
    """A STORE's requantized rows into INP (`to_inp`): row y's elements to INP rows
    dram_base + y * x_stride + x (later rows win where they overlap); the rows written."""
    cfg = m.config
    if not r["requant"]:
        raise IllegalInstructionError(
            "STORE into INP without requant: only the requantization unit's rows go into INP"
        )
    if not cfg.store_to_inp:
        raise IllegalInstructionError(
            f"STORE into INP on config {cfg.tag}, which has no path from STORE into INP "
            f"(store_to_inp = 0)"
        )
    y, x = r["y_size"], r["x_size"]
    rows = (r["dram_base"] + r["x_stride"] * np.arange(y)[:, None] + np.arange(x)).ravel()
    _check_index("inp", rows, cfg.depth("inp"), "STORE into INP")
    m.inp[rows] = values.astype(m.inp.dtype).reshape(m.inp[rows].shape)
    m.inp_f[rows] = m.inp[rows]
    return rows


def _residual_rows(m: Machine, r, count: int) -> np.ndarray | None:
    """The INP rows a requantizing STORE's residual add reads (`residual`): row
    residual_base + i for its data row i; None without one."""
    if not r["residual"]:
        return None
    cfg = m.config
    if not cfg.requant_residual:
        raise IllegalInstructionError(
            f"STORE with residual on config {cfg.tag}, which has no residual add in its "
            f"requantization unit (requant_residual = 0)"
        )
    rows = r["residual_base"] + np.arange(count)
    _check_index("inp", rows, cfg.depth("inp"), "STORE residual")
    return rows


def _requantized(
    m: Machine,
    values: np.ndarray,
    param_base: int,
    per_set: int,
    bank: int,
    residual: np.ndarray | None = None,
):
    """Accumulator rows `values` (rows, batch, block_out) requantized, each run of `per_set`
    rows with the next three parameter rows from `param_base` (and `residual`, int8 rows
    shaped like `values`, added after the rounding); and those rows' indices."""
    if not m.config.requant_lanes:
        raise IllegalInstructionError(
            f"STORE with requant on config {m.config.tag}, which has no requantization unit"
        )
    sets = len(values) // per_set
    params = param_base + np.arange(sets * len(PARAM_ROWS))
    _check_index("acc", params, m.config.depth("acc"), "requant param")
    cfg = m.config
    if len({cfg.acc_bank(int(params[0])), cfg.acc_bank(int(params[-1])), bank}) > 1:
        raise AccessError(
            f"STORE with requant: its parameter rows {int(params[0])}..{int(params[-1])} and its "
            f"data rows (bank {bank}) lie in more than one accumulator bank (banks of "
            f"{cfg.acc_bank_rows} rows); the unit reads one bank"
        )
    rows = m.acc[params][:, 0].astype(np.int64).reshape(sets, len(PARAM_ROWS), -1)
    bias, scale, clip = (np.repeat(rows[:, k], per_set, axis=0)[:, None] for k in range(3))
    significand, exponent = unpack_scale(scale)
    if significand.min() < 1 << (SIGNIFICAND_BITS - 1):
        k = int(np.argmin(significand.min(axis=(1, 2)))) // per_set
        raise IllegalInstructionError(
            f"requant param row {param_base + 3 * k + 1}: a scale significand below 2**23 "
            f"({int(significand.min())}) is not a normalized float32"
        )
    zero, lo, hi = unpack_clip(clip)
    if np.any(lo > hi):
        row, _, c = np.unravel_index(np.argmax(lo > hi), lo.shape)
        raise IllegalInstructionError(
            f"requant param row {param_base + 3 * (row // per_set) + 2}, lane {c}: clip "
            f"[{int(lo[row, 0, c])}, {int(hi[row, 0, c])}] is empty"
        )
    v = values.astype(np.int64) + bias
    fields = ScaleFields(significand, exponent)
    return requantize(v, fields, zero, lo, hi, residual=residual), params


def gemm(m: Machine, r) -> Footprint:
    plan = _plan(m, r, _gemm_plan)
    if plan.reset is not None:
        m.acc[plan.reset] = 0
        return plan.footprint
    inp, wts, bi = m.inp_f, m.wgt_f, m.config.block_in
    shape = m.acc.shape[1:]
    for src, wgt, rows, unique in plan.matmuls:
        if wgt.size == 1:
            x, w = inp[src].reshape(-1, bi), wts[wgt[0]].T
        else:
            x = inp[src].transpose(0, 2, 1, 3).reshape(-1, wgt.size * bi)
            w = wts[wgt].transpose(0, 2, 1).reshape(wgt.size * bi, -1)
        _accumulate(m.acc, rows, (x @ w).reshape((-1,) + shape), unique)
    if plan.batched is not None:
        src, wgt, rows = plan.batched
        _accumulate(m.acc, rows, np.matmul(inp[src], wts[wgt].transpose(0, 2, 1)), False)
    return plan.footprint


@dataclass(frozen=True)
class _GemmPlan:
    """How a GEMM's loop goes, worked out from its fields and the micro-ops alone (never the
    data): its footprint and its products as matmuls, each (src rows, weight tiles, the
    accumulator rows it adds to, whether those are distinct; rows are a slice where they are
    one ascending range); `batched`, where nearly every step has its own weight tile: (src,
    wgt, accumulator rows) per step. A reset's plan has only the rows it zeroes (`reset`)."""

    reset: np.ndarray | slice | None
    footprint: Footprint
    matmuls: tuple = ()
    batched: tuple | None = None


def _gemm_plan(m: Machine, r) -> _GemmPlan:
    dst, src, wgt, n_uops = _loop_indices(m, r, with_wgt=True)
    cfg = m.config
    _check_index("acc", dst, cfg.depth("acc"), "dst")
    if r["reset"]:
        return _GemmPlan(_as_slice(dst), Footprint({}, {"acc": dst}))
    _check_index("inp", src, cfg.depth("inp"), "src")
    _check_index("wgt", wgt, cfg.depth("wgt"), "wgt")
    footprint = Footprint({"inp": src, "wgt": wgt, "acc": dst}, {"acc": dst})
    matmuls = []
    if dst.size == 0:  # a loop extent of 0: no step, as a reset's or an ALU's
        return _GemmPlan(None, footprint, ())
    if r["wgt_out"] == 0 and r["wgt_in"] == 0:
        # Each micro-op uses one weight tile for its whole loop, and micro-ops with one dst
        # write the same row at every step: one matmul per dst, over their tiles side by side.
        steps_dst, steps_src = dst.reshape(-1, n_uops), src.reshape(-1, n_uops)
        unique = _distinct(steps_dst[:, 0])
        for us in _same_dst(steps_dst[0], m.exact_uops):
            cols = _as_slice(steps_src[:, us[0]]) if us.size == 1 else steps_src[:, us]
            matmuls.append((cols, wgt[us], _as_slice(steps_dst[:, us[0]]), unique))
        return _GemmPlan(None, footprint, tuple(matmuls))
    order = np.argsort(wgt, kind="stable")
    keys, starts = np.unique(wgt[order], return_index=True)
    if keys.size * 4 > dst.size:  # little weight reuse: one batched matmul
        return _GemmPlan(None, footprint, batched=(src, wgt, dst))
    for key, a, b in zip(keys, starts, np.append(starts[1:], dst.size)):
        sel = order[a:b]
        d = dst[sel]
        matmuls.append((src[sel], np.array([key]), _as_slice(d), _distinct(np.sort(d))))
    return _GemmPlan(None, footprint, tuple(matmuls))


def _as_rows(rows) -> np.ndarray:
    """Rows given as a slice (`_as_slice`), as an array again."""
    return np.arange(rows.start, rows.stop) if isinstance(rows, slice) else rows


def _as_slice(rows: np.ndarray):
    """`rows` as a slice where they are one ascending range (a view, not a gather)."""
    span = int(rows[-1]) - int(rows[0]) + 1 if rows.size else 0
    if span == rows.size and span and (rows[1:] > rows[:-1]).all():  # one by one, in order
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def depthwise(m: Machine, r) -> Footprint:
    """The GEMM core's depthwise mode: acc[acc_base + oy * out_cols + ox][b, c] =
    sum over the window's taps (ky, kx) of inp[inp_base + (oy * sy + ky) * in_cols + ox * sx +
    kx][b, c] * tap (ky, kx) of channel c (insns.Depthwise)."""
    cfg = m.config
    k = cfg.depthwise_window
    if not k:
        raise IllegalInstructionError(
            f"DEPTHWISE on config {cfg.tag}, which has no depthwise mode (depthwise_window = 0)"
        )
    rows, cols, sy, sx = (int(r[f]) for f in ("in_rows", "in_cols", "stride_y", "stride_x"))
    if rows < k or cols < k or sy not in DW_STRIDES or sx not in DW_STRIDES:
        raise IllegalInstructionError(
            f"DEPTHWISE plane {rows}x{cols} with stride ({sy}, {sx}): the plane must be at least "
            f"the {k}x{k} window and each stride one of {DW_STRIDES}"
        )
    oh, ow = depthwise_outputs(k, r)
    inp, acc, wgt = int(r["inp_base"]), int(r["acc_base"]), int(r["wgt_base"])
    passes = cfg.depthwise_passes
    rows = (oh - 1) * sy + k  # the plane's rows its windows read (a row past them is not)
    _check_sram("inp", inp, rows * cols, cfg.depth("inp"))
    _check_sram("acc", acc, oh * ow, cfg.depth("acc"))
    _check_sram("wgt", wgt, passes, cfg.depth("wgt"))
    plane = m.inp[inp : inp + rows * cols].astype(np.int64).reshape((rows, cols) + m.inp.shape[1:])
    lanes = cfg.block_out
    taps = m.wgt[wgt : wgt + passes].astype(np.int64).transpose(1, 0, 2).reshape(lanes, -1)
    taps = taps[:, : k * k].reshape(lanes, k, k)
    total = np.zeros((oh, ow) + m.inp.shape[1:], np.int64)
    for ky in range(k):
        for kx in range(k):
            window = plane[ky : ky + (oh - 1) * sy + 1 : sy, kx : kx + (ow - 1) * sx + 1 : sx]
            total += window * taps[:, ky, kx]
    m.acc[acc : acc + oh * ow] = total.reshape((oh * ow,) + m.acc.shape[1:]).astype(m.acc.dtype)
    reads = {"inp": (inp, inp + rows * cols), "wgt": (wgt, wgt + passes)}
    return Footprint(reads, {"acc": (acc, acc + oh * ow)})


def alu(m: Machine, r) -> Footprint:
    op = _ALU_OPS.get(r["alu_op"])
    if op is None:
        raise IllegalInstructionError(f"unknown ALU op {r['alu_op']}")
    dst, src, sequential, footprint = _plan(m, r, _alu_plan)
    if sequential:  # micro-ops depend on each other: follow program order exactly
        dst, src = footprint.writes["acc"], None if src is None else _as_rows(src)
        for p in range(dst.size):
            b = r["imm"] if src is None else m.acc[src[p]]
            m.acc[dst[p]] = alu_lanes(op, m.acc[dst[p]], b, m.spec)
        return footprint
    b = r["imm"] if src is None else m.acc[src]
    if m.acc.dtype == np.int32 and m.config.acc_bits == 32 and op != AluOp.SHR:
        m.acc[dst] = _lanes32(op, m.acc[dst], b)
    elif src is None and op == AluOp.SHR and 0 <= m.spec.shr_amount(b) < m.config.acc_bits:
        m.acc[dst] >>= m.spec.shr_amount(b)  # an arithmetic right shift within the lane
    else:
        m.acc[dst] = alu_lanes(op, m.acc[dst], b, m.spec)
    return footprint


_ALU_OPS = {op.value: op for op in AluOp}


def _lanes32(op: AluOp, a: np.ndarray, b):
    """`alu_lanes` on int32 rows for every op but SHR: int32 arithmetic wraps as the lanes do."""
    if op == AluOp.ADD:
        return a + b
    if op == AluOp.MUL:
        return a * b
    if op == AluOp.MIN:
        return np.minimum(a, b)
    if op == AluOp.MAX:
        return np.maximum(a, b)
    lo, hi = clip_bounds(b)  # CLIP
    return np.minimum(np.maximum(a, lo), hi)


def _alu_plan(m: Machine, r) -> tuple:
    """An ALU loop's rows, from its fields and the micro-ops: dst and src (None with an
    immediate; each a slice where it is one ascending range), whether its steps depend on each
    other, and its footprint."""
    dst, src, _, _ = _loop_indices(m, r, with_wgt=False)
    depth = m.config.depth("acc")
    _check_index("acc", dst, depth, "dst")
    if r["use_imm"]:
        src = None
    else:
        _check_index("acc", src, depth, "src")
    reads = dst if src is None else np.concatenate([dst, src])
    sequential = _reads_earlier_writes(dst, src, depth)
    footprint = Footprint({"acc": reads}, {"acc": dst})
    return _as_slice(dst), None if src is None else _as_slice(src), sequential, footprint


_LOOP = itemgetter(
    *("uop_bgn", "uop_end", "iter_out", "iter_in", "dst_out", "dst_in", "src_out", "src_in"),
    *("wgt_out", "wgt_in", "reset", "use_imm"),
)


def _plan(m: Machine, r, make):
    """`make(m, r)`, kept on the machine by the loop's fields until micro-ops are loaded again:
    a loop's rows do not depend on data, and a layer's tiles repeat a few loops."""
    key = (make, _LOOP(r))
    plan = m.loop_plans.get(key)
    if plan is None:
        plan = m.loop_plans[key] = make(m, r)
    return plan


def _reads_earlier_writes(dst: np.ndarray, src: np.ndarray | None, depth: int) -> bool:
    """Whether an ALU instruction's micro-op steps depend on each other: a row written twice,
    or a step reading (`src`) a row an earlier step wrote."""
    if (dst[1:] > dst[:-1]).all():  # distinct and sorted, the common case: a binary search
        if src is None:
            return False
        at = np.minimum(np.searchsorted(dst, src), dst.size - 1)
        return bool(((dst[at] == src) & (at < np.arange(dst.size))).any())
    keys, first = np.unique(dst, return_index=True)
    if keys.size < dst.size or src is None:
        return keys.size < dst.size
    first_write = np.full(depth, dst.size, np.int64)
    first_write[keys] = first
    return bool((first_write[src] < np.arange(dst.size)).any())


def alu_lanes(op: AluOp, a, b, spec: IsaSpec):
    """`op` on accumulator lanes `a` and `b` (arrays or scalars), wrapping at the lane width."""
    dtype, bits = a.dtype, spec.config.acc_bits
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    if op == AluOp.MIN:
        res = np.minimum(a, b)
    elif op == AluOp.MAX:
        res = np.maximum(a, b)
    elif op == AluOp.ADD:
        res = a + b
    elif op == AluOp.MUL:
        res = a * b  # int32 x int32 fits int64; the cast below keeps the low bits
    elif op == AluOp.CLIP:
        lo, hi = clip_bounds(b)
        res = np.minimum(np.maximum(a, lo), hi)
    else:  # SHR: a signed amount; negative shifts left
        amount = spec.shr_amount(b)
        right = np.minimum(np.maximum(amount, 0), 63)
        left = np.maximum(-amount, 0)
        res = np.where(amount >= 0, a >> right, a << np.minimum(left, 63))
        res = np.where(left >= bits, 0, res)
    return res.astype(dtype)


def _same_dst(heads: np.ndarray, most: int) -> list[np.ndarray]:
    """The micro-ops grouped by their first step's dst, at most `most` in a group (what one
    matmul sums exactly: `machine.exact_uops`)."""
    if (heads == heads[0]).all():
        groups = [np.arange(heads.size)]
    elif _distinct(heads):
        return [np.array([u]) for u in range(heads.size)]
    else:
        _, group = np.unique(heads, return_inverse=True)
        groups = [np.flatnonzero(group == g) for g in range(group.max() + 1)]
    return [g[a : a + most] for g in groups for a in range(0, g.size, most)]


def _distinct(idx: np.ndarray) -> bool:
    """Whether no index repeats (strictly increasing, the common case, is checked first)."""
    return bool((idx[1:] > idx[:-1]).all()) or np.unique(idx).size == idx.size


def _accumulate(acc: np.ndarray, rows, prod: np.ndarray, unique: bool) -> None:
    """Add exact integer products (floats) into accumulator `rows`, wrapping at its width."""
    if unique and acc.dtype == np.int32 and prod.dtype == np.float32:
        # float32 products are exact below 2**24 (machine.exact_uops): int32 holds them, and
        # int32 addition wraps as the 32-bit lanes do
        acc[rows] += prod.astype(np.int32)
    elif unique:
        acc[rows] = (acc[rows] + prod.astype(np.int64)).astype(acc.dtype)
    else:  # rows repeat: each row's products summed first
        uniq, inverse = np.unique(rows, return_inverse=True)
        part = np.zeros((uniq.size,) + acc.shape[1:], np.int64)
        np.add.at(part, inverse.reshape(-1), prod.astype(np.int64))
        acc[uniq] = (acc[uniq] + part).astype(acc.dtype)


def _loop_indices(m: Machine, r, with_wgt: bool):
    """dst/src(/wgt) index of every (i, j, micro-op) step, flattened in execution order."""
    bgn, end = r["uop_bgn"], r["uop_end"]
    depth = m.config.depth("uop")
    if not bgn < end <= depth:
        raise AccessError(
            f"micro-op range [{bgn}, {end}) must be non-empty and within the {depth}-entry "
            f"micro-op buffer"
        )
    i = np.arange(r["iter_out"], dtype=np.int64)[:, None, None]
    j = np.arange(r["iter_in"], dtype=np.int64)[None, :, None]

    def indices(base, out, inner):
        return (base[bgn:end][None, None, :] + i * r[out] + j * r[inner]).reshape(-1)

    dst = indices(m.uop_dst, "dst_out", "dst_in")
    src = indices(m.uop_src, "src_out", "src_in")
    wgt = indices(m.uop_wgt, "wgt_out", "wgt_in") if with_wgt else None
    return dst, src, wgt, end - bgn


def _decode_uops(m: Machine, base: int, count: int) -> None:
    raw = m.uop_words[base : base + count].astype(np.uint64)
    for f in m.spec.uop:
        col = {"dst": m.uop_dst, "src": m.uop_src, "wgt": m.uop_wgt}[f.name]
        col[base : base + count] = (raw >> np.uint64(f.offset)) & np.uint64((1 << f.width) - 1)
    m.uops_loaded(base, count)  # the plans worked out from the micro-ops before are stale


def _check_sram(name: str, base: int, count: int, depth: int) -> None:
    if base + count > depth:
        raise AccessError(
            f"{name} rows [{base}, {base + count}) are outside the scratchpad "
            f"(valid 0..{depth - 1})"
        )


def _check_index(name: str, idx: np.ndarray, depth: int, what: str) -> None:
    top = int(idx.max()) if idx.size else 0
    if top >= depth:
        raise AccessError(
            f"{what} index {top} is outside the {name} scratchpad (valid 0..{depth - 1})"
        )


def _check_dram(m: Machine, start: int, rows: int, row_bytes: int, stride: int) -> None:
    end = start + (rows - 1) * stride + row_bytes if rows else start
    if end > m.dram.size:
        raise AccessError(
            f"DRAM bytes [{start}, {end}) are outside the mapped region of {m.dram.size} bytes"
        )


def _dram_rows(m: Machine, start: int, rows: int, row_bytes: int, stride: int) -> np.ndarray:
    """DRAM's `rows` rows of `row_bytes` bytes, `stride` bytes apart from byte `start`: a view
    where the rows do not overlap and the last one's stride stays within DRAM, else a copy."""
    _check_dram(m, start, rows, row_bytes, stride)
    if rows == 0:
        return np.zeros((0, row_bytes), np.uint8)
    if stride >= row_bytes and start + rows * stride <= m.dram.size:
        return m.dram[start : start + rows * stride].reshape(rows, stride)[:, :row_bytes]
    return as_strided(m.dram[start:], shape=(rows, row_bytes), strides=(stride, 1)).copy()
