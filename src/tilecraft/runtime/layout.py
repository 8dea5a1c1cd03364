"""Logical tensors <-> the accelerator's blocked DRAM layouts (numpy only: boards pack too).

A program's buffer may carry a `Layout` saying how a logical tensor maps to the array stored in
DRAM; `pack` and `unpack` follow it. Every layout is a frozen record (JSON through
`tilecraft.serial`), with `logical` the tensor's shape and `stored_shape(cfg)` the array's:

- `Activation`: NCHW -> (N/B, C/L, H, W, B, L), N and C zero-padded to the blocks; L is
  BLOCK_IN (`Lanes.INP`: a GEMM input) or BLOCK_OUT (`Lanes.OUT`: an accumulator output).
- `Weight`: OIHW -> (O/Bo, I/Bi, KH, KW, Bo, Bi), O and I zero-padded; `folded` stores it as
  (O, I*KH*KW, 1, 1) first (the taps folded into the channels, see `Im2col`).
- `DenseWeight`: a dense layer's (K, N) matrix as an (N, K, 1, 1) `Weight`.
- `DepthwiseWeight`: a depthwise layer's (C, 1, KH, KW) kernels as (C/B, 1, KH, KW, B, B), the
  channels of block b on the diagonal of its (B x B) blocks (BLOCK_OUT = BLOCK_IN = B).
- `DepthwiseTaps`: the same kernels as the GEMM core's depthwise mode reads them (configs with
  `depthwise_window`): (C/B, 1, 1, P, B, B), row c of element (b, p) holding channel b*B + c's
  taps p*B .. p*B + B - 1 (tap t = kh*KW + kw, zero past KH*KW), P = ceil(KH*KW / B).
- `Im2col`: the NCHW input of a convolution with its taps folded into the channels: channel
  r = c*KH*KW + kh*KW + kw of output pixel (oh, ow) holds x[n, c, oh*SH + kh - PH,
  ow*SW + kw - PW] (zero outside), packed as an `Activation` of shape (N, C*KH*KW, OH, OW).
- `Rows`: a matrix (M, K) as the activation (B, K, ceil(M/B), 1), row m = b*ceil(M/B) + h, so
  a dense layer fills every batch lane whatever M is.
- `Channels`: a per-channel int32 vector (C,) as accumulator rows (C/Bo, B, Bo), each value
  repeated over the batch lanes.
- `Matrix` / `TransposedMatrix`: the example GEMM's operands, tiles of (B x L) for A and C,
  and B stored transposed in (Bo x Bi) tiles: (M/B, K/Bi, B, Bi), (N/Bo, K/Bi, Bo, Bi).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

import numpy as np

from tilecraft.errors import DeviceError, ProgramError
from tilecraft.hw.config import HwConfig
from tilecraft.runtime.tensors import check_names, check_tensor


class Lanes(str, Enum):
    """The block width a tensor's channels are padded to."""

    INP = "inp"  # BLOCK_IN: a GEMM input
    OUT = "out"  # BLOCK_OUT: an accumulator output

    def width(self, cfg: HwConfig) -> int:
        return cfg.block_in if self == Lanes.INP else cfg.block_out


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class _Layout:
    logical: tuple[int, ...]
    rank: ClassVar[int]

    def __post_init__(self) -> None:
        shape = tuple(self.logical)
        object.__setattr__(self, "logical", shape)
        if len(shape) != self.rank or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape
        ):
            raise ProgramError(
                f"a {self.kind} layout's logical shape must be {self.rank} positive ints, "
                f"not {self.logical!r}"
            )

    def check(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.shape != self.logical:
            raise ProgramError(
                f"a {self.kind} tensor of logical shape {self.logical} was given shape {x.shape}"
            )
        return x


@dataclass(frozen=True)
class Activation(_Layout):
    logical: tuple[int, ...]
    lanes: Lanes = Lanes.INP
    kind: ClassVar[str] = "activation"
    rank: ClassVar[int] = 4

    def stored_shape(self, cfg: HwConfig) -> tuple[int, ...]:
        n, c, h, w = self.logical
        lanes = self.lanes.width(cfg)
        return (_ceil(n, cfg.batch), _ceil(c, lanes), h, w, cfg.batch, lanes)

    def pack(self, cfg: HwConfig, x: np.ndarray) -> np.ndarray:
        return pack_activation(self.check(x), cfg.batch, self.lanes.width(cfg))

    def unpack(self, cfg: HwConfig, p: np.ndarray) -> np.ndarray:
        return unpack_activation(p, *self.logical[:2])


@dataclass(frozen=True)
class Weight(_Layout):
    logical: tuple[int, ...]
    folded: bool = False
    kind: ClassVar[str] = "weight"
    rank: ClassVar[int] = 4

    def _kernel(self) -> tuple[int, int, int, int]:
        o, i, kh, kw = self.logical
        return (o, i * kh * kw, 1, 1) if self.folded else (o, i, kh, kw)

    def stored_shape(self, cfg: HwConfig) -> tuple[int, ...]:
        o, i, kh, kw = self._kernel()
        bo, bi = cfg.block_out, cfg.block_in
        return (_ceil(o, bo), _ceil(i, bi), kh, kw, bo, bi)

    def pack(self, cfg: HwConfig, x: np.ndarray) -> np.ndarray:
        x = self.check(x).reshape(self._kernel())
        return pack_weight(x, cfg.block_out, cfg.block_in)

    def unpack(self, cfg: HwConfig, p: np.ndarray) -> np.ndarray:
        o, i, _, _ = self._kernel()
        return unpack_weight(p, o, i).reshape(self.logical)


@dataclass(frozen=True)
class DenseWeight(_Layout):
    logical: tuple[int, ...]  # (K, N)
    kind: ClassVar[str] = "dense_weight"
    rank: ClassVar[int] = 2

    def stored_shape(self, cfg: HwConfig) -> tuple[int, ...]:
        k, n = self.logical
        return Weight((n, k, 1, 1)).stored_shape(cfg)

    def pack(self, cfg: HwConfig, x: np.ndarray) -> np.ndarray:
        return pack_weight(self.check(x).T[:, :, None, None], cfg.block_out, cfg.block_in)

    def unpack(self, cfg: HwConfig, p: np.ndarray) -> np.ndarray:
        k, n = self.logical
        return np.ascontiguousarray(unpack_weight(p, n, k)[:, :, 0, 0].T)


@dataclass(frozen=True)
class DepthwiseWeight(_Layout):
    logical: tuple[int, ...]  # (C, 1, KH, KW)
    kind: ClassVar[str] = "depthwise_weight"
    rank: ClassVar[int] = 4

    def _block(self, cfg: HwConfig) -> int:
        if cfg.block_out != cfg.block_in:
            raise ProgramError(
                f"a depthwise weight needs BLOCK_OUT == BLOCK_IN, not "
                f"{cfg.block_out} and {cfg.block_in}"
            )
        return cfg.block_out

    def stored_shape(self, cfg: HwConfig) -> tuple[int, ...]:
        c, _, kh, kw = self.logical
        b = self._block(cfg)
        return (_ceil(c, b), 1, kh, kw, b, b)

    def pack(self, cfg: HwConfig, x: np.ndarray) -> np.ndarray:
        c, _, kh, kw = self.logical
        b = self._block(cfg)
        w = np.zeros((_ceil(c, b) * b, kh, kw), self.check(x).dtype)
        w[:c] = x[:, 0]
        blocks = w.reshape(-1, b, kh, kw).transpose(0, 2, 3, 1)  # (C/B, KH, KW, B)
        out = np.zeros((blocks.shape[0], 1, kh, kw, b, b), w.dtype)
        lane = np.arange(b)
        out[:, 0, :, :, lane, lane] = blocks.transpose(3, 0, 1, 2)
        return out

    def unpack(self, cfg: HwConfig, p: np.ndarray) -> np.ndarray:
        c = self.logical[0]
        lane = np.arange(self._block(cfg))
        diag = p[:, 0, :, :, lane, lane]  # (B, C/B, KH, KW)
        w = diag.transpose(1, 0, 2, 3).reshape(-1, *diag.shape[2:])[:c]
        return np.ascontiguousarray(w[:, None])


@dataclass(frozen=True)
class DepthwiseTaps(_Layout):
    logical: tuple[int, ...]  # (C, 1, KH, KW)
    kind: ClassVar[str] = "depthwise_taps"
    rank: ClassVar[int] = 4

    def _passes(self, cfg: HwConfig) -> int:
        return _ceil(self.logical[2] * self.logical[3], cfg.block_in)

    def stored_shape(self, cfg: HwConfig) -> tuple[int, ...]:
        c, b = self.logical[0], cfg.block_out
        return (_ceil(c, b), 1, 1, self._passes(cfg), b, cfg.block_in)

    def pack(self, cfg: HwConfig, x: np.ndarray) -> np.ndarray:
        c, _, kh, kw = self.logical
        b, bi, passes = cfg.block_out, cfg.block_in, self._passes(cfg)
        taps = np.zeros((_ceil(c, b) * b, passes * bi), self.check(x).dtype)
        taps[:c, : kh * kw] = x.reshape(c, kh * kw)
        blocks = taps.reshape(-1, b, passes, bi).transpose(0, 2, 1, 3)  # (C/B, P, B, Bi)
        return np.ascontiguousarray(blocks[:, None, None])

    def unpack(self, cfg: HwConfig, p: np.ndarray) -> np.ndarray:
        c, _, kh, kw = self.logical
        taps = p[:, 0, 0].transpose(0, 2, 1, 3).reshape(-1, p.shape[3] * p.shape[5])
        return np.ascontiguousarray(taps[:c, : kh * kw].reshape(c, 1, kh, kw))


@dataclass(frozen=True)
class Im2col(_Layout):
    logical: tuple[int, ...]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    pad_value: int = 0  # what the padding holds (the input's zero point)
    kind: ClassVar[str] = "im2col"
    rank: ClassVar[int] = 4

    def _columns(self) -> tuple[int, int, int, int]:
        n, c, h, w = self.logical
        (kh, kw), (sh, sw), (ph, pw) = self.kernel, self.stride, self.pad
        return (n, c * kh * kw, (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1)

    def stored_shape(self, cfg: HwConfig) -> tuple[int, ...]:
        return Activation(self._columns()).stored_shape(cfg)

    def pack(self, cfg: HwConfig, x: np.ndarray) -> np.ndarray:
        return pack_im2col(
            self.check(x),
            self.kernel,
            self.stride,
            self.pad,
            self.pad_value,
            cfg.batch,
            cfg.block_in,
        )

    def unpack(self, cfg: HwConfig, p: np.ndarray) -> np.ndarray:
        raise ProgramError("an im2col layout is an input only: its taps overlap")


@dataclass(frozen=True)
class Rows(_Layout):
    logical: tuple[int, ...]  # (M, K)
    lanes: Lanes = Lanes.INP
    kind: ClassVar[str] = "rows"
    rank: ClassVar[int] = 2

    def stored_shape(self, cfg: HwConfig) -> tuple[int, ...]:
        m, k = self.logical
        return Activation((cfg.batch, k, _ceil(m, cfg.batch), 1), self.lanes).stored_shape(cfg)

    def pack(self, cfg: HwConfig, x: np.ndarray) -> np.ndarray:
        rows = rows_as_activation(self.check(x), cfg.batch)
        return pack_activation(rows, cfg.batch, self.lanes.width(cfg))

    def unpack(self, cfg: HwConfig, p: np.ndarray) -> np.ndarray:
        m, n = self.logical
        return activation_as_rows(unpack_activation(p, p.shape[0] * p.shape[4], n), m)


@dataclass(frozen=True)
class Channels(_Layout):
    logical: tuple[int, ...]  # (C,)
    kind: ClassVar[str] = "channels"
    rank: ClassVar[int] = 1

    def stored_shape(self, cfg: HwConfig) -> tuple[int, ...]:
        return (_ceil(self.logical[0], cfg.block_out), cfg.batch, cfg.block_out)

    def pack(self, cfg: HwConfig, x: np.ndarray) -> np.ndarray:
        x = self.check(x)
        lanes = cfg.block_out
        padded = np.zeros(_ceil(x.shape[0], lanes) * lanes, x.dtype)
        padded[: x.shape[0]] = x
        rows = padded.reshape(-1, 1, lanes)
        return np.ascontiguousarray(np.broadcast_to(rows, (rows.shape[0], cfg.batch, lanes)))

    def unpack(self, cfg: HwConfig, p: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(p[:, 0, :].reshape(-1)[: self.logical[0]])


@dataclass(frozen=True)
class Matrix(_Layout):
    logical: tuple[int, ...]  # (rows, columns)
    lanes: Lanes = Lanes.INP
    kind: ClassVar[str] = "matrix"
    rank: ClassVar[int] = 2

    def stored_shape(self, cfg: HwConfig) -> tuple[int, ...]:
        r, c = self.logical
        lanes = self.lanes.width(cfg)
        return (_ceil(r, cfg.batch), _ceil(c, lanes), cfg.batch, lanes)

    def pack(self, cfg: HwConfig, x: np.ndarray) -> np.ndarray:
        return _pack_tiles(self.check(x), cfg.batch, self.lanes.width(cfg))

    def unpack(self, cfg: HwConfig, p: np.ndarray) -> np.ndarray:
        return _unpack_tiles(p, self.logical)


@dataclass(frozen=True)
class TransposedMatrix(_Layout):
    logical: tuple[int, ...]  # (K, N), stored as its transpose in (Bo x Bi) tiles
    kind: ClassVar[str] = "transposed_matrix"
    rank: ClassVar[int] = 2

    def stored_shape(self, cfg: HwConfig) -> tuple[int, ...]:
        k, n = self.logical
        return (_ceil(n, cfg.block_out), _ceil(k, cfg.block_in), cfg.block_out, cfg.block_in)

    def pack(self, cfg: HwConfig, x: np.ndarray) -> np.ndarray:
        return _pack_tiles(self.check(x).T, cfg.block_out, cfg.block_in)

    def unpack(self, cfg: HwConfig, p: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(_unpack_tiles(p, self.logical[::-1]).T)


Layout = (
    Activation
    | Weight
    | DenseWeight
    | DepthwiseWeight
    | DepthwiseTaps
    | Im2col
    | Rows
    | Channels
    | Matrix
    | TransposedMatrix
)


# ---- the array transforms ------------------------------------------------------------------
def pack_activation(x: np.ndarray, batch: int, lanes: int) -> np.ndarray:
    n, c, h, w = x.shape
    nb, cb = _ceil(n, batch), _ceil(c, lanes)
    padded = np.zeros((nb * batch, cb * lanes, h, w), x.dtype)
    padded[:n, :c] = x
    blocks = padded.reshape(nb, batch, cb, lanes, h, w)
    return np.ascontiguousarray(blocks.transpose(0, 2, 4, 5, 1, 3))


def unpack_activation(p: np.ndarray, n: int, c: int) -> np.ndarray:
    nb, cb, h, w, batch, lanes = p.shape
    full = p.transpose(0, 4, 1, 5, 2, 3).reshape(nb * batch, cb * lanes, h, w)
    return np.ascontiguousarray(full[:n, :c])


def pack_weight(w: np.ndarray, block_out: int, block_in: int) -> np.ndarray:
    o, i, kh, kw = w.shape
    ob, ib = _ceil(o, block_out), _ceil(i, block_in)
    padded = np.zeros((ob * block_out, ib * block_in, kh, kw), w.dtype)
    padded[:o, :i] = w
    blocks = padded.reshape(ob, block_out, ib, block_in, kh, kw)
    return np.ascontiguousarray(blocks.transpose(0, 2, 4, 5, 1, 3))


def unpack_weight(p: np.ndarray, o: int, i: int) -> np.ndarray:
    ob, ib, kh, kw, bo, bi = p.shape
    full = p.transpose(0, 4, 1, 5, 2, 3).reshape(ob * bo, ib * bi, kh, kw)
    return np.ascontiguousarray(full[:o, :i])


def im2col(x: np.ndarray, kernel, stride, pad, pad_value: int = 0) -> np.ndarray:
    """(N, C, H, W) -> (N, C*KH*KW, OH, OW) with the taps folded into the channels, the
    padding holding `pad_value`."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    padded = np.full((n, c, h + 2 * ph, w + 2 * pw), pad_value, x.dtype)
    padded[:, :, ph : ph + h, pw : pw + w] = x
    cols = np.empty((n, c, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = padded[:, :, i : i + sh * oh : sh, j : j + sw * ow : sw]
    return cols.reshape(n, c * kh * kw, oh, ow)


def pack_im2col(
    x: np.ndarray, kernel, stride, pad, pad_value: int, batch: int, lanes: int
) -> np.ndarray:
    """pack_activation(im2col(x, ...), batch, lanes), written straight into the blocked layout:
    one strided copy per folded channel, with no (N, C*KH*KW, OH, OW) array in between and no
    transpose after it (ResNet-18's first layer: 2 MB packed in about half the time)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    nb, cb = _ceil(n, batch), _ceil(c * kh * kw, lanes)
    padded = np.zeros((nb * batch, c, h + 2 * ph, w + 2 * pw), x.dtype)  # missing images: 0
    padded[:n] = pad_value
    padded[:n, :, ph : ph + h, pw : pw + w] = x
    images = padded.reshape(nb, batch, c, h + 2 * ph, w + 2 * pw)
    out = np.zeros((nb, cb, oh, ow, batch, lanes), x.dtype)  # lanes past C*KH*KW: 0
    for ch in range(c):
        for i in range(kh):
            for j in range(kw):
                f = (ch * kh + i) * kw + j
                tap = images[:, :, ch, i : i + sh * oh : sh, j : j + sw * ow : sw]
                out[:, f // lanes, :, :, :, f % lanes] = tap.transpose(0, 2, 3, 1)
    return out


def rows_as_activation(x: np.ndarray, batch: int) -> np.ndarray:
    m, k = x.shape
    mb = _ceil(m, batch)
    padded = np.zeros((batch * mb, k), x.dtype)
    padded[:m] = x
    return padded.reshape(batch, mb, k).transpose(0, 2, 1)[..., None]


def activation_as_rows(a: np.ndarray, m: int) -> np.ndarray:
    batch, k, mb, _ = a.shape
    return np.ascontiguousarray(a[..., 0].transpose(0, 2, 1).reshape(batch * mb, k)[:m])


def _pack_tiles(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    r, c = x.shape
    padded = np.zeros((_ceil(r, rows) * rows, _ceil(c, cols) * cols), x.dtype)
    padded[:r, :c] = x
    tiles = padded.reshape(padded.shape[0] // rows, rows, padded.shape[1] // cols, cols)
    return np.ascontiguousarray(tiles.transpose(0, 2, 1, 3))


def _unpack_tiles(p: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    rb, cb, rows, cols = p.shape
    full = p.transpose(0, 2, 1, 3).reshape(rb * rows, cb * cols)
    return np.ascontiguousarray(full[: shape[0], : shape[1]])


# ---- programs' tensors ----------------------------------------------------------------------
def pack(cfg: HwConfig, layout: Layout, x: np.ndarray) -> np.ndarray:
    """The stored array of logical tensor `x` under `layout`."""
    return layout.pack(cfg, x)


def unpack(cfg: HwConfig, layout: Layout, p: np.ndarray) -> np.ndarray:
    """The logical tensor stored in `p` under `layout`."""
    return layout.unpack(cfg, p)


def logical_shape(buf) -> tuple[int, ...]:
    return buf.layout.logical if buf.layout is not None else buf.shape


def pack_inputs(program, logical: dict[str, np.ndarray], kernels=None) -> dict[str, np.ndarray]:
    """Device inputs from logical tensors, each checked first (`runtime.tensors`): every input
    named, each of its logical shape, integers that fit the buffer's dtype. Buffers without a
    layout pass through (the device checks them). `kernels` (host kernels with a `packer`:
    `runtime.kernels.HostStepKernels`) packs the inputs it has a kernel for, into the same
    bytes as numpy's."""
    check_names(program.name, [b.name for b in program.inputs], logical)
    out = {}
    for buf in program.inputs:
        value = logical[buf.name]
        if buf.layout is not None:
            value = check_tensor(buf.name, value, buf.layout.logical, buf.dtype)
            packer = kernels.packer(program.config, buf) if kernels is not None else None
            value = packer(value) if packer is not None else buf.layout.pack(program.config, value)
        out[buf.name] = value
    return out


def unpack_outputs(program, outputs: dict[str, np.ndarray], kernels=None) -> dict[str, np.ndarray]:
    """Logical tensors from a run's outputs by name; `kernels` (with an `unpacker`) unpacks
    the stored arrays it has a kernel for (numpy the rest, and any array not of the buffer's
    stored shape and dtype, which numpy's checks name)."""
    if not isinstance(outputs, dict):
        raise DeviceError(
            f"unpack_outputs takes a run's outputs by name (result.outputs), not {outputs!r}"
        )
    out = {}
    for name, value in outputs.items():
        buf = program.buffer(name)
        if buf.layout is None:
            out[name] = value
            continue
        unpacker = kernels.unpacker(program.config, buf) if kernels is not None else None
        stored = isinstance(value, np.ndarray) and value.shape == tuple(buf.shape)
        if unpacker is not None and stored and value.dtype == np.dtype(buf.dtype):
            out[name] = unpacker(value)
        else:
            out[name] = buf.layout.unpack(program.config, value)
    return out


def random_inputs(program, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random logical inputs: the dtype's full range unless the buffer names a `value_range`."""
    out = {}
    for b in program.inputs:
        dtype = np.dtype(b.dtype)
        info = np.iinfo(dtype)
        lo, hi = b.value_range or (int(info.min), int(info.max))
        out[b.name] = rng.integers(lo, hi + 1, logical_shape(b), dtype=dtype)
    return out
