"""Convolution (NCHW, groups = 1), float32 and int8, as a direct convolution on a register
tile: MR output channels x 2 vectors of output pixels (MR and the width from the target:
6 x 16 on AVX2, 8 x 32 on AVX-512, 4 x 8 on ARMv7 NEON, 8 x 8 on AArch64), accumulated by
multiply-adds over kernel taps and input channels; weights are broadcast one scalar per row.

The input is first copied into a padded scratch copy split into stride phases (for stride s,
plane (a, b) holds padded rows a, a+s, ... and columns b, b+s, ...), each row `pitch` wide.
Output pixels are numbered q = oy * pitch + ox over the same pitch, so every tap's operand for
NR consecutive q is one contiguous vector load, whatever the stride and across row ends; the
few columns past the output's width are computed and dropped when the result is copied out.
No bounds checks in the tile loop.

int8 runs on the same float datapath, exactly: products of int8 values are integers of at
most 2**14, and a float32 sum of up to 1,024 of them is exact (below 2**24), so the reduction
is done in chunks of at most 1,024 terms, each chunk converted to int32 and added: the int32
accumulator (wrapping) of `ops.reference.conv2d_acc`, bit for bit, then the accelerator's
epilogue. Where the CPU has integer dot products (x86 VNNI), int8 runs on them instead
(`dot_conv.DotConv2d`, the same tile); this datapath is every other target's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from llvmlite import ir

from tilecraft.compiler.llvm.irgen import F32, I8, I32, Kernel, vec
from tilecraft.compiler.llvm.kernels import epilogue as E
from tilecraft.compiler.llvm.spec import Buffer, Spec, dtype_of, positive_shape
from tilecraft.errors import KernelError
from tilecraft.ops.operators import Epilogue

MAX_NR = 32  # output pixels per register tile, at most (2 vectors of 16 lanes: AVX-512)
EXACT_TERMS = 1024  # int8 products a float32 sum holds exactly


@dataclass(frozen=True)
class Conv2d(Spec):
    """`shape` the input (N, C, H, W), `out_channels`, `kernel`, `stride`, `pads` (top, left,
    bottom, right). float32: weight (OC, C, KH, KW) float32, optional bias (OC,), optional
    ReLU. int8: weight int8, the accelerator's `epilogue` (its vectors and residual as
    inputs), the padding holding `pad_value` (the input's zero point)."""

    shape: tuple[int, int, int, int]
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dtype: str = "float32"
    bias: bool = False  # float32 only
    relu: bool = False  # float32 only
    epilogue: Epilogue = Epilogue()  # int8 only
    pad_value: int = 0  # int8 only
    # int8: the epilogue's offset (the output's zero point) an input, `offset` (one int32),
    # not a constant of the code (the epilogue's own then 0): layers that differ only in it
    # share one kernel (a uint8 ResNet-18's 19 convs are 11 kernels to compile)
    offset_input: bool = False
    kind: ClassVar[str] = "conv2d"
    compile_cost: ClassVar[int] = 15

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape("conv2d", self.shape, 4))
        object.__setattr__(self, "kernel", positive_shape("conv2d kernel", self.kernel, 2))
        object.__setattr__(self, "stride", positive_shape("conv2d stride", self.stride, 2))
        object.__setattr__(self, "dtype", dtype_of("conv2d", self.dtype, ("float32", "int8")))
        pads = tuple(int(p) for p in self.pads)
        if len(pads) != 4 or min(pads) < 0:
            raise KernelError(f"conv2d pads must be 4 ints >= 0, not {self.pads}")
        object.__setattr__(self, "pads", pads)
        if isinstance(self.out_channels, bool) or int(self.out_channels) < 1:
            raise KernelError(f"conv2d out_channels must be >= 1, not {self.out_channels!r}")
        if min(self.out_hw) < 1:
            raise KernelError(
                f"conv2d kernel {self.kernel} is larger than the padded input "
                f"{self.shape[2:]} with pads {pads}"
            )
        if self.dtype == "float32" and (self.epilogue != Epilogue() or self.pad_value):
            raise KernelError("a float32 conv2d takes bias and relu, not an int8 epilogue")
        if self.dtype == "int8" and (self.bias or self.relu):
            raise KernelError("an int8 conv2d states bias and ReLU in its epilogue")
        if self.offset_input and (self.dtype != "int8" or self.epilogue.offset):
            raise KernelError(
                f"an offset input replaces an int8 epilogue's offset (then 0), not "
                f"{self.dtype} offset {self.epilogue.offset}"
            )
        if self.dtype == "int8" and self.kernel[0] * self.kernel[1] > EXACT_TERMS:
            raise KernelError(
                f"an int8 conv2d kernel has at most {EXACT_TERMS} taps, not "
                f"{self.kernel[0] * self.kernel[1]}"
            )

    @property
    def out_hw(self) -> tuple[int, int]:
        (h, w), (kh, kw), (sh, sw) = self.shape[2:], self.kernel, self.stride
        t, left, bottom, r = self.pads
        return (h + t + bottom - kh) // sh + 1, (w + left + r - kw) // sw + 1

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return (self.shape[0], self.out_channels, *self.out_hw)

    @property
    def pitch(self) -> int:
        """Row pitch of the phase planes and of the output's q numbering."""
        return self.out_hw[1] + (self.kernel[1] - 1) // self.stride[1]

    @property
    def q_count(self) -> int:
        """Output positions computed per channel: whole tiles over OH rows of `pitch`."""
        return -(-self.out_hw[0] * self.pitch // MAX_NR) * MAX_NR

    @property
    def plane_size(self) -> int:
        """Elements of one phase plane: every position a tile's taps may read."""
        reach = (self.kernel[0] - 1) // self.stride[0] * self.pitch + self.pitch
        return self.q_count + reach

    @property
    def phases(self) -> list[tuple[int, int]]:
        """The stride phases (a, b) some tap reads (a 1x1 kernel with stride 2 needs one)."""
        (kh, kw), (sh, sw) = self.kernel, self.stride
        rows = sorted({i % sh for i in range(kh)})
        cols = sorted({j % sw for j in range(kw)})
        return [(a, b) for a in rows for b in cols]

    @property
    def chunk(self) -> int:
        """Input channels per exactly-summed chunk (int8); all of them for float32."""
        c, taps = self.shape[1], self.kernel[0] * self.kernel[1]
        if self.dtype == "float32":
            return c
        return max(d for d in range(1, c + 1) if c % d == 0 and d * taps <= EXACT_TERMS)

    def buffers(self):
        c, oc, (kh, kw) = self.shape[1], self.out_channels, self.kernel
        ins = [Buffer("x", self.shape, self.dtype), Buffer("weight", (oc, c, kh, kw), self.dtype)]
        if self.dtype == "float32":
            ins += [Buffer("bias", (oc,), "float32")] if self.bias else []
        else:
            ins += E.vector_buffers(self.epilogue, oc, self.offset_input)
            ins += [Buffer("residual", self.out_shape, "int8")] if self.epilogue.residual else []
        work = [
            Buffer("xq", (len(self.phases), c, self.plane_size), "float32", "work"),
            Buffer("yq", (oc, self.q_count), self.dtype, "work"),
        ]
        if self.dtype == "int8":
            work.append(Buffer("wq", (oc, c, kh, kw), "float32", "work"))
            if self.epilogue.residual:
                work.append(Buffer("rq", (oc, self.q_count), "int8", "work"))
        return (*ins, Buffer("y", self.out_shape, self.dtype, "out"), *work)

    # ---- the body ----------------------------------------------------------------------------
    def emit(self, k: Kernel) -> None:
        weights = k.arg["weight"]
        if self.dtype == "int8":
            size = self.out_channels * self.shape[1] * self.kernel[0] * self.kernel[1]
            with k.loop(size, name="wq") as i:
                k.store(k.b.sitofp(k.load(weights, I8, i), F32), k.arg["wq"], i)
            weights = k.arg["wq"]
        nr = 2 * k.target.vector_width
        mr = k.target.tile_rows
        oc = self.out_channels
        with k.loop(self.shape[0], name="n") as n:
            self._phases(k, n)
            if self.epilogue.residual:
                self._q_space(k, n, to_q=True)
            if self.weights_outer:  # each block of weights read once, the input many times
                if oc // mr:
                    with (
                        k.loop(oc // mr * mr, step=mr, name="oc") as oc0,
                        k.loop(self.q_count, step=nr, name="q") as q0,
                    ):
                        self._tile(k, weights, q0, oc0, mr)
                if oc % mr:
                    with k.loop(self.q_count, step=nr, name="q") as q0:
                        self._tile(k, weights, q0, k.i(oc // mr * mr), oc % mr)
            else:  # each input tile read once, the weights many times
                with k.loop(self.q_count, step=nr, name="q") as q0:
                    if oc // mr:
                        with k.loop(oc // mr * mr, step=mr, name="oc") as oc0:
                            self._tile(k, weights, q0, oc0, mr)
                    if oc % mr:
                        self._tile(k, weights, q0, k.i(oc // mr * mr), oc % mr)
            self._q_space(k, n, to_q=False)

    @property
    def weights_outer(self) -> bool:
        """Whether the weights are the larger operand (late layers: few pixels, many
        channels), so that the loop over output channels goes outside the loop over pixels."""
        c, (kh, kw) = self.shape[1], self.kernel
        return self.out_channels * c * kh * kw > len(self.phases) * c * self.plane_size

    def _phases(self, k: Kernel, n) -> None:
        """Fill the padded, stride-split float copy of image `n`: every plane with the
        padding value (`pad_value`), then each phase's rectangle of real input copied in
        (its bounds are constants, so the copy has no checks)."""
        b = k.b
        c_count, h, w = self.shape[1:]
        (sh, sw), (top, left), pitch = self.stride, self.pads[:2], self.pitch
        t = I8 if self.dtype == "int8" else F32
        size = self.plane_size
        with k.loop(len(self.phases) * c_count * size, name="fill") as i:
            k.store(ir.Constant(F32, float(self.pad_value)), k.arg["xq"], i)
        for p, (a, bb) in enumerate(self.phases):
            box = self.phase_box(a, bb)
            if box is None:
                continue
            y0, x0, y1, x1 = box
            with k.loop(c_count, name="pc") as c, k.loop(y1, start=y0, name="py") as yy:
                src = b.add(
                    b.mul(b.add(b.mul(n, k.i(c_count)), c), k.i(h)),
                    b.add(b.mul(yy, k.i(sh)), k.i(a - top)),
                )
                src = b.add(b.mul(src, k.i(w)), k.i(bb - left))
                dst = b.add(
                    b.mul(b.add(b.mul(k.i(p), k.i(c_count)), c), k.i(size)), b.mul(yy, k.i(pitch))
                )
                end = b.add(b.mul(b.add(b.mul(k.i(p), k.i(c_count)), c), k.i(size)), k.i(size))
                with k.loop(x1, start=x0, name="px") as xx:
                    at = b.add(dst, xx)
                    with b.if_then(b.icmp_signed("<", at, end)):  # the plane's last row
                        v = k.load(k.arg["x"], t, b.add(src, b.mul(xx, k.i(sw))))
                        k.store(b.sitofp(v, F32) if t == I8 else v, k.arg["xq"], at)

    def phase_box(self, a: int, bb: int) -> tuple[int, int, int, int] | None:
        """The rectangle (y0, x0, y1, x1) of phase plane (a, bb) that real input fills (plane
        row yy holds input row yy * sh + a - top, column xx column xx * sw + bb - left; the
        rest is padding), or None where it holds none."""
        h, w = self.shape[2:]
        (sh, sw), (top, left), pitch = self.stride, self.pads[:2], self.pitch
        y0 = -(-(top - a) // sh) if top > a else 0
        x0 = -(-(left - bb) // sw) if left > bb else 0
        y1 = min((h - 1 + top - a) // sh + 1, -(-self.plane_size // pitch))
        x1 = min((w - 1 + left - bb) // sw + 1, pitch)
        return None if y1 <= y0 or x1 <= x0 else (y0, x0, y1, x1)

    def _q_space(self, k: Kernel, n, to_q: bool) -> None:
        """Copy between an (OC, OH, OW) image and its q numbering (OC, q): the residual in,
        or the result out (dropping the columns past OW)."""
        b = k.b
        oc, (oh, ow) = self.out_channels, self.out_hw
        t = I8 if self.dtype == "int8" else F32
        q_buf, img = ("rq", "residual") if to_q else ("yq", "y")
        with k.loop(oc, name="cc") as c, k.loop(oh, name="cy") as y:
            row_q = b.add(b.mul(c, k.i(self.q_count)), b.mul(y, k.i(self.pitch)))
            row_img = b.mul(b.add(b.mul(b.add(b.mul(n, k.i(oc)), c), k.i(oh)), y), k.i(ow))
            with k.loop(ow, name="cx") as x:
                qa, ia = b.add(row_q, x), b.add(row_img, x)
                if to_q:
                    k.store(k.load(k.arg[img], t, ia), k.arg[q_buf], qa)
                else:
                    k.store(k.load(k.arg[q_buf], t, qa), k.arg[img], ia)

    def _tile(self, k: Kernel, weights, q0, oc0, mr: int) -> None:
        """Output channels [oc0, oc0 + mr) x q positions [q0, q0 + NR), into yq."""
        b, vw = k.b, k.target.vector_width
        fv, iv = vec(F32, vw), vec(I32, vw)
        acc = [[k.local(fv) for _ in range(2)] for _ in range(mr)]
        total = (
            [[k.local(iv) for _ in range(2)] for _ in range(mr)] if self.dtype == "int8" else None
        )
        for row in total or []:
            for t in row:
                b.store(ir.Constant(iv, [0] * vw), t)
        c_count, chunk = self.shape[1], self.chunk
        (kh, kw), (sh, sw) = self.kernel, self.stride
        phase = {ab: p for p, ab in enumerate(self.phases)}
        with k.loop(c_count, step=chunk, name="chunk") as c0:
            for row in acc:
                for a in row:
                    b.store(ir.Constant(fv, [0.0] * vw), a)
            taps = [(i, j, phase[i % sh, j % sw]) for i in range(kh) for j in range(kw)]
            if k.target.registers >= 32 and kh * kw <= 9:  # channels outside, taps inside:
                with k.loop(self.chunk, name="c") as dc:  # a weight row's taps read together
                    for i, j, p in taps:
                        self._tap(k, weights, acc, q0, oc0, b.add(c0, dc), i, j, p)
            else:  # taps outside, channels inside: loop bodies whose values 16 registers
                for i, j, p in taps:  # hold (the A9 spilled the other way round)
                    with k.loop(self.chunk, name="c") as dc:
                        self._tap(k, weights, acc, q0, oc0, b.add(c0, dc), i, j, p)
            for r in range(mr if total else 0):
                for v in range(2):
                    part = b.fptosi(b.load(acc[r][v]), iv)
                    b.store(b.add(b.load(total[r][v]), part), total[r][v])
        self._store(k, q0, oc0, mr, total or acc)

    def _tap(self, k: Kernel, weights, acc, q0, oc0, c, i: int, j: int, phase: int) -> None:
        """acc += the products of tap (i, j) of input channel `c`."""
        b, vw = k.b, k.target.vector_width
        c_count, (kh, kw), (sh, sw) = self.shape[1], self.kernel, self.stride
        fv = vec(F32, vw)
        plane = b.add(b.mul(k.i(phase), k.i(c_count)), c)
        at = b.add(b.mul(plane, k.i(self.plane_size)), q0)
        at = b.add(at, k.i(i // sh * self.pitch + j // sw))
        vs = [k.load(k.arg["xq"], fv, b.add(at, k.i(v * vw)), align=4) for v in range(2)]
        for r, row in enumerate(acc):
            w_at = b.add(b.mul(b.add(oc0, k.i(r)), k.i(c_count)), c)
            w_at = b.add(b.mul(w_at, k.i(kh * kw)), k.i(i * kw + j))
            a = k.splat(k.load(weights, F32, w_at), vw)
            for v in range(2):
                b.store(k.fmuladd(a, vs[v], b.load(row[v])), row[v])

    def _store(self, k: Kernel, q0, oc0, mr: int, values) -> None:
        b, vw = k.b, k.target.vector_width
        for r in range(mr):
            ch = b.add(oc0, k.i(r))
            base = b.add(b.mul(ch, k.i(self.q_count)), q0)
            for v in range(2):
                x = b.load(values[r][v])
                at = b.add(base, k.i(v * vw))
                if self.dtype == "float32":
                    if self.bias:
                        x = b.fadd(x, k.splat(k.load(k.arg["bias"], F32, ch), vw))
                    if self.relu:
                        x = k.fmax(x, k.fconst(x.type, 0.0))
                else:
                    res = (
                        k.load(k.arg["rq"], vec(I8, vw), at, align=1)
                        if self.epilogue.residual
                        else None
                    )
                    x = E.emit(k, self.epilogue, x, ch, res, self.offset_input)
                k.store(x, k.arg["yq"], at)
