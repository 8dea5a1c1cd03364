"""A dot-product conv's weights packed once for its register tile (`dot_conv.DotConv2d`'s
`packed` input): in numpy (`DotWeights.pack`, what the cpu device runs: no kernel to compile)
or as a kernel (inside an unpacked conv, or alone)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from llvmlite import ir

from tilecraft.compiler.llvm.irgen import I8, I32, Kernel
from tilecraft.compiler.llvm.spec import Buffer, Spec, positive_shape
from tilecraft.errors import KernelError

GROUPS = {"vnni": 4, "neon": 2}  # input channels a word holds, the sum each lane adds


@dataclass(frozen=True)
class DotWeights(Spec):
    """A dot-product conv's weights (`shape` (OC, C, KH, KW) int8) packed for `form`: wq, the
    weights regrouped G input channels a word (pad channels zero) in blocks of `rows` output
    channels, (OC / rows, C / G, KH, KW, rows, G), so that a register tile's words of one tap
    lie side by side (pad output channels zero); for vnni also wsum, 128 x each output
    channel's weight sum (wrapping), the bias correction; for neon wpair, 1 if no weight is
    -128 (the paired taps are exact), else 0. Run once per weight tensor when the
    caller keeps the result (`DotConv2d(packed=True)`), or inside the conv."""

    shape: tuple[int, int, int, int]
    form: str = "vnni"
    rows: int = 4
    kind: ClassVar[str] = "conv2d_dot_weights"

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape("dot weights", self.shape, 4))
        if self.form not in GROUPS:
            raise KernelError(f"dot-product form {self.form!r}; valid: {', '.join(GROUPS)}")
        if isinstance(self.rows, bool) or not 1 <= int(self.rows) <= 16:
            raise KernelError(f"dot weights come in blocks of 1-16 rows, not {self.rows!r}")

    def buffers(self):
        oc, c, kh, kw = self.shape
        group, rows = GROUPS[self.form], self.rows
        out = [
            Buffer("weight", self.shape, "int8"),
            Buffer("wq", (-(-oc // rows), -(-c // group), kh, kw, rows, group), "int8", "out"),
        ]
        if self.form == "vnni":
            out.append(Buffer("wsum", (oc,), "int32", "out"))
        else:  # 1 if no weight is -128: two words' products may be added in 16 bits
            out.append(Buffer("wpair", (1,), "int32", "out"))
        return tuple(out)

    def pack(self, weight: np.ndarray) -> tuple[np.ndarray, ...]:
        """What the kernel computes, in numpy (the cpu device packs a model's weights so, once,
        and compiles no packing kernel: its first run is that much shorter)."""
        oc, c_count, kh, kw = self.shape
        if weight.shape != self.shape or weight.dtype != np.int8:
            raise KernelError(
                f"dot weights take int8 {self.shape}, not {weight.dtype} {weight.shape}"
            )
        group, rows = GROUPS[self.form], self.rows
        blocks, groups = -(-oc // rows), -(-c_count // group)
        padded = np.zeros((blocks * rows, groups * group, kh, kw), np.int8)
        padded[:oc, :c_count] = weight
        grid = padded.reshape(blocks, rows, groups, group, kh, kw)
        wq = np.ascontiguousarray(grid.transpose(0, 2, 4, 5, 1, 3))
        if self.form == "vnni":  # 128 x the weight sum, wrapping as the kernel's int32 does
            total = weight.reshape(oc, -1).sum(axis=1, dtype=np.int64) << 7
            return wq, total.astype(np.int32)  # numpy's cast wraps, as int32 does
        return wq, np.array([int(weight.min(initial=0) > -128)], np.int32)

    def emit(self, k: Kernel) -> None:
        b = k.b
        oc, c_count, kh, kw = self.shape
        group, rows = GROUPS[self.form], self.rows
        taps, groups, blocks = kh * kw, -(-c_count // group), -(-oc // rows)
        if c_count % group or oc % rows:
            with k.loop(blocks * groups * taps * rows * group, name="wz") as i:
                k.store(ir.Constant(I8, 0), k.arg["wq"], i)
        with k.loop(oc, name="wo") as o:
            total = k.local(I32)
            b.store(ir.Constant(I32, 0), total)
            block, row = b.udiv(o, k.i(rows)), b.urem(o, k.i(rows))
            with k.loop(c_count, name="wc") as c, k.loop(taps, name="wt") as t:
                w = k.load(
                    k.arg["weight"],
                    I8,
                    b.add(b.mul(b.add(b.mul(o, k.i(c_count)), c), k.i(taps)), t),
                )
                g, lane = b.udiv(c, k.i(group)), b.urem(c, k.i(group))
                word = b.add(b.mul(b.add(b.mul(block, k.i(groups)), g), k.i(taps)), t)
                word = b.add(b.mul(word, k.i(rows)), row)
                k.store(w, k.arg["wq"], b.add(b.mul(word, k.i(group)), lane))
                b.store(b.add(b.load(total), b.sext(w, I32)), total)
            if self.form == "vnni":
                k.store(b.shl(b.load(total), ir.Constant(I32, 7)), k.arg["wsum"], o)
        if self.form == "neon":  # wpair: no weight is -128 (a loop of its own: vectorised)
            lowest = k.local(I8)
            b.store(ir.Constant(I8, 127), lowest)
            with k.loop(oc * c_count * taps, name="wm") as i:
                w, least = k.load(k.arg["weight"], I8, i), b.load(lowest)
                b.store(b.select(b.icmp_signed("<", w, least), w, least), lowest)
            fits = b.icmp_signed("!=", b.load(lowest), ir.Constant(I8, -128))
            k.store(b.zext(fits, I32), k.arg["wpair"], k.i(0))
