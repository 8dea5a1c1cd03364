"""Lowering of the epilogue: per-channel parameters kept in reserved accumulator rows, the ALU
passes over each accumulator tile, and the residual added through the GEMM with 0/1 selector
weights (which also widens it from int8). Mixed into lowering.ConvEmitter.

Per-channel vectors are prepared once in the prologue: `add` = bias * m + 2**(s-1) (so one
tensor ADD per tile does bias, and rounding), `mul` = the multipliers. Exact in 32-bit wrapping
arithmetic: (acc + bias) * m + r == acc * m + (bias * m + r) mod 2**32.
"""

from __future__ import annotations

from tilecraft.compiler.schedule import Tile
from tilecraft.hw.isa import Alu, AluOp, Gemm, Load, MemId, Uop


class EpilogueLowering:
    """Needs from its host: cfg, low, pb, insns, b, acc_slot, res_slot, param_bases (one per
    accumulator half the slots use), select_base, bias, mul, res, sel, offsets, res_blocks,
    m_imm, loop(), kernel()."""

    def _prologue(self) -> None:
        self.vecs, self.round_rows = [], []
        for param_base in self.param_bases:
            self._parameters(param_base)
            self.vecs.append(self.vec)
            self.round_rows.append(self.round_row)
        if self.sel is not None:
            n = len(self.offsets)
            self.insns.append(
                Load(
                    mem=MemId.WGT,
                    sram_base=self.select_base,
                    dram_base=self.pb.elem(self.sel, "wgt"),
                    y_size=1,
                    x_size=n,
                    x_stride=n,
                )
            )

    def _parameters(self, param_base: int) -> None:
        """Load and prepare one copy of the per-channel vectors at `param_base`."""
        low, ep = self.low, self.low.epilogue
        ocb = low.ocb
        base = {}
        for k, name in enumerate(low.param_vectors()):
            base[name] = param_base + k * ocb
        self.vec = base
        self.round_row = param_base + len(base) * ocb if low.needs_round_row() else None
        for name, buf in (("mul", self.mul), ("add", self.bias)):
            if buf is not None:
                self.insns.append(
                    Load(
                        mem=MemId.ACC,
                        sram_base=base[name],
                        dram_base=self.pb.elem(buf, "acc"),
                        y_size=1,
                        x_size=ocb,
                        x_stride=ocb,
                    )
                )
        if self.round_row is not None:
            r = self.round_row
            one = self.loop(("row", r), [Uop(r, r)])
            self.insns.append(Gemm(reset=True, **one))
            self.insns.append(Alu(op=AluOp.ADD, use_imm=True, imm=1, **one))
            self.insns.append(Alu(op=AluOp.SHR, use_imm=True, imm=-(ep.shift - 1), **one))
        if "add" in base:
            vec = (ocb, 1, 1, 0)
            if "mul" in base:
                fields = self.loop(
                    ("vec", base["add"], base["mul"]), [Uop(base["add"], base["mul"])], inner=vec
                )
                self.insns.append(Alu(op=AluOp.MUL, **fields))
            fields = self.loop(
                ("vec", base["add"], base["add"]), [Uop(base["add"], base["add"])], inner=vec
            )
            if self.m_imm is not None:
                self.insns.append(Alu(op=AluOp.MUL, use_imm=True, imm=self.m_imm, **fields))
            if 0 < ep.shift <= 15:
                self.insns.append(
                    Alu(op=AluOp.ADD, use_imm=True, imm=1 << (ep.shift - 1), **fields)
                )
            elif self.round_row is not None:
                fields = self.loop(
                    ("vec", base["add"], self.round_row),
                    [Uop(base["add"], self.round_row)],
                    inner=(ocb, 1, 0, 0),
                )
                self.insns.append(Alu(op=AluOp.ADD, **fields))

    def _tile_loop(self, tile: Tile, a: int, src: int, per_channel: bool) -> dict:
        dst = self.acc_slot[a]
        return self.loop(
            ("tile", dst, src, per_channel, tile.toc, tile.pix),
            [Uop(dst, src)],
            outer=(tile.toc, tile.pix, int(per_channel), 0),
            inner=(tile.pix, 1, 0, 0),
        )

    def _epilogue(self, tile: Tile, a: int) -> None:
        ep = self.low.epilogue
        copy = (a % 2) % len(self.vecs)  # slots alternate halves; parameters in slot a's half
        self.vec, self.round_row = self.vecs[copy], self.round_rows[copy]
        imm = self._tile_loop(tile, a, 0, False)

        def tensor(row: int, per_channel: bool = True):
            return self._tile_loop(tile, a, row + (tile.oc0 if per_channel else 0), per_channel)

        if "mul" in self.vec:
            self.insns.append(Alu(op=AluOp.MUL, **tensor(self.vec["mul"])))
        elif self.m_imm is not None:
            self.insns.append(Alu(op=AluOp.MUL, use_imm=True, imm=self.m_imm, **imm))
        if "add" in self.vec:
            self.insns.append(Alu(op=AluOp.ADD, **tensor(self.vec["add"])))
        elif 0 < ep.shift <= 15:
            self.insns.append(Alu(op=AluOp.ADD, use_imm=True, imm=1 << (ep.shift - 1), **imm))
        elif ep.shift:
            self.insns.append(Alu(op=AluOp.ADD, **tensor(self.round_row, per_channel=False)))
        if ep.shift:
            self.insns.append(Alu(op=AluOp.SHR, use_imm=True, imm=ep.shift, **imm))
        if ep.residual:
            self._residual(tile, a)
        self.insns.append(Alu(op=AluOp.MAX, use_imm=True, imm=ep.low, **imm))
        self.insns.append(Alu(op=AluOp.MIN, use_imm=True, imm=ep.high, **imm))

    def _residual(self, tile: Tile, a: int) -> None:
        cfg, low = self.cfg, self.low
        bo, bi = cfg.block_out, cfg.block_in
        lo, hi = tile.oc0 * bo, min((tile.oc0 + tile.toc) * bo, low.op.oc)
        blocks = list(range(lo // bi, (hi - 1) // bi + 1))
        base = self.res_slot[a % self.b.slots]
        plane = low.oh * low.ow
        first = self.pb.elem(self.res, "inp") + (tile.nb * self.res_blocks) * plane
        first += tile.oh0 * low.ow + tile.ow0
        if tile.tow == low.ow:
            self.insns.append(
                Load(
                    mem=MemId.INP,
                    sram_base=base,
                    dram_base=first + blocks[0] * plane,
                    y_size=len(blocks),
                    x_size=tile.pix,
                    x_stride=plane,
                )
            )
        else:
            for j, rb in enumerate(blocks):
                self.insns.append(
                    Load(
                        mem=MemId.INP,
                        sram_base=base + j * tile.pix,
                        dram_base=first + rb * plane,
                        y_size=tile.toh,
                        x_size=tile.tow,
                        x_stride=low.ow,
                    )
                )
        uops = []
        for o in range(tile.toc):
            ob = tile.oc0 + o
            for j, rb in enumerate(blocks):
                d = ob * bo - rb * bi
                if d in self.offsets and -bo < d < bi and ob * bo < low.op.oc:
                    uops.append(
                        Uop(
                            self.acc_slot[a] + o * tile.pix,
                            base + j * tile.pix,
                            self.select_base + self.offsets.index(d),
                        )
                    )
        key = ("residual", self.acc_slot[a], base, tile.oc0, tile.toc, tile.pix)
        bgn, end = self.kernel(key, lambda: uops)
        self.insns.append(
            Gemm(uop_bgn=bgn, uop_end=end, iter_out=1, iter_in=tile.pix, dst_in=1, src_in=1)
        )
