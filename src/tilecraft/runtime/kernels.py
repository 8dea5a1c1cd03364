"""Calling a compiled host kernel (JIT-compiled here, or from a prebuilt shared object on a
board): every kernel is `void f(void **args)`, one pointer per buffer of its signature, in
order. `NativeKernel` checks the inputs against the signature, allocates the outputs and the
scratch space, and calls it. numpy and ctypes only."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from tilecraft.errors import DeviceError


@dataclass(frozen=True)
class BufferSig:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    role: str  # "in", "out", "work"

    @classmethod
    def from_dict(cls, d: dict) -> BufferSig:
        return cls(d["name"], tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"]), d["role"])


class NativeKernel:
    """A callable kernel: `kernel(*inputs)` returns its output (or a tuple of outputs)."""

    def __init__(self, signature: dict, address: int, owner=None):
        self.symbol = signature["symbol"]
        self.kind = signature["kind"]
        self.buffers = tuple(BufferSig.from_dict(b) for b in signature["buffers"])
        self.inputs = [b for b in self.buffers if b.role == "in"]
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
        self._owner = owner  # keeps the code the address points into alive

    def __call__(self, *inputs: np.ndarray):
        if len(inputs) != len(self.inputs):
            names = ", ".join(b.name for b in self.inputs)
            raise DeviceError(f"kernel {self.symbol} takes {len(self.inputs)} inputs ({names}), "
                              f"not {len(inputs)}")  # fmt: skip
        given = iter(inputs)
        arrays, outputs = [], []
        for b in self.buffers:
            if b.role == "in":
                a = np.asarray(next(given))
                if a.shape != b.shape or a.dtype != b.dtype:
                    raise DeviceError(
                        f"kernel {self.symbol}: input {b.name!r} is {a.dtype}{list(a.shape)}, "
                        f"expected {b.dtype}{list(b.shape)}"
                    )
                a = np.ascontiguousarray(a)
            else:
                a = np.empty(b.shape if b.shape else (1,), b.dtype)
                if b.role == "out":
                    outputs.append(a)
            arrays.append(a)
        pointers = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        self._fn(ctypes.addressof(pointers))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)
