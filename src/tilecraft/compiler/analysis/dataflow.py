"""The verifier's dataflow rule: every output a conv2d or dense program stores was accumulated
from exactly the products its operator needs.

Tokens and hazards say *when* rows are read; this says *what* they hold. The check follows each
scratchpad row's provenance through the program, statically: a LOAD fills input and weight
rows with named tensor elements (or zero padding); a GEMM adds, into an accumulator row, the
product of an input row and a weight row, recorded as one tap (input channel block, kernel row,
kernel column) of that accumulator row; a GEMM reset, an ALU that clears (x * 0, a full-width
left shift) and a LOAD into the accumulator start the row afresh. At each STORE, every output
element's accumulator row must hold, for every tap whose input position lies inside the image,
the very input element the convolution reads there (not one left behind by an earlier tile),
each tap once, with weights of the output's channel block; taps on padding hold padding or
nothing. Products with other weights (the residual's selector matrices) are not the layer's
taps and are left to the other rules.

Under a max pool taken on the accumulators (`Computation.pool`), an ALU instruction with a
tensor operand combines rows: its destination then holds the convolution outputs both held
(each a complete accumulator, checked as a STORE's is, when it is first combined), and each
pooled output stored must hold exactly its window's outputs inside the image.

The rule needs what the program computes (`Program.computation`) and the layouts the compiler
stores its tensors in; programs without them (random programs, the example GEMM) skip it.
"""

from __future__ import annotations

import math

import numpy as np

from tilecraft.compiler.mapping.blocks import MappedConv, map_conv2d, map_dense, map_depthwise
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import AluOp, IsaSpec, MemId, Opcode, isa_for
from tilecraft.hw.timing import depthwise_outputs
from tilecraft.ops import Conv2d, Dense, DepthwiseConv2d
from tilecraft.runtime.layout import Weight
from tilecraft.runtime.program import Program

NONE, PAD, OTHER = -1, -2, -3  # what a row holds besides an element of the layer's tensor
NO_TAP = -9  # an accumulator row's tap that has received no product
EMPTY = np.iinfo(np.int64).max  # a combined row's unused member slot (sorts last)


def dataflow_problem(program: Program, table: np.ndarray, uops: np.ndarray):
    """None, or (instruction index, message) for the first STORE or GEMM that breaks the rule."""
    low = _mapped(program)
    if low is None:
        return None
    return _Flow(program, low, table, uops).run()


def _mapped(program: Program) -> MappedConv | None:
    c = program.computation
    names = {b.name for b in program.buffers}
    if c is None or not {"input", "weight", "output"} <= names:
        return None
    if isinstance(c.op, Dense):
        return map_dense(program.config, c.op, c.epilogue)
    if isinstance(c.op, DepthwiseConv2d):
        return map_depthwise(program.config, c.op, c.epilogue)
    if isinstance(c.op, Conv2d):
        layout = program.buffer("weight").layout
        folded = isinstance(layout, Weight) and layout.folded
        return map_conv2d(program.config, c.op, c.epilogue, folded, c.pool)
    return None


class _Flow:
    def __init__(self, program: Program, low: MappedConv, table, uops):
        cfg: HwConfig = program.config
        self.cfg, self.low, self.table, self.uops = cfg, low, table, uops
        self.spec: IsaSpec = isa_for(cfg)
        self.uop_region = program.uop_offset // cfg.uop_bytes
        self.tensor = {
            kind: _Tensor(program, name, kind)
            for kind, name in (("inp", "input"), ("wgt", "weight"), ("out", "output"))
        }
        self.rows = {b: np.full(cfg.depth(b), NONE, np.int64) for b in ("inp", "wgt")}
        self.sram_uops = np.zeros((cfg.depth("uop"), 3), np.int64)
        kh, kw = low.kernel
        self.taps = low.icb * kh * kw
        self.acc = np.full((cfg.depth("acc"), self.taps), NO_TAP, np.int64)
        self.acc_block = np.full(cfg.depth("acc"), NONE, np.int64)  # output channel block
        # under a pool: the convolution outputs (`_position` ids) a combined row holds
        self.window = low.pool.kernel[0] * low.pool.kernel[1] if low.pool else 0
        self.members = np.full((cfg.depth("acc"), self.window), EMPTY, np.int64)

    def run(self):
        names = self.table.dtype.names
        for k, values in enumerate(self.table.tolist()):
            r = dict(zip(names, values))  # plain ints: a numpy record's fields are slow to read
            op = r["opcode"]
            problem = None
            if op == Opcode.LOAD:
                self._load(r)
            elif op == Opcode.GEMM:
                problem = self._gemm(r)
            elif op == Opcode.DEPTHWISE:
                problem = self._depthwise(r)
            elif op == Opcode.ALU:
                problem = self._alu(r)
            elif op == Opcode.STORE:
                problem = self._store(r)
            if problem:
                return k, problem
        return None

    # ---- what rows hold -----------------------------------------------------------------------
    def _load(self, r) -> None:
        mem, x, y = int(r["mem"]), int(r["x_size"]), int(r["y_size"])
        if x == 0:
            return
        p = {f: int(r[f]) for f in ("y_pad0", "y_pad1", "x_pad0", "x_pad1")}
        width = p["x_pad0"] + x + p["x_pad1"]
        yy = np.arange(p["y_pad0"] + y + p["y_pad1"])[:, None] - p["y_pad0"]
        xx = np.arange(width)[None, :] - p["x_pad0"]
        rows = (int(r["sram_base"]) + np.arange(yy.size * width)).reshape(yy.size, width)
        data = (yy >= 0) & (yy < y) & (xx >= 0) & (xx < x)
        dram = int(r["dram_base"]) + yy * int(r["x_stride"]) + xx
        if mem == MemId.UOP:
            self._fill_uops(rows, dram, data)
        elif mem == MemId.ACC:
            self.acc[rows.reshape(-1)] = NO_TAP
            self.acc_block[rows.reshape(-1)] = NONE
        elif mem in (MemId.INP, MemId.WGT):
            kind = "inp" if mem == MemId.INP else "wgt"
            held = np.where(data, self.tensor[kind].element(dram), PAD)
            self.rows[kind][rows.reshape(-1)] = held.reshape(-1)

    def _fill_uops(self, rows, dram, data) -> None:
        self.sram_uops[rows.reshape(-1)] = 0
        src = (dram - self.uop_region)[data]
        cols = np.stack([self.uops["dst"][src], self.uops["src"][src], self.uops["wgt"][src]], 1)
        self.sram_uops[rows[data]] = cols

    def _loop(self, r, column: int, out: str, inner: str) -> np.ndarray:
        bgn, end = int(r["uop_bgn"]), int(r["uop_end"])
        i = np.arange(int(r["iter_out"]))[:, None, None]
        j = np.arange(int(r["iter_in"]))[None, :, None]
        base = self.sram_uops[bgn:end, column][None, None, :]
        return (base + i * int(r[out]) + j * int(r[inner])).reshape(-1)

    def _restart(self, rows: np.ndarray) -> None:
        self.acc[rows] = NO_TAP
        self.acc_block[rows] = NONE
        self.members[rows] = EMPTY

    def _alu(self, r) -> str | None:
        op, imm = int(r["alu_op"]), int(r["imm"])
        clears = op == AluOp.MUL and imm == 0
        clears |= op == AluOp.SHR and self.spec.shr_amount(imm) <= -self.cfg.acc_bits
        if int(r["use_imm"]) and clears:
            self._restart(self._loop(r, 0, "dst_out", "dst_in"))
        elif self.window and not int(r["use_imm"]):
            return self._combine(self._loop(r, 0, "dst_out", "dst_in"),
                                 self._loop(r, 1, "src_out", "src_in"))  # fmt: skip
        return None

    # ---- under a pool: rows combined --------------------------------------------------------
    def _combine(self, dst: np.ndarray, src: np.ndarray) -> str | None:
        """An ALU tensor op under a pool, micro-op by micro-op in order: the destination holds
        what it and the source held (a parameter row holds nothing)."""
        for rows in (dst, src):
            problem = self._settle(np.unique(rows))
            if problem:
                return problem
        blocks_d, blocks_s = self.acc_block[dst], self.acc_block[src]
        clash = (blocks_d != NONE) & (blocks_s != NONE) & (blocks_d != blocks_s)
        if clash.any():
            at = int(np.flatnonzero(clash)[0])
            return (
                f"combines acc row {int(src[at])} (output channel block {int(blocks_s[at])}) into "
                f"acc row {int(dst[at])} (output channel block {int(blocks_d[at])})"
            )
        if np.unique(dst).size == dst.size and not np.isin(dst, src).any():
            return self._merge(dst, src)  # every micro-op independent of the others: at once
        for d, s_ in zip(dst.tolist(), src.tolist()):  # in order: a row may be a later source
            problem = self._merge(np.array([d]), np.array([s_]))
            if problem:
                return problem
        return None

    def _merge(self, dst: np.ndarray, src: np.ndarray) -> str | None:
        both = np.sort(np.concatenate([self.members[dst], self.members[src]], axis=1), axis=1)
        both[:, 1:][both[:, 1:] == both[:, :-1]] = EMPTY  # each output once
        both = np.sort(both, axis=1)
        count = (both != EMPTY).sum(axis=1)
        if (count > self.window).any():
            at = int(np.argmax(count))
            return (
                f"combines {int(count[at])} convolution outputs into acc row {int(dst[at])}: "
                f"more than a window's {self.window}"
            )
        self.members[dst] = both[:, : self.window]
        self.acc_block[dst] = np.where(
            self.acc_block[dst] == NONE, self.acc_block[src], self.acc_block[dst]
        )
        return None

    def _settle(self, rows: np.ndarray) -> str | None:
        """Rows about to be combined that still hold taps: each must be one convolution output,
        complete; from now on it holds that output's id among its members."""
        raw = (self.acc[rows] != NO_TAP).any(axis=1)
        rows = rows[raw]
        if not rows.size:
            return None
        held = self.acc[rows]
        element = held >= 0
        if not element.any(axis=1).all():
            at = int(rows[np.argmin(element.any(axis=1))])
            return f"combines acc row {at}, which holds no product with the layer's input"
        low = self.low
        (kh, kw), (sh, sw), (ph, pw) = low.kernel, low.stride, low.pad
        t = np.argmax(element, axis=1)
        ib, ki, kj = np.unravel_index(t, (low.icb, kh, kw))
        nb, _, ih, iw = self.tensor["inp"].coords(held[np.arange(rows.size), t])
        oh, ow = (ih + ph - ki) // sh, (iw + pw - kj) // sw
        ob = self.acc_block[rows]
        problem = self._check_outputs(rows, nb, ob, oh, ow, "combines")
        if problem:
            return problem
        self.acc[rows] = NO_TAP
        self.members[rows] = EMPTY
        self.members[rows, 0] = ((nb * low.ocb + ob) * low.oh + oh) * low.ow + ow
        return None

    def _pooled_store(self, rows, nb, ob, py, px) -> str | None:
        """Each pooled output's row must hold its window's convolution outputs, no other."""
        pool, low = self.low.pool, self.low
        (kh, kw), (sh, sw), (pt, pl, _, _) = pool.kernel, pool.stride, pool.pads
        i, j = np.unravel_index(np.arange(self.window), (kh, kw))
        y = py[:, None] * sh - pt + i[None, :]
        x = px[:, None] * sw - pl + j[None, :]
        inside = (y >= 0) & (y < low.oh) & (x >= 0) & (x < low.ow)
        ids = ((nb[:, None] * low.ocb + ob[:, None]) * low.oh + y) * low.ow + x
        need = np.sort(np.where(inside, ids, EMPTY), axis=1)
        wrong = (self.members[rows] != need).any(axis=1)
        if not wrong.any():
            return None
        k = int(np.argmax(wrong))
        held = self.members[rows[k]]
        return (
            f"stores pooled output (batch block {int(nb[k])}, channel block {int(ob[k])}, row "
            f"{int(py[k])}, column {int(px[k])}) from acc row {int(rows[k])}, which holds "
            f"convolution outputs {held[held != EMPTY].tolist()}, not its window's "
            f"{need[k][need[k] != EMPTY].tolist()}"
        )

    def _gemm(self, r) -> str | None:
        acc = self._loop(r, 0, "dst_out", "dst_in")
        if int(r["reset"]):
            self._restart(acc)
            return None
        inp = self.rows["inp"][self._loop(r, 1, "src_out", "src_in")]
        wgt = self.rows["wgt"][self._loop(r, 2, "wgt_out", "wgt_in")]
        mine = wgt >= 0  # products with the layer's weights; others are not its taps
        if not mine.any():
            return None
        acc, inp, wgt = acc[mine], inp[mine], wgt[mine]
        ob, ib, kh, kw = self.tensor["wgt"].coords(wgt)
        foreign = (inp == OTHER) | (inp == NONE)
        if foreign.any():
            return (
                f"multiplies the layer's weights into acc row {int(acc[foreign][0])} with an "
                f"input row that holds no element of the layer's input"
            )
        cb = self.tensor["inp"].coords(np.maximum(inp, 0))[1]
        want = ib + ob if self.low.grouped else ib  # a depthwise block reads its own channels
        wrong = (inp >= 0) & (cb != want)
        if wrong.any():
            at = int(np.flatnonzero(wrong)[0])
            return (
                f"multiplies input channel block {int(cb[at])} with weights for input channel "
                f"block {int(want[at])} into acc row {int(acc[at])}"
            )
        tap = (ib * self.low.kernel[0] + kh) * self.low.kernel[1] + kw
        taken = self.acc[acc, tap] != NO_TAP
        key = acc * self.taps + tap
        key.sort()
        if taken.any() or (key[1:] == key[:-1]).any():
            row = acc[np.argmax(taken)] if taken.any() else acc[0]
            return f"adds a product for the same tap twice into acc row {int(row)}"
        blocks = self.acc_block[acc]
        clash = (blocks != NONE) & (blocks != ob)
        if clash.any():
            at = int(np.flatnonzero(clash)[0])
            return (
                f"adds weights of output channel block {int(ob[at])} into acc row {int(acc[at])}, "
                f"which holds output channel block {int(blocks[at])}"
            )
        self.acc[acc, tap] = inp
        self.acc_block[acc] = ob
        return None

    def _depthwise(self, r) -> str | None:
        """A DEPTHWISE starts its output rows afresh with every tap of their windows: tap
        (ky, kx) of output (oy, ox) is the plane's row (oy * sy + ky, ox * sx + kx), multiplied
        by weight elements that must be the layer's, of one channel block, in tap order."""
        k, passes = self.cfg.depthwise_window, self.cfg.depthwise_passes
        rows, cols = int(r["in_rows"]), int(r["in_cols"])
        sy, sx = int(r["stride_y"]), int(r["stride_x"])
        oh, ow = depthwise_outputs(k, r)
        acc = int(r["acc_base"]) + np.arange(oh * ow)
        self._restart(acc)
        wgt = self.rows["wgt"][int(r["wgt_base"]) + np.arange(passes)]
        if (wgt < 0).any():
            return "runs DEPTHWISE with weight rows that hold no element of the layer's weights"
        ob, _, _, part = self.tensor["wgt"].coords(wgt)
        if (ob != ob[0]).any() or (part != np.arange(passes)).any():
            return (
                f"runs DEPTHWISE with weight elements {wgt.tolist()}: not one channel block's "
                f"{passes} in order"
            )
        plane = self.rows["inp"][int(r["inp_base"]) + np.arange(rows * cols)].reshape(rows, cols)
        for ky in range(k):
            for kx in range(k):
                held = plane[ky : ky + (oh - 1) * sy + 1 : sy, kx : kx + (ow - 1) * sx + 1 : sx]
                held = held.reshape(-1)
                if ((held == OTHER) | (held == NONE)).any():
                    return (
                        f"runs DEPTHWISE over an input row that holds no element of the layer's "
                        f"input (tap {ky},{kx})"
                    )
                cb = self.tensor["inp"].coords(np.maximum(held, 0))[1]
                if ((held >= 0) & (cb != ob[0])).any():
                    return (
                        f"runs DEPTHWISE with channel block {int(ob[0])}'s weights over input "
                        f"channel block {int(cb[np.argmax(cb != ob[0])])}"
                    )
                self.acc[acc, ky * k + kx] = held
        self.acc_block[acc] = ob[0]
        return None

    # ---- what an output must hold -------------------------------------------------------------
    def _store(self, r) -> str | None:
        x, y = int(r["x_size"]), int(r["y_size"])
        if x == 0 or y == 0:
            return None
        rows = int(r["sram_base"]) + np.arange(x * y)
        dram = (
            int(r["dram_base"]) + np.arange(y)[:, None] * int(r["x_stride"]) + np.arange(x)[None, :]
        ).reshape(-1)
        out = self.tensor["out"].element(dram)
        keep = out >= 0
        rows, out = rows[keep], out[keep]
        if not rows.size:
            return None
        nb, ob, oh, ow = self.tensor["out"].coords(out)
        blocks = self.acc_block[rows]
        clash = (blocks != NONE) & (blocks != ob)
        if clash.any():
            at = int(np.flatnonzero(clash)[0])
            return (
                f"stores acc row {int(rows[at])}, accumulated with weights of output channel "
                f"block {int(blocks[at])}, as output channel block {int(ob[at])}"
            )
        if self.window:
            return self._pooled_store(rows, nb, ob, oh, ow)
        return self._check_outputs(rows, nb, ob, oh, ow, "stores")

    def _check_outputs(self, rows, nb, ob, oh, ow, verb: str) -> str | None:
        """Each acc row must hold every tap of its convolution output (nb, ob, oh, ow): the input
        element the convolution reads there, padding on padding."""
        low = self.low
        (kh, kw), (sh, sw), (ph, pw) = low.kernel, low.stride, low.pad
        ib, ki, kj = np.unravel_index(np.arange(self.taps), (low.icb, kh, kw))
        ih = oh[:, None] * sh - ph + ki[None, :]
        iw = ow[:, None] * sw - pw + kj[None, :]
        inside = (ih >= 0) & (ih < low.h) & (iw >= 0) & (iw < low.w)
        h, w = low.h, low.w
        block = ib[None, :] + (ob[:, None] if low.grouped else 0)
        need = ((nb[:, None] * low.input_blocks + block) * h + ih) * w + iw
        held = self.acc[rows]
        wrong = np.where(inside, held != need, (held != NO_TAP) & (held != PAD))
        if not wrong.any():
            return None
        i, t = (int(v[0]) for v in np.nonzero(wrong))
        where = (
            f"output (batch block {int(nb[i])}, channel block {int(ob[i])}, row {int(oh[i])}, "
            f"column {int(ow[i])}) from acc row {int(rows[i])}"
        )
        tap = f"tap (input channel block {int(ib[t])}, kernel {int(ki[t])},{int(kj[t])})"
        if not inside[i, t]:
            return f"{verb} {where}: its {tap} lies in the padding but holds an input element"
        if held[i, t] == NO_TAP:
            return f"{verb} {where} without its {tap}"
        if held[i, t] == PAD:
            return (
                f"{verb} {where}: its {tap} multiplied padding, not input row {int(ih[i, t])} "
                f"column {int(iw[i, t])}"
            )
        got = self.tensor["inp"].coords(np.array([held[i, t]]))
        return (
            f"{verb} {where}: its {tap} multiplied input row {int(got[2][0])} column "
            f"{int(got[3][0])} (a row left from another tile?), not row {int(ih[i, t])} column "
            f"{int(iw[i, t])}"
        )


class _Tensor:
    """A tensor's elements (scratchpad-row sized) by DRAM element address: their index in the
    tensor's first four stored dimensions, or OTHER for addresses outside it."""

    def __init__(self, program: Program, name: str, kind: str):
        buf = program.buffer(name)
        size = program.config.elem_bytes(kind)
        self.first = buf.offset // size
        self.shape = tuple(buf.shape[:4])
        self.count = math.prod(self.shape)

    def element(self, dram: np.ndarray) -> np.ndarray:
        rel = np.asarray(dram) - self.first
        return np.where((rel >= 0) & (rel < self.count), rel, OTHER)

    def coords(self, element: np.ndarray):
        return np.unravel_index(element, self.shape)
