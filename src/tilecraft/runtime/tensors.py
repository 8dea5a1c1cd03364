"""The tensors a program is given, checked in one place: by name (none missing, none unknown),
then each by shape and by dtype (an integer array whose values all fit the buffer's dtype is
converted; anything else is refused, never wrapped). `pack_inputs` checks logical tensors with
it, devices their stored form. Files (.npz) are read through the same checks as every artifact
(no pickle, numbers only, nothing allocated beyond the file's size)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tilecraft.artifact import read_arrays
from tilecraft.errors import DeviceError


def load_tensors(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive, by name."""
    return read_arrays(path, DeviceError, what="input .npz")


def check_names(program_name: str, expected, given) -> None:
    """Refuse a set of tensor names that is not exactly `expected`, naming what differs."""
    missing = sorted(set(expected) - set(given))
    unknown = sorted(set(given) - set(expected))
    if missing or unknown:
        raise DeviceError(
            f"program {program_name!r} takes inputs {sorted(expected)}; "
            + (f"missing {missing}" if missing else "")
            + ("; " if missing and unknown else "")
            + (f"unknown {unknown}" if unknown else "")
        )


def check_tensor(name: str, value, shape: tuple[int, ...], dtype) -> np.ndarray:
    """`value` as a `dtype` array of `shape`, or a DeviceError naming the tensor."""
    arr = np.asarray(value)
    if arr.shape != tuple(shape):
        raise DeviceError(f"input {name!r} has shape {arr.shape}; the program expects {shape}")
    dtype = np.dtype(dtype)
    if arr.dtype == dtype:
        return arr
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    if arr.dtype.kind not in "iub" or info is None:
        raise DeviceError(f"input {name!r} is {arr.dtype}; the program expects {dtype}")
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise DeviceError(
            f"input {name!r} is {arr.dtype} with values {arr.min()}..{arr.max()}; the program "
            f"expects {dtype} ({info.min}..{info.max})"
        )
    return arr.astype(dtype)
