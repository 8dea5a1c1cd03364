"""Lowering of the epilogue: per-channel parameters kept in reserved accumulator rows, the ALU
passes over each accumulator tile, and the residual added through the GEMM with 0/1 selector
weights (which also widens it from int8).

Per-channel vectors are prepared once in the prologue: `add` = bias * m + 2**(s-1) (so one
tensor ADD per tile does bias and rounding), `mul` = the multipliers, `lo`/`hi` = the
accumulator bounds; a two-stage multiply adds `mul2`, and its `add` holds bias * m alone (the
rounding comes after the second product). Exact in 32-bit wrapping
arithmetic: (acc + bias) * m + r == acc * m + (bias * m + r) mod 2**32. Accumulator tiles
alternate between the banks, so the parameters have a copy in each bank a tile uses: an
epilogue reads its own bank's copy while the GEMM core works in the other bank.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.compiler.mapping.blocks import MappedConv
from tilecraft.compiler.mapping.clip import clip
from tilecraft.compiler.operator.kernels import UopKernels
from tilecraft.compiler.operator.schedule import Tile
from tilecraft.hw.config import ACC_BANKS, HwConfig
from tilecraft.hw.isa import Alu, AluOp, Gemm, Load, MemId, Uop
from tilecraft.hw.isa.formats import ITER_BITS
from tilecraft.hw.isa.requant import PARAM_ROWS
from tilecraft.ops import Multiplier


@dataclass(frozen=True)
class Slots:
    """Scratchpad row bases of a scheduled convolution: input windows, residual tiles and weight
    tiles per buffer slot, the residual selectors, accumulator tiles (alternating banks) and the
    copies of the epilogue's parameters (one per bank the tiles use)."""

    inp: tuple[int, ...]
    residual: tuple[int, ...]
    wgt: tuple[int, ...]
    select: int
    acc: tuple[int, ...]
    params: tuple[int, ...]


@dataclass(frozen=True)
class EpilogueDram:
    """DRAM addresses (in elements of the scratchpad each is loaded into) of the epilogue's
    tensors; None where the epilogue has no such step."""

    bias: int | None  # acc elements
    mul: int | None  # acc elements
    lo: int | None  # acc elements: the accumulator bounds
    hi: int | None
    mul2: int | None  # acc elements: the two-stage multiply's second multipliers
    residual: int | None  # inp elements
    residual_blocks: int  # BLOCK_IN-wide channel blocks of the residual tensor
    select: int | None  # wgt elements
    offsets: tuple[int, ...]  # lane offset of each selector matrix
    requant: int | None = None  # acc elements: the requantization unit's parameter rows


class EpilogueEmitter:
    """The epilogue's instructions for one scheduled convolution, from explicit inputs."""

    def __init__(
        self,
        cfg: HwConfig,
        low: MappedConv,
        slots: Slots,
        dram: EpilogueDram,
        kernels: UopKernels,
        tensor_multiplier: int | None,
    ):
        self.cfg, self.low, self.slots, self.dram = cfg, low, slots, dram
        self.kernels = kernels
        self.m_imm = tensor_multiplier
        self.ep = low.epilogue
        names = low.param_vectors()
        ocb = low.ocb
        # per copy: vector name -> first row, and the rounding row (if any)
        self.vectors = [{n: base + k * ocb for k, n in enumerate(names)} for base in slots.params]
        self.round_rows = [
            base + len(names) * ocb if low.round_row else None for base in slots.params
        ]

    # ---- once, before the first tile ---------------------------------------------------------
    def prologue(self) -> list:
        """The parameters, loaded (and prepared) once, and copied by the ALU into the other
        bank where tiles use both: a copy of a few hundred rows takes the ALU two passes of
        a row a cycle, where loading it again would hold the compute stage for the DRAM (a
        compute-stage LOAD waits for both units), which at a chain's junction is the path the
        next layer's first GEMM waits on. The last bank's copy is the one loaded: a copy
        writes the first tile's bank, so the GEMM core's first instruction, which writes
        there too, waits for it (the banks' interlock), and nothing runs beside it in the
        bank it reads."""
        *others, loaded = self.slots.params  # the last bank's copy: the others copy it
        rows = self.low.param_rows()
        if not rows or rows >= 1 << ITER_BITS:  # nothing to copy, or more than a loop holds
            others = []
        if self.ep.on_unit:  # a copy in each bank a tile uses: the unit reads a STORE's bank
            addr, banks = self.dram.requant, [loaded] if others else self.slots.params
            out = [Load(mem=MemId.ACC, sram_base=b, dram_base=addr, y_size=1, x_size=rows,
                        x_stride=rows) for b in banks]  # fmt: skip
        else:
            out = []
            pairs = list(zip(self.vectors, self.round_rows))
            for vec, round_row in pairs[-1:] if others else pairs:
                out += self._parameters(vec, round_row)
        for base in others:
            zero = self.kernels.loop(("copy", base, base), [Uop(base, base)], inner=(rows, 1, 1, 0))
            copy = self.kernels.loop(
                ("copy", base, loaded), [Uop(base, loaded)], inner=(rows, 1, 1, 0)
            )
            out.append(Alu(op=AluOp.SHR, use_imm=True, imm=-self.cfg.acc_bits, **zero))
            out.append(Alu(op=AluOp.ADD, **copy))
        if self.dram.select is not None:
            n = len(self.dram.offsets)
            out.append(
                Load(
                    mem=MemId.WGT,
                    sram_base=self.slots.select,
                    dram_base=self.dram.select,
                    y_size=1,
                    x_size=n,
                    x_stride=n,
                )
            )
        return out

    def _parameters(self, vec: dict[str, int], round_row: int | None) -> list:
        """Load and prepare one copy of the per-channel vectors."""
        ocb, shift, k = self.low.ocb, self.ep.shift, self.kernels
        out = []
        loads = (
            ("lo", self.dram.lo),
            ("hi", self.dram.hi),
            ("mul", self.dram.mul),
            ("mul2", self.dram.mul2),
            ("add", self.dram.bias),
        )
        for name, addr in loads:
            if name in vec:
                out.append(
                    Load(
                        mem=MemId.ACC,
                        sram_base=vec[name],
                        dram_base=addr,
                        y_size=1,
                        x_size=ocb,
                        x_stride=ocb,
                    )
                )
        if round_row is not None:  # 2**(shift-1) = 1 << (shift-1), made in place
            one = k.loop(("row", round_row), [Uop(round_row, round_row)])
            out.append(Gemm(reset=True, **one))
            out.append(Alu(op=AluOp.ADD, use_imm=True, imm=1, **one))
            out.append(Alu(op=AluOp.SHR, use_imm=True, imm=-(shift - 1), **one))
        if "add" in vec:
            add = vec["add"]
            inner = (ocb, 1, 1, 0)
            if "mul" in vec:
                fields = k.loop(("vec", add, vec["mul"]), [Uop(add, vec["mul"])], inner=inner)
                out.append(Alu(op=AluOp.MUL, **fields))
            fields = k.loop(("vec", add, add), [Uop(add, add)], inner=inner)
            if self.m_imm is not None:
                out.append(Alu(op=AluOp.MUL, use_imm=True, imm=self.m_imm, **fields))
            late = self.ep.pre_shift > 0  # rounded after the second product, per tile
            if shift and round_row is None and not late:
                out.append(Alu(op=AluOp.ADD, use_imm=True, imm=1 << (shift - 1), **fields))
            elif round_row is not None and not late:
                fields = k.loop(
                    ("vec", add, round_row), [Uop(add, round_row)], inner=(ocb, 1, 0, 0)
                )
                out.append(Alu(op=AluOp.ADD, **fields))
        return out

    # ---- per tile ----------------------------------------------------------------------------
    def tile_loop(self, tile: Tile, a: int, src: int, per_channel: bool, row: int = 0) -> dict:
        """An ALU loop over every accumulator of `tile` in slot `a` (from the slot's row `row`
        on), reading `src` (a row, or a per-channel vector's first row) when the op takes a
        tensor operand."""
        dst = self.slots.acc[a] + row
        return self.kernels.loop(
            ("tile", dst, src, per_channel, tile.toc, tile.pix),
            [Uop(dst, src)],
            outer=(tile.toc, tile.pix, int(per_channel), 0),
            inner=(tile.pix, 1, 0, 0),
        )

    def store_fields(self, oc0: int, a: int, per_row: bool = False, row: int = 0) -> dict:
        """A STORE's requantization fields for channel blocks from `oc0` (each row of the
        transfer a block of its own with `per_row`) of the tile in accumulator slot `a` (the
        parameters' copy in its bank), its data from the slot's row `row` on; or none without
        the unit. With a residual, the unit adds it from the residual's INP slot, whose row
        p of block o lies where the tile's accumulator row does (`_residual_loads`)."""
        if not self.ep.on_unit:
            return {}
        copy = (a % ACC_BANKS) % len(self.slots.params)
        base = self.slots.params[copy] + len(PARAM_ROWS) * oc0
        fields = {"requant": True, "param_base": base, "param_per_row": per_row}
        if self.ep.residual:
            fields["residual"] = True
            fields["residual_base"] = self.slots.residual[a % len(self.slots.residual)] + row
        return fields

    def tile(self, tile: Tile, a: int, row: int = 0) -> list:
        """The epilogue of the tile in accumulator slot `a` (its accumulators from the slot's
        row `row` on: a part of a larger tile); none where the requantization unit does it on
        the way out (`store_fields`): then only the loads of its residual, if any."""
        ep = self.ep
        if ep.on_unit:
            return self._residual_loads(tile, a) if ep.residual else []
        copy = (a % ACC_BANKS) % len(self.vectors)  # the copy in slot a's bank
        vec, round_row = self.vectors[copy], self.round_rows[copy]
        imm = self.tile_loop(tile, a, 0, False, row)

        def tensor(src: int, per_channel: bool = True) -> dict:
            src += tile.oc0 if per_channel else 0
            return self.tile_loop(tile, a, src, per_channel, row)

        out = []
        if ep.acc_bounds:
            out.append(Alu(op=AluOp.MAX, **tensor(vec["lo"])))
            out.append(Alu(op=AluOp.MIN, **tensor(vec["hi"])))
        if "mul" in vec:
            out.append(Alu(op=AluOp.MUL, **tensor(vec["mul"])))
        elif ep.multiplier == Multiplier.TENSOR:
            out.append(Alu(op=AluOp.MUL, use_imm=True, imm=self.m_imm, **imm))
        if "add" in vec:
            out.append(Alu(op=AluOp.ADD, **tensor(vec["add"])))
        if ep.pre_shift:
            out.append(Alu(op=AluOp.SHR, use_imm=True, imm=ep.pre_shift, **imm))
            out.append(Alu(op=AluOp.MUL, **tensor(vec["mul2"])))
        rounded = "add" in vec and not ep.pre_shift  # the bias vector carries the rounding
        if ep.shift and not rounded and round_row is None:
            out.append(Alu(op=AluOp.ADD, use_imm=True, imm=1 << (ep.shift - 1), **imm))
        elif ep.shift and not rounded:
            out.append(Alu(op=AluOp.ADD, **tensor(round_row, per_channel=False)))
        if ep.shift:
            out.append(Alu(op=AluOp.SHR, use_imm=True, imm=ep.shift, **imm))
        if ep.residual:
            out += self._residual(tile, a)
        if ep.offset:
            out.append(Alu(op=AluOp.ADD, use_imm=True, imm=ep.offset, **imm))
        if ep.final_clip:
            out += clip(ep.low, ep.high, **imm)
        return out

    def _residual_blocks(self, tile: Tile) -> list[int]:
        """The residual's BLOCK_IN-wide channel blocks that `tile`'s output blocks take."""
        bo, bi = self.cfg.block_out, self.cfg.block_in
        lo, hi = tile.oc0 * bo, min((tile.oc0 + tile.toc) * bo, self.low.op.oc)
        return list(range(lo // bi, (hi - 1) // bi + 1))

    def _residual_loads(self, tile: Tile, a: int) -> list:
        """The LOADs of `tile`'s residual into its INP slot: block j's rows from
        slot + j * tile.pix, in the tile's pixel order."""
        low, dram = self.low, self.dram
        blocks = self._residual_blocks(tile)
        base = self.slots.residual[a % len(self.slots.residual)]
        plane = low.oh * low.ow
        first = dram.residual + (tile.nb * dram.residual_blocks) * plane
        first += tile.oh0 * low.ow + tile.ow0
        out = []
        if tile.tow == low.ow:
            out.append(
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
                out.append(
                    Load(
                        mem=MemId.INP,
                        sram_base=base + j * tile.pix,
                        dram_base=first + rb * plane,
                        y_size=tile.toh,
                        x_size=tile.tow,
                        x_stride=low.ow,
                    )
                )
        return out

    def _residual(self, tile: Tile, a: int) -> list:
        """The residual added on the GEMM core: its loads, then one GEMM of 0/1 selectors."""
        cfg, low, dram = self.cfg, self.low, self.dram
        bo, bi = cfg.block_out, cfg.block_in
        blocks = self._residual_blocks(tile)
        base = self.slots.residual[a % len(self.slots.residual)]
        out = self._residual_loads(tile, a)
        acc = self.slots.acc[a]
        uops = []
        for o in range(tile.toc):
            ob = tile.oc0 + o
            for j, rb in enumerate(blocks):
                d = ob * bo - rb * bi
                if d in dram.offsets and -bo < d < bi and ob * bo < low.op.oc:
                    uops.append(
                        Uop(
                            acc + o * tile.pix,
                            base + j * tile.pix,
                            self.slots.select + dram.offsets.index(d),
                        )
                    )
        key = ("residual", acc, base, tile.oc0, tile.toc, tile.pix)
        bgn, end = self.kernels.get(key, lambda: uops)
        out.append(Gemm(uop_bgn=bgn, uop_end=end, iter_out=1, iter_in=tile.pix, dst_in=1, src_in=1))
        return out
