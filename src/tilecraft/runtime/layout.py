"""Logical tensors <-> the accelerator's blocked DRAM layouts (numpy only: boards pack too).

A program's buffers carry a `layout` dict saying how a logical tensor maps to the stored array;
`pack` and `unpack` follow it. Kinds:

- ``activation``: NCHW -> (N/B, C/Bi, H, W, B, Bi), N and C zero-padded to the blocks (`block`
  says which lane width: "inp" for BLOCK_IN, "out" for BLOCK_OUT).
- ``weight``: OIHW -> (O/Bo, I/Bi, KH, KW, Bo, Bi), O and I zero-padded.
- ``im2col``: NCHW input of a convolution with its kernel taps folded into the channels:
  channel r = c*KH*KW + kh*KW + kw of output pixel (oh, ow) holds
  x[n, c, oh*SH + kh - PH, ow*SW + kw - PW] (zero outside), then packed as an activation of
  shape (N, C*KH*KW, OH, OW). The matching weights are OIHW reshaped to (O, I*KH*KW, 1, 1).
- ``rows``: a matrix (M, K) as the activation (B, K, ceil(M/B), 1), row m = b*ceil(M/B) + h,
  so a dense layer fills every batch lane whatever M is.
- ``channels``: a per-channel int32 vector (C,) as accumulator rows (C/Bo, B, Bo), each value
  repeated over the batch lanes.
"""

from __future__ import annotations

import numpy as np

from tilecraft.errors import ProgramError
from tilecraft.hw.config import HwConfig


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _lanes(cfg: HwConfig, block: str) -> int:
    return cfg.block_in if block == "inp" else cfg.block_out


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


def im2col(x: np.ndarray, kernel, stride, pad) -> np.ndarray:
    """(N, C, H, W) -> (N, C*KH*KW, OH, OW) with the taps folded into the channels."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    padded = np.zeros((n, c, h + 2 * ph, w + 2 * pw), x.dtype)
    padded[:, :, ph : ph + h, pw : pw + w] = x
    cols = np.empty((n, c, kh, kw, oh, ow), x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = padded[:, :, i : i + sh * oh : sh, j : j + sw * ow : sw]
    return cols.reshape(n, c * kh * kw, oh, ow)


def rows_as_activation(x: np.ndarray, batch: int) -> np.ndarray:
    m, k = x.shape
    mb = _ceil(m, batch)
    padded = np.zeros((batch * mb, k), x.dtype)
    padded[:m] = x
    return padded.reshape(batch, mb, k).transpose(0, 2, 1)[..., None]


def activation_as_rows(a: np.ndarray, m: int) -> np.ndarray:
    batch, k, mb, _ = a.shape
    return np.ascontiguousarray(a[..., 0].transpose(0, 2, 1).reshape(batch * mb, k)[:m])


def pack(cfg: HwConfig, layout: dict, x: np.ndarray) -> np.ndarray:
    """The stored array of logical tensor `x` under `layout`."""
    kind = _kind(layout)
    x = np.asarray(x)
    _check_shape(layout, x)
    if kind == "activation":
        return pack_activation(x, cfg.batch, _lanes(cfg, layout.get("block", "inp")))
    if kind == "weight":
        if layout.get("dense"):  # a dense layer's (K, N) matrix is a 1x1 kernel
            x = x.T[:, :, None, None]
        o = x.shape[0]
        if layout.get("folded"):
            x = x.reshape(o, -1, 1, 1)
        return pack_weight(x, cfg.block_out, cfg.block_in)
    if kind == "im2col":
        cols = im2col(x, layout["kernel"], layout["stride"], layout["pad"])
        return pack_activation(cols, cfg.batch, cfg.block_in)
    if kind == "rows":
        lanes = _lanes(cfg, layout.get("block", "inp"))
        return pack_activation(rows_as_activation(x, cfg.batch), cfg.batch, lanes)
    if kind == "channels":
        lanes = cfg.block_out
        c = x.shape[0]
        padded = np.zeros(_ceil(c, lanes) * lanes, np.int32)
        padded[:c] = x
        return np.ascontiguousarray(
            np.broadcast_to(padded.reshape(-1, 1, lanes), (padded.size // lanes, cfg.batch, lanes))
        )
    raise AssertionError(kind)


def unpack(cfg: HwConfig, layout: dict, p: np.ndarray) -> np.ndarray:
    """The logical tensor stored in `p` under `layout` (only for outputs and activations)."""
    kind = _kind(layout)
    shape = layout["logical"]
    if kind == "activation":
        return unpack_activation(p, shape[0], shape[1])
    if kind == "rows":
        m, n = shape
        return activation_as_rows(unpack_activation(p, p.shape[0] * p.shape[4], n), m)
    if kind == "weight":
        if layout.get("dense"):  # (K, N) stored as an (N, K, 1, 1) kernel
            return np.ascontiguousarray(unpack_weight(p, shape[1], shape[0])[:, :, 0, 0].T)
        o, i, kh, kw = shape
        if layout.get("folded"):
            return unpack_weight(p, o, i * kh * kw).reshape(o, i, kh, kw)
        return unpack_weight(p, o, i)
    if kind == "channels":
        return np.ascontiguousarray(p[:, 0, :].reshape(-1)[: shape[0]])
    raise ProgramError(f"a {kind!r} layout cannot be unpacked")


_KINDS = ("activation", "weight", "im2col", "rows", "channels")


def _kind(layout: dict | None) -> str:
    kind = (layout or {}).get("pack")
    if kind not in _KINDS:
        raise ProgramError(f"unknown buffer layout {kind!r}; known: {', '.join(_KINDS)}")
    return kind


def _check_shape(layout: dict, x: np.ndarray) -> None:
    want = tuple(layout["logical"])
    if x.shape != want:
        raise ProgramError(
            f"a {layout['pack']} tensor of logical shape {want} was given shape {x.shape}"
        )


def is_packed(layout: dict | None) -> bool:
    """Whether a buffer's layout is one of the runtime's packings (else stored as given)."""
    return (layout or {}).get("pack") in _KINDS


def logical_shape(buf) -> tuple[int, ...]:
    return tuple(buf.layout["logical"]) if is_packed(buf.layout) else buf.shape


def pack_inputs(program, logical: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Device inputs from logical tensors (buffers without a runtime packing pass through)."""
    out = {}
    for name, value in logical.items():
        buf = program.buffer(name)
        out[name] = pack(program.config, buf.layout, value) if is_packed(buf.layout) else value
    return out


def unpack_outputs(program, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for name, value in outputs.items():
        buf = program.buffer(name)
        out[name] = unpack(program.config, buf.layout, value) if is_packed(buf.layout) else value
    return out


def random_inputs(program, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random logical inputs: the dtype's full range unless the layout names a `range`."""
    out = {}
    for b in program.inputs:
        dtype = np.dtype(b.dtype)
        info = np.iinfo(dtype)
        lo, hi = (b.layout or {}).get("range", (int(info.min), int(info.max)))
        out[b.name] = rng.integers(lo, int(hi) + 1, logical_shape(b), dtype=dtype)
    return out
