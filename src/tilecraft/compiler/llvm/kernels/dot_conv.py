"""int8 convolution on the CPU's integer dot products, in one of two forms:

- `vnni` (x86 with AVX-512 VNNI or AVX-VNNI): `vpdpbusd` multiplies four unsigned bytes by four
  signed bytes and adds the four products to an int32 lane, 16 lanes an instruction on
  AVX-512 (64 multiply-adds), where the float datapath of `conv.Conv2d` does 16;
- `neon` (ARMv7 and AArch64 NEON: the boards' Cortex-A9 and A53): `vmull.s8` / `smull`
  multiplies eight signed bytes into eight 16-bit products, exactly, and `vpadal.s16` /
  `sadalp` adds them pairwise into four int32 lanes: 8 multiply-adds in two instructions,
  where the float datapath's `vmla.f32` does 4 in one after two conversions. Where no weight
  is -128 (as every symmetric quantizer leaves them: [-127, 127]), two words' products are
  added in 16 bits first (`vmlal.s8` / `smlal`: two products of such weights lie in
  [-32512, 32512]), so one pairwise widening add serves 16 multiply-adds, not 8; DotWeights
  says whether the weights allow it (`wpair`) and the kernel takes the paired taps or the
  single ones accordingly, so any weights give the reference's result.

The register tile, the stride phases and the q numbering are `conv.Conv2d`'s; what changes is
what a lane holds. The input's padded phase copy keeps G input channels of one position in one
word (G = 4 for vnni, 2 for neon; channels padded to a multiple of G, the weights of the pad
channels zero), so a vector load of NR consecutive positions is NR words, and a weight word
(G channels of one tap of one output channel) is broadcast to every lane.

`vpdpbusd` takes its first operand unsigned, so for vnni the input is stored biased, x + 128
(its top bit flipped), and the sum corrected by 128 x the output channel's weight sum:
sum (x + 128) w = sum x w + 128 sum w. The int32 lanes wrap, as `ops.reference.conv2d_acc`'s
accumulator does, and wrapping sums are exact modulo 2**32 in any order, so the result is the
reference's bit for bit. The epilogue is the accelerator's (`epilogue.emit`).

A network's convs of one kind (kernel, stride, pads, epilogue: their `family`) can share one
compiled kernel that reads their sizes from an input (`shared_code`, `irgen.Dims`): the JIT
compiles a uint8 ResNet-18's 11 convs as 4 kernels (`jit.Jit`), and its first run is that
much shorter. The kernels are vectorised and unrolled by hand, so LLVM's loop passes do not
run on them (`Spec.loop_passes`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import ClassVar

import numpy as np
from llvmlite import ir

from tilecraft.compiler.llvm.irgen import I8, I16, I32, Dims, Kernel, vec
from tilecraft.compiler.llvm.kernels import epilogue as E
from tilecraft.compiler.llvm.kernels.conv import Conv2d
from tilecraft.compiler.llvm.kernels.dot_weights import GROUPS, DotWeights
from tilecraft.compiler.llvm.spec import Buffer
from tilecraft.compiler.llvm.targets import Target
from tilecraft.errors import KernelError

LOOPED_EPILOGUE = 512  # products an output takes from which a tile's epilogue is a loop


def dot_form(target: Target) -> str | None:
    """The integer dot products `target` has: "vnni" (x86 with avx512vnni, or avxvnni at 8
    lanes), "neon" (ARMv7 or AArch64 with NEON), or None (AVX2-only x86, a GPU)."""
    features = set(target.features.split(","))
    arch = target.triple.split("-")[0]
    if arch == "x86_64":
        if "+avx512vnni" in features and target.vector_width in (4, 8, 16):
            return "vnni"
        if "+avxvnni" in features and target.vector_width == 8:
            return "vnni"
        return None
    if arch.startswith(("arm", "aarch64")) and "+neon" in features and target.vector_width == 4:
        return "neon"
    return None


def for_target(spec, target: Target):
    """The record to build for `target`: an int8 `conv.Conv2d` on integer dot products where
    the target has them, any other record as it is."""
    form = dot_form(target)
    if type(spec) is Conv2d and spec.dtype == "int8" and form:
        fields_ = {f.name: getattr(spec, f.name) for f in fields(spec)}
        paired = form == "neon" and target.paired_taps
        return DotConv2d(**fields_, form=form, rows=target.tile_rows, paired=paired)
    return spec


@dataclass(frozen=True)
class DotConv2d(Conv2d):
    """`conv.Conv2d`'s int8 convolution (the same fields and inputs) on integer dot products
    of `form` ("vnni" or "neon"); only for a target whose `dot_form` it is."""

    dtype: str = "int8"
    packed: bool = False  # takes the weights as `DotWeights` packs them (wq, and wsum)
    form: str = "vnni"
    rows: int = 4  # output channels of the register tile (the target's `tile_rows`)
    # neon: two words' products added in 16 bits before widening, where the weights allow
    # (DotWeights' wpair; the single words otherwise): the target's `paired_taps`
    paired: bool = False
    # the code of every conv of its `family`, the shape's integers read from a `dims` input
    # (the last), so that a network's convs of one kind compile once (`shared_code`)
    shared: bool = False
    kind: ClassVar[str] = "conv2d_dot"
    loop_passes: ClassVar[bool] = False  # the tiles and copies are vectors by hand

    def __post_init__(self):
        super().__post_init__()
        if self.dtype != "int8":
            raise KernelError(f"a dot-product conv2d is int8, not {self.dtype}")
        if self.form not in GROUPS:
            raise KernelError(f"dot-product form {self.form!r}; valid: {', '.join(GROUPS)}")
        if isinstance(self.rows, bool) or not 1 <= int(self.rows) <= 16:
            raise KernelError(f"a dot-product conv2d's tile has 1-16 rows, not {self.rows!r}")
        if self.shared and not self.packed:
            raise KernelError("a shared dot-product conv2d takes its weights packed")
        if self.paired and self.form != "neon":
            raise KernelError(
                f"paired taps add 16-bit products (neon); the {self.form} form has none"
            )

    @property
    def group(self) -> int:
        """Input channels a word holds."""
        return GROUPS[self.form]

    @property
    def groups(self) -> int:
        """Words of input channels (the last padded with zero weights)."""
        return -(-self.shape[1] // self.group)

    @property
    def word(self) -> ir.IntType:
        return ir.IntType(8 * self.group)

    @property
    def input_bias(self) -> int:
        """What the input's bytes are stored plus (vpdpbusd's unsigned operand: 128)."""
        return 128 if self.form == "vnni" else 0

    @property
    def weights(self) -> DotWeights:
        """The record that packs this conv's weights (for `packed`)."""
        return DotWeights((self.out_channels, self.shape[1], *self.kernel), self.form, self.rows)

    def buffers(self):
        c, oc, (kh, kw) = self.shape[1], self.out_channels, self.kernel
        weights = self.weights.buffers()
        ins = [Buffer("x", self.shape, "int8")]
        if self.packed:
            ins += [Buffer(w.name, w.shape, w.dtype) for w in weights[1:]]  # wq, wsum
        else:
            ins.append(Buffer("weight", (oc, c, kh, kw), "int8"))
        ins += E.vector_buffers(self.epilogue, oc, self.offset_input)
        ins += [Buffer("residual", self.out_shape, "int8")] if self.epilogue.residual else []
        words = (len(self.phases), self.groups, self.plane_size, self.group)
        work = [Buffer("xq", words, "int8", "work")]  # x (+ bias), G channels a word
        if not self.packed:
            work += [Buffer(w.name, w.shape, w.dtype, "work") for w in weights[1:]]
        work.append(Buffer("yq", (oc, self.q_count), "int8", "work"))
        if self.epilogue.residual:
            work.append(Buffer("rq", (oc, self.q_count), "int8", "work"))
        # a shared kernel's sizes, last (the caller adds them to the conv's own arguments)
        dims = [Buffer("dims", (len(self.dims(1)),), "int64")] if self.shared else []
        return (*ins, Buffer("y", self.out_shape, "int8", "out"), *work, *dims)

    # ---- one kernel for a family of shapes ---------------------------------------------------
    def family(self) -> tuple:
        """What the code depends on beyond the `dims` a shared kernel reads: every field but
        the shape's sizes, and the choices the code makes from them (a last partial word's
        channels, whether the tiles' epilogue is a loop, a last tile's rows, paired words)."""
        (kh, kw), c = self.kernel, self.shape[1]
        return (
            self.kind,
            self.kernel,
            self.stride,
            self.pads,
            self.epilogue,
            self.pad_value,
            self.offset_input,
            self.form,
            self.rows,
            self.paired,
            c % self.group,
            c * kh * kw >= LOOPED_EPILOGUE,
            self.out_channels % self.rows,
            self.paired and self.groups > 1,
        )

    def code_key(self) -> str:
        return repr(("shared", *self.family())) if self.shared else repr(self)

    def shared_code(self, target: Target) -> tuple[DotConv2d, np.ndarray] | None:
        """The record whose code computes this conv and every other of its `family` (packed
        weights only), and this conv's `dims` for it, in order; None for unpacked weights."""
        if not self.packed:
            return None
        dims = np.array(list(self.dims(self._lanes(target)).values()), np.int64)
        return replace(self, shared=True), dims

    def _lanes(self, target: Target) -> int:
        """Columns of the phase copy a vector load takes (`_words`): 4 x the vector width
        bytes."""
        return target.vector_width * 4 // self.group

    def dims(self, lanes: int) -> dict[str, int]:
        """The integers the code is written with: the shape's sizes, the phase copy's boxes
        (each phase's rows and columns of real input; its rows of whole vectors (`full`) and
        their `vectors` of `lanes` columns), the tiles' counts and their order. The same
        names whatever `lanes` is."""
        n, c, h, w = self.shape
        oh, ow = self.out_hw
        values = {
            "n": n, "c": c, "h": h, "w": w, "oc": self.out_channels, "oh": oh, "ow": ow,
            "groups": self.groups, "whole": c // self.group, "pitch": self.pitch,
            "q_count": self.q_count, "plane_size": self.plane_size,
            "oc_tiles": self.out_channels // self.rows, "weights_outer": int(self.weights_outer),
        }  # fmt: skip
        for p, (a, bb) in enumerate(self.phases):
            y0, x0, y1, x1 = self.phase_box(a, bb) or (0, 0, 0, 0)
            full = max(y0, min(y1, self.plane_size // self.pitch))
            first = x0 * self.stride[1] + bb - self.pads[1]  # x column of plane column x0
            vectors, sw = 0, self.stride[1]
            while x0 + (vectors + 1) * lanes <= x1 and first + (vectors + 1) * lanes * sw <= w:
                vectors += 1
            rest = x1 - x0 - vectors * lanes  # columns a byte at a time
            values.update(
                {f"{p}.{name}": v for name, v in zip(
                    ("y0", "x0", "y1", "x1", "full", "vectors", "wide", "cut", "rest"),
                    (y0, x0, y1, x1, full, vectors, full - y0, y1 - full, rest),
                )}
            )  # fmt: skip
        return values

    # ---- the body ----------------------------------------------------------------------------
    def emit(self, k: Kernel) -> None:
        if dot_form(k.target) != self.form:
            need = {"vnni": "VNNI (avx512vnni or avxvnni)", "neon": "ARM NEON"}[self.form]
            raise KernelError(
                f"the {self.form} dot-product conv2d needs {need}; target {k.target.name} "
                f"({k.target.cpu}) has {dot_form(k.target) or 'no dot products'}: use "
                f"for_target's record (conv.Conv2d where there are none)"
            )
        if not self.packed:
            self.weights.emit(k)
        b, d = k.b, Dims(k, self.dims(self._lanes(k.target)), self.shared)
        nr, mr = 2 * k.target.vector_width, self.rows
        with k.loop(d["n"], name="n") as n:
            self._phases(k, d, n)
            if self.epilogue.residual:
                self._q_space(k, d, n, to_q=True)
            if not d.none("oc_tiles"):  # tiles of mr channels x nr positions, in either order
                # weights outer (late layers: few pixels, many channels): each block of
                # weights read once, the input many times; else each input tile once
                outer = b.icmp_signed("!=", d["weights_outer"], k.i(0))
                q_tiles, oc_tiles = b.udiv(d["q_count"], k.i(nr)), d["oc_tiles"]
                with (
                    k.loop(b.select(outer, oc_tiles, q_tiles), name="to") as o,
                    k.loop(b.select(outer, q_tiles, oc_tiles), name="ti") as i,
                ):
                    block, q = b.select(outer, o, i), b.select(outer, i, o)
                    self._tile(k, d, b.mul(q, k.i(nr)), b.mul(block, k.i(mr)), mr)
            if self.out_channels % mr:
                with k.loop(d["q_count"], step=nr, name="q") as q0:
                    self._tile(k, d, q0, b.mul(d["oc_tiles"], k.i(mr)), self.out_channels % mr)
            self._q_space(k, d, n, to_q=False)

    def _phases(self, k: Kernel, d: Dims, n) -> None:
        """`conv.Conv2d._phases` into words: the padded, stride-split copy of image `n`, each
        value plus `input_bias`, G channels of a position in one word. Whole words of whole rows go
        a vector at a time (`_words`: G channels' rows loaded, interleaved); the rest (a last
        group of fewer than G channels, a plane's cut last row, the columns past the last
        whole vector) a byte at a time."""
        b, group = k.b, self.group
        size = b.mul(b.mul(d["groups"], d["plane_size"]), k.i(len(self.phases) * group))
        k.fill(k.arg["xq"], size, self._biased(self.pad_value), 4 * k.target.vector_width)
        whole, part = d["whole"], self.shape[1] % group  # whole words, channels of a last one
        for p, (a, bb) in enumerate(self.phases):
            y0, x0, y1, x1, full = (d[f"{p}.{v}"] for v in ("y0", "x0", "y1", "x1", "full"))
            if not d.none(f"{p}.wide"):
                if not d.none("whole"):
                    self._words(k, d, n, p, (a, bb), (k.i(0), whole), group, (y0, full), (x0, x1))
                if part:
                    last = (whole, b.add(whole, k.i(1)))
                    self._words(k, d, n, p, (a, bb), last, part, (y0, full), (x0, x1))
            if not d.none(f"{p}.cut"):
                self._bytes(k, d, n, p, (a, bb), (k.i(0), d["c"]), (full, y1), (x0, x1))

    def _biased(self, value: int) -> int:
        """An int8 `value` plus `input_bias`, as the byte (a signed int) that holds it."""
        return value ^ -128 if self.input_bias else value

    def _flip(self, k: Kernel, v: ir.Value) -> ir.Value:
        """Bytes plus `input_bias` (128: the top bit flipped)."""
        if not self.input_bias:
            return v
        n = v.type.count if isinstance(v.type, ir.VectorType) else None
        return k.b.xor(v, ir.Constant(v.type, [-128] * n if n else -128))

    def _source(self, k: Kernel, d: Dims, n, c, yy, phase: tuple[int, int]):
        """The index in x of plane row `yy`'s column 0 of channel `c` (its stride phase's)."""
        b = k.b
        sh, (top, left) = self.stride[0], self.pads[:2]
        src = b.add(
            b.mul(b.add(b.mul(n, d["c"]), c), d["h"]),
            b.add(b.mul(yy, k.i(sh)), k.i(phase[0] - top)),
        )
        return b.add(b.mul(src, d["w"]), k.i(phase[1] - left))

    def _row(self, k: Kernel, d: Dims, p: int, g, yy):
        """The word index of plane row `yy`'s column 0 (phase `p`, channel word `g`)."""
        b = k.b
        plane = b.mul(b.add(b.mul(k.i(p), d["groups"]), g), d["plane_size"])
        return plane, b.add(plane, b.mul(yy, d["pitch"]))

    def _bytes(self, k: Kernel, d: Dims, n, p: int, phase, channels, rows, cols) -> None:
        """Channels x rows x columns of the copy a byte at a time (guarded at the plane's
        end, where its last row is cut)."""
        b, sw, group = k.b, self.stride[1], self.group
        with (
            k.loop(channels[1], start=channels[0], name="pc") as c,
            k.loop(rows[1], start=rows[0], name="py") as yy,
        ):
            src = self._source(k, d, n, c, yy, phase)
            plane, row = self._row(k, d, p, b.udiv(c, k.i(group)), yy)
            end = b.add(plane, d["plane_size"])
            lane = b.urem(c, k.i(group))
            with k.loop(cols[1], start=cols[0], name="px") as xx:
                at = b.add(row, xx)
                with b.if_then(b.icmp_signed("<", at, end)):  # the plane's last row
                    v = k.load(k.arg["x"], I8, b.add(src, b.mul(xx, k.i(sw))))
                    dst = b.add(b.mul(at, k.i(group)), lane)
                    k.store(self._flip(k, v), k.arg["xq"], dst)

    def _words(self, k: Kernel, d: Dims, n, p: int, phase, words, real: int, rows, cols) -> None:
        """Words `words` (a range) of whole rows, `real` channels each (fewer than G in a last
        word, its other lanes the padding, under zero weights): per vector of V columns (V
        words fill a 128-bit register or more; the phase's `vectors` of them), each channel's
        V bytes loaded (V x stride contiguous bytes, every stride-th kept), interleaved into V
        words, biased, stored; the columns past the last whole vector (or whose load would
        pass the row's end) a byte at a time."""
        b, sw, group = k.b, self.stride[1], self.group
        lanes = self._lanes(k.target)  # V columns
        x0, x1 = cols
        keep = ir.Constant(vec(I32, lanes), [i * sw for i in range(lanes)])
        join = ir.Constant(vec(I32, 2 * lanes), list(range(2 * lanes)))
        weave = ir.Constant(
            vec(I32, group * lanes),
            [lane * lanes + i for i in range(lanes) for lane in range(group)],
        )
        pad = ir.Constant(vec(I8, lanes), [self.pad_value] * lanes)  # biased with the rest
        with (
            k.loop(words[1], start=words[0], name="wg") as g,
            k.loop(rows[1], start=rows[0], name="wy") as yy,
        ):
            _, row = self._row(k, d, p, g, yy)
            srcs = [
                self._source(k, d, n, b.add(b.mul(g, k.i(group)), k.i(lane)), yy, phase)
                for lane in range(real)
            ]
            if not d.none(f"{p}.vectors"):
                with k.loop(d[f"{p}.vectors"], name="wv") as m:
                    xx = b.add(x0, b.mul(m, k.i(lanes)))
                    parts = []
                    for src in srcs:
                        at = b.add(src, b.mul(xx, k.i(sw)))
                        v = k.load(k.arg["x"], vec(I8, lanes * sw), at, align=1)
                        parts.append(v if sw == 1 else b.shuffle_vector(v, v, keep))
                    parts += [pad] * (group - real)
                    if group == 4:
                        parts = [
                            b.shuffle_vector(parts[0], parts[1], join),
                            b.shuffle_vector(parts[2], parts[3], join),
                        ]
                    woven = self._flip(k, b.shuffle_vector(parts[0], parts[1], weave))
                    k.store(woven, k.arg["xq"], b.mul(b.add(row, xx), k.i(group)))
            if not d.none(f"{p}.rest"):
                rest = b.add(x0, b.mul(d[f"{p}.vectors"], k.i(lanes)))
                with k.loop(x1, start=rest, name="wx") as xx:
                    at = b.mul(b.add(row, xx), k.i(group))
                    for lane, src in enumerate(srcs):
                        v = k.load(k.arg["x"], I8, b.add(src, b.mul(xx, k.i(sw))))
                        k.store(self._flip(k, v), k.arg["xq"], b.add(at, k.i(lane)))

    def _q_space(self, k: Kernel, d: Dims, n, to_q: bool) -> None:
        """`conv.Conv2d._q_space` on `d`'s sizes: the residual into the q numbering, or the
        result out of it (dropping the columns past OW)."""
        b = k.b
        with k.loop(d["oc"], name="cc") as c, k.loop(d["oh"], name="cy") as y:
            row_q = b.add(b.mul(c, d["q_count"]), b.mul(y, d["pitch"]))
            row_img = b.mul(b.add(b.mul(b.add(b.mul(n, d["oc"]), c), d["oh"]), y), d["ow"])
            if to_q:
                k.copy(k.arg["rq"], row_q, k.arg["residual"], row_img, d["ow"])
            else:
                k.copy(k.arg["y"], row_img, k.arg["yq"], row_q, d["ow"])

    def _tile(self, k: Kernel, d: Dims, q0, oc0, mr: int) -> None:
        """Output channels [oc0, oc0 + mr) x q positions [q0, q0 + NR), into yq."""
        b, vw = k.b, k.target.vector_width
        iv = vec(I32, vw)
        acc = [[k.local(iv) for _ in range(2)] for _ in range(mr)]
        for row in acc:
            for a in row:
                b.store(ir.Constant(iv, [0] * vw), a)
        if self.paired and self.groups > 1:  # words in pairs where the weights allow
            fits = b.icmp_signed("!=", k.load(k.arg["wpair"], I32, k.i(0)), k.i(0))
            with b.if_else(fits) as (paired, single):
                with paired:
                    self._words_taps(k, d, acc, q0, oc0, 2)
                with single:
                    self._words_taps(k, d, acc, q0, oc0, 1)
        else:
            self._words_taps(k, d, acc, q0, oc0, 1)
        values = []
        for r in range(mr):
            sums = [b.load(acc[r][v]) for v in range(2)]
            if self.input_bias:  # less the bias's share: bias x the channel's weight sum
                fix = k.splat(k.load(k.arg["wsum"], I32, b.add(oc0, k.i(r))), vw)
                sums = [b.sub(x, fix) for x in sums]
            values.append(sums)
        self._store_words(k, d, q0, oc0, mr, values)

    def _words_taps(self, k: Kernel, d: Dims, acc, q0, oc0, per: int) -> None:
        """acc += every tap's dot products over every word, `per` words (1, or 2: their
        products added in 16 bits before widening) at a time; an odd last word alone."""
        b, groups = k.b, d["groups"]
        whole = groups if per == 1 else b.and_(groups, k.i(-per))
        with k.loop(whole, step=per, name=f"g{per}") as g:
            self._taps(k, d, acc, q0, oc0, [b.add(g, k.i(w)) for w in range(per)])
        if per > 1:
            with b.if_then(b.icmp_signed("<", whole, groups)):
                self._taps(k, d, acc, q0, oc0, [whole])

    def _taps(self, k: Kernel, d: Dims, acc, q0, oc0, words: list) -> None:
        b = k.b
        (kh, kw), (sh, sw) = self.kernel, self.stride
        phase = {ab: p for p, ab in enumerate(self.phases)}
        if kh * kw > 9 and kh >= sh:  # a 7x7 kernel: a loop over its rows, so that
            cols = sorted({j % sw for j in range(kw)})  # its IR is a seventh the size
            with k.loop(kh, name="ki") as i:
                row_phase = b.mul(b.urem(i, k.i(sh)), k.i(len(cols)))
                for j in range(kw):
                    p = b.add(row_phase, k.i(cols.index(j % sw)))
                    self._tap(k, d, acc, q0, oc0, words, i, j, p)
        else:
            for i in range(kh):
                for j in range(kw):
                    self._tap(k, d, acc, q0, oc0, words, k.i(i), j, k.i(phase[i % sh, j % sw]))

    def _tap(self, k: Kernel, d: Dims, acc, q0, oc0, words: list, i, j: int, phase) -> None:
        """acc += the dot products of tap (i, j) over the G input channels of each word in
        `words` (`i` and the tap's stride `phase` are index values: constants or a loop's)."""
        b, vw = k.b, k.target.vector_width
        iv = vec(self.word, vw)
        (kh, kw), (sh, sw), groups = self.kernel, self.stride, d["groups"]
        row = b.add(b.mul(b.udiv(i, k.i(sh)), d["pitch"]), k.i(j // sw))
        xs = []  # per word, its two vectors of NR positions
        for g in words:
            plane = b.add(b.mul(phase, groups), g)
            at = b.add(b.add(b.mul(plane, d["plane_size"]), q0), row)
            xs.append([k.load(k.arg["xq"], iv, b.add(at, k.i(v * vw))) for v in range(2)])
        tap = b.add(b.mul(i, k.i(kw)), k.i(j))
        for r, sums in enumerate(acc):
            ws = []
            for g in words:
                # the tile's weight words of one tap lie side by side (DotWeights' row blocks)
                block = b.add(b.mul(b.udiv(oc0, k.i(self.rows)), groups), g)
                word = b.add(b.mul(b.add(b.mul(block, k.i(kh * kw)), tap), k.i(self.rows)), k.i(r))
                ws.append(k.splat(k.load(k.arg["wq"], self.word, word), vw))
            for v in range(2):
                pairs = [(x[v], w) for x, w in zip(xs, ws)]
                b.store(_dot(k, self.form, b.load(sums[v]), pairs), sums[v])

    def _store_words(self, k: Kernel, d: Dims, q0, oc0, mr: int, values) -> None:
        """The tile's sums through the epilogue into yq. Where an output takes many products
        (`LOOPED_EPILOGUE` or more: C x KH x KW) a loop over the tile's rows, one epilogue in
        the IR, not one a row (the kernel compiles that much faster, and the sums' trip
        through memory is a small share of the time); in thin convs the rows inline."""
        b, vw = k.b, k.target.vector_width
        iv = vec(I32, vw)

        def store(r, value, v):
            ch = b.add(oc0, r)
            at = b.add(b.add(b.mul(ch, d["q_count"]), q0), k.i(v * vw))
            res = None
            if self.epilogue.residual:
                res = k.load(k.arg["rq"], vec(I8, vw), at, align=1)
            y = E.emit(k, self.epilogue, value, ch, res, self.offset_input)
            k.store(y, k.arg["yq"], at)

        (kh, kw), c = self.kernel, self.shape[1]
        if c * kh * kw < LOOPED_EPILOGUE:
            for r in range(mr):
                for v in range(2):
                    store(k.i(r), values[r][v], v)
            return
        sums = k.local(iv, mr * 2)
        for r in range(mr):
            for v in range(2):
                b.store(values[r][v], k.at(sums, iv, 2 * r + v))
        with k.loop(mr, name="er") as r:
            for v in range(2):
                store(r, b.load(k.at(sums, iv, b.add(b.mul(r, k.i(2)), k.i(v)))), v)


def _dot(k: Kernel, form: str, acc: ir.Value, pairs: list) -> ir.Value:
    """acc + each lane's dot product of the words of x and w, for each (x, w) in `pairs`
    (wrapping): vnni, one vpdpbusd (x's bytes unsigned, w's signed; one pair); neon, the
    bytes' 16-bit products (vmull.s8 / smull; of a second pair added to them in 16 bits,
    vmlal.s8 / smlal, exact only for weights above -128) added pairwise into acc
    (vpadal.s16 / saddlp and an add: sadalp)."""
    lanes = acc.type.count
    if form == "vnni":
        ((x, w),) = pairs
        return _call(k, f"llvm.x86.avx512.vpdpbusd.{32 * lanes}", acc.type, [acc, x, w])
    b, bytes_, shorts = k.b, vec(I8, 2 * lanes), vec(I16, 2 * lanes)
    arm64 = k.target.triple.startswith("aarch64")
    multiply = (
        f"llvm.aarch64.neon.smull.v{2 * lanes}i16"
        if arm64
        else (f"llvm.arm.neon.vmulls.v{2 * lanes}i16")
    )
    products = None
    for x, w in pairs:
        p = _call(k, multiply, shorts, [b.bitcast(x, bytes_), b.bitcast(w, bytes_)])
        products = p if products is None else b.add(products, p)  # vmlal.s8 / smlal
    if arm64:
        name = f"llvm.aarch64.neon.saddlp.v{lanes}i32.v{2 * lanes}i16"
        return b.add(acc, _call(k, name, acc.type, [products]))
    return _call(k, f"llvm.arm.neon.vpadals.v{lanes}i32.v{2 * lanes}i16", acc.type, [acc, products])


def _call(k: Kernel, name: str, ret: ir.Type, args: list) -> ir.Value:
    """A call of intrinsic `name` (declared on first use)."""
    fn = k.module.globals.get(name)
    if fn is None:
        fn = ir.Function(k.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return k.b.call(fn, args)
