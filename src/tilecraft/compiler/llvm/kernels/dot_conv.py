"""int8 convolution on the CPU's integer dot products, in one of two forms:

- `vnni` (x86 with AVX-512 VNNI or AVX-VNNI): `vpdpbusd` multiplies four unsigned bytes by four
  signed bytes and adds the four products to an int32 lane, 16 lanes an instruction on
  AVX-512 (64 multiply-adds), where the float datapath of `conv.Conv2d` does 16;
- `neon` (ARMv7 and AArch64 NEON: the boards' Cortex-A9 and A53): `vmull.s8` / `smull`
  multiplies eight signed bytes into eight 16-bit products, exactly, and `vpadal.s16` /
  `sadalp` adds them pairwise into four int32 lanes: 8 multiply-adds in two instructions,
  where the float datapath's `vmla.f32` does 4 in one after two conversions.

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
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from llvmlite import ir

from tilecraft.compiler.llvm.irgen import I8, I16, I32, Kernel, vec
from tilecraft.compiler.llvm.kernels import epilogue as E
from tilecraft.compiler.llvm.kernels.conv import Conv2d
from tilecraft.compiler.llvm.spec import Buffer, Spec, positive_shape
from tilecraft.compiler.llvm.targets import Target
from tilecraft.errors import KernelError

GROUPS = {"vnni": 4, "neon": 2}  # input channels a word holds, the sum each lane adds


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
        return DotConv2d(**fields_, form=form, rows=target.tile_rows)
    return spec


@dataclass(frozen=True)
class DotConv2d(Conv2d):
    """`conv.Conv2d`'s int8 convolution (the same fields and inputs) on integer dot products
    of `form` ("vnni" or "neon"); only for a target whose `dot_form` it is."""

    dtype: str = "int8"
    packed: bool = False  # takes the weights as `DotWeights` packs them (wq, and wsum)
    form: str = "vnni"
    rows: int = 4  # output channels of the register tile (the target's `tile_rows`)
    kind: ClassVar[str] = "conv2d_dot"

    def __post_init__(self):
        super().__post_init__()
        if self.dtype != "int8":
            raise KernelError(f"a dot-product conv2d is int8, not {self.dtype}")
        if self.form not in GROUPS:
            raise KernelError(f"dot-product form {self.form!r}; valid: {', '.join(GROUPS)}")
        if isinstance(self.rows, bool) or not 1 <= int(self.rows) <= 16:
            raise KernelError(f"a dot-product conv2d's tile has 1-16 rows, not {self.rows!r}")

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
        ins += E.vector_buffers(self.epilogue, oc)
        ins += [Buffer("residual", self.out_shape, "int8")] if self.epilogue.residual else []
        words = (len(self.phases), self.groups, self.plane_size, self.group)
        work = [Buffer("xq", words, "int8", "work")]  # x (+ bias), G channels a word
        if not self.packed:
            work += [Buffer(w.name, w.shape, w.dtype, "work") for w in weights[1:]]
        work.append(Buffer("yq", (oc, self.q_count), "int8", "work"))
        if self.epilogue.residual:
            work.append(Buffer("rq", (oc, self.q_count), "int8", "work"))
        return (*ins, Buffer("y", self.out_shape, "int8", "out"), *work)

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
        nr, mr, oc = 2 * k.target.vector_width, self.rows, self.out_channels
        with k.loop(self.shape[0], name="n") as n:
            self._phases(k, n)
            if self.epilogue.residual:
                self._q_space(k, n, to_q=True)
            if self.weights_outer:
                if oc // mr:
                    with (
                        k.loop(oc // mr * mr, step=mr, name="oc") as oc0,
                        k.loop(self.q_count, step=nr, name="q") as q0,
                    ):
                        self._tile(k, q0, oc0, mr)
                if oc % mr:
                    with k.loop(self.q_count, step=nr, name="q") as q0:
                        self._tile(k, q0, k.i(oc // mr * mr), oc % mr)
            else:
                with k.loop(self.q_count, step=nr, name="q") as q0:
                    if oc // mr:
                        with k.loop(oc // mr * mr, step=mr, name="oc") as oc0:
                            self._tile(k, q0, oc0, mr)
                    if oc % mr:
                        self._tile(k, q0, k.i(oc // mr * mr), oc % mr)
            self._q_space(k, n, to_q=False)

    def _phases(self, k: Kernel, n) -> None:
        """`conv.Conv2d._phases` into words: the padded, stride-split copy of image `n`, each
        value plus `input_bias`, G channels of a position in one word. Whole words of whole rows go
        a vector at a time (`_words`: G channels' rows loaded, interleaved); the rest (a last
        group of fewer than G channels, a plane's cut last row, the columns past the last
        whole vector) a byte at a time."""
        c_count, size, groups, pitch = self.shape[1], self.plane_size, self.groups, self.pitch
        pad = ir.Constant(I8, self._biased(self.pad_value))
        with k.loop(len(self.phases) * groups * size * self.group, name="fill") as i:
            k.store(pad, k.arg["xq"], i)
        whole, part = divmod(c_count, self.group)  # whole words, channels of a last one
        for p, (a, bb) in enumerate(self.phases):
            box = self.phase_box(a, bb)
            if box is None:
                continue
            y0, x0, y1, x1 = box
            full = max(y0, min(y1, size // pitch))  # rows [y0, full) lie wholly in the plane
            if full > y0:
                if whole:
                    self._words(k, n, p, (a, bb), (0, whole), self.group, (y0, full), (x0, x1))
                if part:
                    self._words(k, n, p, (a, bb), (whole, whole + 1), part, (y0, full), (x0, x1))
            self._bytes(k, n, p, (a, bb), (0, c_count), (full, y1), (x0, x1))

    def _biased(self, value: int) -> int:
        """An int8 `value` plus `input_bias`, as the byte (a signed int) that holds it."""
        return value ^ -128 if self.input_bias else value

    def _flip(self, k: Kernel, v: ir.Value) -> ir.Value:
        """Bytes plus `input_bias` (128: the top bit flipped)."""
        if not self.input_bias:
            return v
        n = v.type.count if isinstance(v.type, ir.VectorType) else None
        return k.b.xor(v, ir.Constant(v.type, [-128] * n if n else -128))

    def _source(self, k: Kernel, n, c, yy, phase: tuple[int, int]):
        """The index in x of plane row `yy`'s column 0 of channel `c` (its stride phase's)."""
        b = k.b
        c_count, h, w = self.shape[1:]
        sh, (top, left) = self.stride[0], self.pads[:2]
        src = b.add(
            b.mul(b.add(b.mul(n, k.i(c_count)), c), k.i(h)),
            b.add(b.mul(yy, k.i(sh)), k.i(phase[0] - top)),
        )
        return b.add(b.mul(src, k.i(w)), k.i(phase[1] - left))

    def _row(self, k: Kernel, p: int, g, yy):
        """The word index of plane row `yy`'s column 0 (phase `p`, channel word `g`)."""
        b = k.b
        plane = b.mul(b.add(b.mul(k.i(p), k.i(self.groups)), g), k.i(self.plane_size))
        return plane, b.add(plane, b.mul(yy, k.i(self.pitch)))

    def _bytes(self, k: Kernel, n, p: int, phase, channels, rows, cols) -> None:
        """Channels x rows x columns of the copy a byte at a time (guarded at the plane's
        end, where its last row is cut)."""
        b, sw, group = k.b, self.stride[1], self.group
        if channels[1] <= channels[0] or rows[1] <= rows[0]:
            return
        with (
            k.loop(channels[1], start=channels[0], name="pc") as c,
            k.loop(rows[1], start=rows[0], name="py") as yy,
        ):
            src = self._source(k, n, c, yy, phase)
            plane, row = self._row(k, p, b.udiv(c, k.i(group)), yy)
            end = b.add(plane, k.i(self.plane_size))
            lane = b.urem(c, k.i(group))
            with k.loop(cols[1], start=cols[0], name="px") as xx:
                at = b.add(row, xx)
                with b.if_then(b.icmp_signed("<", at, end)):  # the plane's last row
                    v = k.load(k.arg["x"], I8, b.add(src, b.mul(xx, k.i(sw))))
                    dst = b.add(b.mul(at, k.i(group)), lane)
                    k.store(self._flip(k, v), k.arg["xq"], dst)

    def _words(self, k: Kernel, n, p: int, phase, words, real: int, rows, cols) -> None:
        """Words `words` (a range) of whole rows, `real` channels each (fewer than G in a last
        word, its other lanes the padding, under zero weights): per vector of V columns (V
        words fill a 128-bit register or more), each channel's V bytes loaded (V x stride
        contiguous bytes, every stride-th kept), interleaved into V words, biased, stored;
        the columns past the last whole vector (or whose load would pass the row's end) a
        byte at a time."""
        b, sw, w, group = k.b, self.stride[1], self.shape[3], self.group
        lanes = k.target.vector_width * 4 // group  # V columns: 4 x vector width bytes
        x0, x1 = cols
        first = x0 * sw + phase[1] - self.pads[1]  # x column of plane column x0
        vectors = 0
        while x0 + (vectors + 1) * lanes <= x1 and first + ((vectors + 1) * lanes) * sw <= w:
            vectors += 1
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
            _, row = self._row(k, p, g, yy)
            srcs = [
                self._source(k, n, b.add(b.mul(g, k.i(group)), k.i(lane)), yy, phase)
                for lane in range(real)
            ]
            if vectors:
                with k.loop(vectors, name="wv") as m:
                    xx = b.add(k.i(x0), b.mul(m, k.i(lanes)))
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
                    words = self._flip(k, b.shuffle_vector(parts[0], parts[1], weave))
                    k.store(words, k.arg["xq"], b.mul(b.add(row, xx), k.i(group)))
            rest = x0 + vectors * lanes
            if rest < x1:
                with k.loop(x1, start=rest, name="wx") as xx:
                    at = b.mul(b.add(row, xx), k.i(group))
                    for lane, src in enumerate(srcs):
                        v = k.load(k.arg["x"], I8, b.add(src, b.mul(xx, k.i(sw))))
                        k.store(self._flip(k, v), k.arg["xq"], b.add(at, k.i(lane)))

    def _tile(self, k: Kernel, q0, oc0, mr: int) -> None:
        """Output channels [oc0, oc0 + mr) x q positions [q0, q0 + NR), into yq."""
        b, vw = k.b, k.target.vector_width
        iv = vec(I32, vw)
        acc = [[k.local(iv) for _ in range(2)] for _ in range(mr)]
        for row in acc:
            for a in row:
                b.store(ir.Constant(iv, [0] * vw), a)
        (kh, kw), (sh, sw) = self.kernel, self.stride
        phase = {ab: p for p, ab in enumerate(self.phases)}
        with k.loop(self.groups, name="g") as g:
            if kh * kw > 9 and kh >= sh:  # a 7x7 kernel: a loop over its rows, so that
                cols = sorted({j % sw for j in range(kw)})  # its IR is a seventh the size
                with k.loop(kh, name="ki") as i:
                    row_phase = b.mul(b.urem(i, k.i(sh)), k.i(len(cols)))
                    for j in range(kw):
                        p = b.add(row_phase, k.i(cols.index(j % sw)))
                        self._tap(k, acc, q0, oc0, g, i, j, p)
            else:
                for i in range(kh):
                    for j in range(kw):
                        self._tap(k, acc, q0, oc0, g, k.i(i), j, k.i(phase[i % sh, j % sw]))
        values = []
        for r in range(mr):
            sums = [b.load(acc[r][v]) for v in range(2)]
            if self.input_bias:  # less the bias's share: bias x the channel's weight sum
                fix = k.splat(k.load(k.arg["wsum"], I32, b.add(oc0, k.i(r))), vw)
                sums = [b.sub(x, fix) for x in sums]
            values.append(sums)
        self._store_words(k, q0, oc0, mr, values)

    def _tap(self, k: Kernel, acc, q0, oc0, g, i, j: int, phase) -> None:
        """acc += the dot products of tap (i, j) over the G input channels of word `g`
        (`i` and the tap's stride `phase` are index values: constants or a loop's)."""
        b, vw = k.b, k.target.vector_width
        iv = vec(self.word, vw)
        (kh, kw), (sh, sw), groups = self.kernel, self.stride, self.groups
        plane = b.add(b.mul(phase, k.i(groups)), g)
        at = b.add(b.mul(plane, k.i(self.plane_size)), q0)
        at = b.add(at, b.add(b.mul(b.udiv(i, k.i(sh)), k.i(self.pitch)), k.i(j // sw)))
        xs = [k.load(k.arg["xq"], iv, b.add(at, k.i(v * vw))) for v in range(2)]
        tap = b.add(b.mul(i, k.i(kw)), k.i(j))
        for r, row in enumerate(acc):
            # the tile's weight words of one tap lie side by side (DotWeights' row blocks)
            block = b.add(b.mul(b.udiv(oc0, k.i(self.rows)), k.i(groups)), g)
            word = b.add(b.mul(b.add(b.mul(block, k.i(kh * kw)), tap), k.i(self.rows)), k.i(r))
            w = k.splat(k.load(k.arg["wq"], self.word, word), vw)
            for v in range(2):
                b.store(_dot(k, self.form, b.load(row[v]), xs[v], w), row[v])

    def _store_words(self, k: Kernel, q0, oc0, mr: int, values) -> None:
        b, vw = k.b, k.target.vector_width
        for r in range(mr):
            ch = b.add(oc0, k.i(r))
            base = b.add(b.mul(ch, k.i(self.q_count)), q0)
            for v in range(2):
                at = b.add(base, k.i(v * vw))
                res = (
                    k.load(k.arg["rq"], vec(I8, vw), at, align=1)
                    if self.epilogue.residual
                    else None
                )
                k.store(E.emit(k, self.epilogue, values[r][v], ch, res), k.arg["yq"], at)


@dataclass(frozen=True)
class DotWeights(Spec):
    """A dot-product conv's weights (`shape` (OC, C, KH, KW) int8) packed for `form`: wq, the
    weights regrouped G input channels a word (pad channels zero) in blocks of `rows` output
    channels, (OC / rows, C / G, KH, KW, rows, G), so that a register tile's words of one tap
    lie side by side (pad output channels zero); for vnni also wsum, 128 x each output
    channel's weight sum (wrapping), the bias correction. Run once per weight tensor when the
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
        return tuple(out)

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


def _dot(k: Kernel, form: str, acc: ir.Value, x: ir.Value, w: ir.Value) -> ir.Value:
    """acc + each lane's dot product of the words of `x` and `w` (wrapping): vnni, one
    vpdpbusd (x's bytes unsigned, w's signed); neon, the bytes' 16-bit products (vmull.s8 /
    smull) added pairwise into acc (vpadal.s16 / saddlp and an add: sadalp)."""
    lanes = acc.type.count
    if form == "vnni":
        return _call(k, f"llvm.x86.avx512.vpdpbusd.{32 * lanes}", acc.type, [acc, x, w])
    b, bytes_, shorts = k.b, vec(I8, 2 * lanes), vec(I16, 2 * lanes)
    x, w = b.bitcast(x, bytes_), b.bitcast(w, bytes_)
    if k.target.triple.startswith("aarch64"):
        products = _call(k, f"llvm.aarch64.neon.smull.v{2 * lanes}i16", shorts, [x, w])
        pairs = _call(
            k, f"llvm.aarch64.neon.saddlp.v{lanes}i32.v{2 * lanes}i16", acc.type, [products]
        )
        return b.add(acc, pairs)
    products = _call(k, f"llvm.arm.neon.vmulls.v{2 * lanes}i16", shorts, [x, w])
    return _call(k, f"llvm.arm.neon.vpadals.v{lanes}i32.v{2 * lanes}i16", acc.type, [acc, products])


def _call(k: Kernel, name: str, ret: ir.Type, args: list) -> ir.Value:
    """A call of intrinsic `name` (declared on first use)."""
    fn = k.module.globals.get(name)
    if fn is None:
        fn = ir.Function(k.module, ir.FunctionType(ret, [a.type for a in args]), name)
    return k.b.call(fn, args)
