"""The layout transforms between NCHW and the accelerator's blocked activation layout
(`runtime.layout.pack_activation`: (N/B, C/L, H, W, B, L), zero-padded to whole blocks),
for any element type; and an input's im2col packing (`runtime.layout.pack_im2col`), the
host's largest packing step (ResNet-18's first conv: 2 MB a frame)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from llvmlite import ir

from tilecraft.compiler.llvm.irgen import DTYPES, I8, Kernel, vec
from tilecraft.compiler.llvm.spec import Buffer, Spec, dtype_of, positive_shape
from tilecraft.errors import KernelError


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


LANES16 = 16  # the blocks whose activations are transposed in registers, a byte a lane
VEC16 = vec(I8, LANES16)


@dataclass(frozen=True)
class _Blocked(Spec):
    shape: tuple[int, int, int, int]  # NCHW
    batch: int
    lanes: int
    dtype: str = "int8"

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape(self.kind, self.shape, 4))
        positive_shape(f"{self.kind} blocks (batch, lanes)", (self.batch, self.lanes), 2)
        object.__setattr__(
            self, "dtype", dtype_of(self.kind, self.dtype, ("int8", "int32", "float32"))
        )

    @property
    def blocked(self) -> tuple[int, ...]:
        n, c, h, w = self.shape
        return (_ceil(n, self.batch), _ceil(c, self.lanes), h, w, self.batch, self.lanes)

    @property
    def transposing(self) -> bool:
        """Whether the kernel moves 16 x 16 byte blocks through registers (`transpose16`):
        int8 in blocks of 16 lanes, every activation the accelerator's 16-wide configs
        pack. Numpy's transposes took 0.08 ms to pack and 0.06 ms to unpack a 64-channel
        56 x 56 tensor, the walk below 0.04 and 0.06 ms (scratch timings)."""
        return self.dtype == "int8" and self.lanes == LANES16

    def _at(self, k: Kernel, block, lane, cblock, pixel):
        """The blocked index of (image block, its batch lane, channel block, pixel), lane 0."""
        b = k.b
        _, cb, h, w, batch, lanes = self.blocked
        at = b.add(b.mul(b.add(b.mul(block, k.i(cb)), cblock), k.i(h * w)), pixel)
        return b.mul(b.add(b.mul(at, k.i(batch)), lane), k.i(lanes))

    def _nchw_at(self, k: Kernel, image, cblock, pixel):
        """The NCHW index of (image, the channel block's first channel, pixel)."""
        b = k.b
        _, c, h, w = self.shape
        first = b.add(b.mul(image, k.i(c)), b.mul(cblock, k.i(LANES16)))
        return b.add(b.mul(first, k.i(h * w)), pixel)

    def _by_blocks(self, k: Kernel, body) -> None:
        """`body(cblock, channels, pixel0, False)` for each channel block of an image (its
        channels: 16, or fewer in a last partial block) and each 16 pixels of the plane;
        then `body(cblock, channels, pixel, True)` for each pixel past the last 16."""
        _, c, h, w = self.shape
        full, part = divmod(c, LANES16)
        chunks, tail = divmod(h * w, LANES16)

        def block(cblock, channels):
            with k.loop(chunks, name="chunk") as q:
                body(cblock, channels, k.b.mul(q, k.i(LANES16)), False)
            if tail:
                with k.loop(h * w, start=chunks * LANES16, name="tail") as pixel:
                    body(cblock, channels, pixel, True)

        if full:
            with k.loop(full, name="cblock") as cblock:
                block(cblock, LANES16)
        if part:
            block(k.i(full), part)

    def _walk(self, k: Kernel, move) -> None:
        """For every blocked position: `move(blocked index, NCHW index or None for padding)`."""
        b = k.b
        n, c, h, w = self.shape
        nb, cb = self.blocked[:2]
        with (
            k.loop(nb, name="nb") as i0,
            k.loop(cb, name="cb") as c0,
            k.loop(h * w, name="hw") as p,
            k.loop(self.batch, name="bi") as bi,
            k.loop(self.lanes, name="li") as li,
        ):
            blocked = b.add(
                b.mul(b.add(b.mul(b.add(b.mul(i0, k.i(cb)), c0), k.i(h * w)), p), k.i(self.batch)),
                bi,
            )
            blocked = b.add(b.mul(blocked, k.i(self.lanes)), li)
            ni = b.add(b.mul(i0, k.i(self.batch)), bi)
            ci = b.add(b.mul(c0, k.i(self.lanes)), li)
            inside = b.and_(b.icmp_signed("<", ni, k.i(n)), b.icmp_signed("<", ci, k.i(c)))
            flat = b.add(b.mul(b.add(b.mul(ni, k.i(c)), ci), k.i(h * w)), p)
            move(blocked, flat, inside)


@dataclass(frozen=True)
class PackActivation(_Blocked):
    kind: ClassVar[str] = "pack_activation"

    def buffers(self):
        return (Buffer("x", self.shape, self.dtype), Buffer("y", self.blocked, self.dtype, "out"))

    def emit(self, k: Kernel) -> None:
        t = DTYPES[self.dtype]
        zero = ir.Constant(t, 0.0 if self.dtype == "float32" else 0)
        if self.transposing:
            self._emit_transposing(k)
            return

        def move(blocked, flat, inside):
            safe = k.b.select(inside, flat, k.i(0))
            k.store(k.b.select(inside, k.load(k.arg["x"], t, safe), zero), k.arg["y"], blocked)

        self._walk(k, move)

    def _emit_transposing(self, k: Kernel) -> None:
        """Each 16 channels x 16 pixels loaded as 16 rows (a partial block's missing
        channels zero), transposed, stored as 16 pixels of 16 lanes; the pixels past the
        last 16 a byte at a time; an image past N zero."""
        b = k.b
        n, c, h, w = self.shape
        x, y = k.arg["x"], k.arg["y"]
        nb, cb, _, _, batch, _ = self.blocked
        zeros = ir.Constant(VEC16, [0] * LANES16)
        with k.loop(nb * batch, name="image") as image:
            block, lane = b.udiv(image, k.i(batch)), b.urem(image, k.i(batch))

            def body(cblock, channels, pixel, tail):
                at = self._nchw_at(k, image, cblock, pixel)
                if tail:
                    for li in range(LANES16):
                        value = (
                            k.load(x, I8, b.add(at, k.i(li * h * w)))
                            if li < channels
                            else ir.Constant(I8, 0)
                        )
                        k.store(value, y, b.add(self._at(k, block, lane, cblock, pixel), k.i(li)))
                    return
                rows = [
                    k.load(x, VEC16, b.add(at, k.i(li * h * w))) if li < channels else zeros
                    for li in range(LANES16)
                ]
                for j, column in enumerate(k.transpose16(rows)):
                    to = self._at(k, block, lane, cblock, b.add(pixel, k.i(j)))
                    k.store(column, y, to)

            with b.if_else(b.icmp_unsigned("<", image, k.i(n))) as (present, missing):
                with present:
                    self._by_blocks(k, body)
                with (  # an image past N: zeros in its batch lane
                    missing,
                    k.loop(cb, name="zb") as cblock,
                    k.loop(h * w, name="zp") as pixel,
                ):
                    k.store(zeros, y, self._at(k, block, lane, cblock, pixel))


@dataclass(frozen=True)
class UnpackActivation(_Blocked):
    kind: ClassVar[str] = "unpack_activation"

    def buffers(self):
        return (Buffer("x", self.blocked, self.dtype), Buffer("y", self.shape, self.dtype, "out"))

    def emit(self, k: Kernel) -> None:
        t = DTYPES[self.dtype]
        if self.transposing:
            self._emit_transposing(k)
            return

        def move(blocked, flat, inside):
            with k.b.if_then(inside):
                k.store(k.load(k.arg["x"], t, blocked), k.arg["y"], flat)

        self._walk(k, move)

    def _emit_transposing(self, k: Kernel) -> None:
        """Each 16 pixels of 16 lanes loaded, transposed, stored as the block's channel
        rows (a partial block's first ones); the pixels past the last 16 a byte at a time."""
        b = k.b
        n, c, h, w = self.shape
        x, y = k.arg["x"], k.arg["y"]
        batch = self.batch
        with k.loop(n, name="image") as image:
            block, lane = b.udiv(image, k.i(batch)), b.urem(image, k.i(batch))

            def body(cblock, channels, pixel, tail):
                to = self._nchw_at(k, image, cblock, pixel)
                if tail:
                    at = self._at(k, block, lane, cblock, pixel)
                    for li in range(channels):
                        value = k.load(x, I8, b.add(at, k.i(li)))
                        k.store(value, y, b.add(to, k.i(li * h * w)))
                    return
                columns = [
                    k.load(x, VEC16, self._at(k, block, lane, cblock, b.add(pixel, k.i(j))))
                    for j in range(LANES16)
                ]
                for li, row in enumerate(k.transpose16(columns)[:channels]):
                    k.store(row, y, b.add(to, k.i(li * h * w)))

            self._by_blocks(k, body)


CHUNK = 8  # bytes a tap run moves at a time


@dataclass(frozen=True)
class PackIm2col(Spec):
    """`runtime.layout.pack_im2col` of a one-byte NCHW tensor: its taps folded into the
    channels (channel r = c*KH*KW + kh*KW + kw) and packed as an activation of shape
    (N, C*KH*KW, OH, OW), the padding holding `pad_value`, lanes past C*KH*KW and images past
    N zero.

    An output pixel's channels are C*KH runs of KW neighbouring input bytes (a window row), so
    each image is first copied into a padded plane (`padded`), then every pixel's channels are
    gathered into `row` a run at a time, 8 bytes a move (a run's last move spills into the
    next run's bytes, written after it; the lanes past C*KH*KW are zeroed last), and the row
    goes out as its blocks of L lanes. numpy's copy per folded channel writes every byte on
    its own: ResNet-18's first conv packed in 0.31 ms against numpy's 0.77 ms (scratch timings,
    fastest of 50; the resnet18 suite's `host_ms_measured_here` against its `host_ms_numpy`
    shows the whole host's)."""

    shape: tuple[int, int, int, int]  # NCHW
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    pad_value: int
    batch: int
    lanes: int
    dtype: str = "int8"
    kind: ClassVar[str] = "pack_im2col"

    def __post_init__(self):
        object.__setattr__(self, "shape", positive_shape(self.kind, self.shape, 4))
        for what in ("kernel", "stride"):
            object.__setattr__(
                self, what, positive_shape(f"{self.kind} {what}", getattr(self, what), 2)
            )
        positive_shape(f"{self.kind} blocks (batch, lanes)", (self.batch, self.lanes), 2)
        pad = tuple(self.pad)
        if len(pad) != 2 or any(not isinstance(p, int) or p < 0 for p in pad):
            raise KernelError(f"{self.kind} pad must be 2 ints >= 0, not {self.pad!r}")
        object.__setattr__(self, "pad", pad)
        object.__setattr__(self, "dtype", dtype_of(self.kind, self.dtype, ("int8", "uint8")))
        low, high = (-128, 127) if self.dtype == "int8" else (0, 255)
        if not low <= self.pad_value <= high:
            raise KernelError(
                f"{self.kind} pad_value {self.pad_value} does not fit {self.dtype} ({low}..{high})"
            )
        if min(self.out_hw) < 1:
            raise KernelError(
                f"{self.kind}: a {self.kernel} window with pad {self.pad} does not fit "
                f"an input of {self.shape[2:]}"
            )

    @property
    def padded_hw(self) -> tuple[int, int]:
        return self.shape[2] + 2 * self.pad[0], self.shape[3] + 2 * self.pad[1]

    @property
    def out_hw(self) -> tuple[int, int]:
        (hp, wp), (kh, kw), (sh, sw) = self.padded_hw, self.kernel, self.stride
        return (hp - kh) // sh + 1, (wp - kw) // sw + 1

    @property
    def taps(self) -> int:
        return self.shape[1] * self.kernel[0] * self.kernel[1]

    @property
    def blocked(self) -> tuple[int, ...]:
        oh, ow = self.out_hw
        nb, cb = _ceil(self.shape[0], self.batch), _ceil(self.taps, self.lanes)
        return (nb, cb, oh, ow, self.batch, self.lanes)

    def buffers(self):
        c = self.shape[1]
        hp, wp = self.padded_hw
        cb = self.blocked[1]
        return (
            Buffer("x", self.shape, self.dtype),
            Buffer("y", self.blocked, self.dtype, "out"),
            Buffer("padded", (c * hp * wp + CHUNK,), self.dtype, "work"),
            Buffer("row", (cb * self.lanes + CHUNK,), self.dtype, "work"),
        )

    def emit(self, k: Kernel) -> None:
        b = k.b
        n, c, h, w = self.shape
        (kh, kw), (sh, sw) = self.kernel, self.stride
        hp, wp = self.padded_hw
        nb, cb, oh, ow, batch, lanes = self.blocked
        y, padded, row = (k.arg[name] for name in ("y", "padded", "row"))
        moves = _ceil(kw, CHUNK)
        chunk = vec(I8, CHUNK)
        pad = self.pad_value - 256 if self.pad_value > 127 else self.pad_value  # as a byte
        with k.loop(nb * batch, name="image") as image:
            block, lane = b.udiv(image, k.i(batch)), b.urem(image, k.i(batch))

            def out_at(cblock, oy, ox):
                at = b.add(b.mul(b.add(b.mul(block, k.i(cb)), cblock), k.i(oh)), oy)
                at = b.add(b.mul(b.add(b.mul(at, k.i(ow)), ox), k.i(batch)), lane)
                return b.mul(at, k.i(lanes))

            with b.if_else(b.icmp_unsigned("<", image, k.i(n))) as (present, missing):
                with present:
                    self._fill_padded(k, image, pad)
                    with k.loop(oh, name="oy") as oy, k.loop(ow, name="ox") as ox:
                        corner = b.add(b.mul(oy, k.i(sh * wp)), b.mul(ox, k.i(sw)))
                        # in order: a run's spill, then the next run over it
                        with k.loop(c, name="channel") as ch:
                            plane = b.add(corner, b.mul(ch, k.i(hp * wp)))
                            first = b.mul(ch, k.i(kh * kw))
                            for i in range(kh):
                                for m in range(moves):
                                    at = i * wp + m * CHUNK
                                    v = k.load(padded, chunk, b.add(plane, k.i(at)))
                                    k.store(v, row, b.add(first, k.i(i * kw + m * CHUNK)))
                        for at in range(self.taps, cb * lanes, CHUNK):
                            k.store(ir.Constant(chunk, [0] * CHUNK), row, k.i(at))
                        with k.loop(cb, name="block") as cblock:
                            k.copy(
                                y,
                                out_at(cblock, oy, ox),
                                row,
                                b.mul(cblock, k.i(lanes)),
                                k.i(lanes),
                            )
                with (  # an image past N: zeros in its batch lane
                    missing,
                    k.loop(cb, name="zb") as cblock,
                    k.loop(oh, name="zy") as oy,
                    k.loop(ow, name="zx") as ox,
                    k.loop(lanes, name="zl") as li,
                ):
                    k.store(ir.Constant(I8, 0), y, b.add(out_at(cblock, oy, ox), li))

    def _fill_padded(self, k: Kernel, image, pad: int) -> None:
        """Image `image` of x into `padded`, its border holding the pad value."""
        b = k.b
        _, c, h, w = self.shape
        (ph, pw), (hp, wp) = self.pad, self.padded_hw
        x, padded = k.arg["x"], k.arg["padded"]
        with k.loop(c * hp, name="prow") as prow:
            ch, r = b.udiv(prow, k.i(hp)), b.urem(prow, k.i(hp))
            start = b.mul(prow, k.i(wp))
            inside = b.and_(b.icmp_unsigned(">=", r, k.i(ph)), b.icmp_unsigned("<", r, k.i(ph + h)))
            with b.if_else(inside) as (data, border):
                with data:
                    if pw:
                        k.fill(b.gep(padded, [start], source_etype=I8), k.i(pw), pad, CHUNK)
                    src = b.mul(
                        b.add(b.mul(b.add(b.mul(image, k.i(c)), ch), k.i(h)), b.sub(r, k.i(ph))),
                        k.i(w),
                    )
                    k.copy(padded, b.add(start, k.i(pw)), x, src, k.i(w))
                    if pw:
                        right = b.gep(padded, [b.add(start, k.i(pw + w))], source_etype=I8)
                        k.fill(right, k.i(pw), pad, CHUNK)
                with border:
                    k.fill(b.gep(padded, [start], source_etype=I8), k.i(wp), pad, CHUNK)
