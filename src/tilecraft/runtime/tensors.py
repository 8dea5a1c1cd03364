"""Named tensors from files (.npz), for the inputs a device is given: read through the same
checks as every artifact (no pickle, numbers only, nothing allocated beyond the file's size)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tilecraft.artifact import read_arrays
from tilecraft.errors import DeviceError


def load_tensors(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive, by name."""
    return read_arrays(path, DeviceError, what="input .npz")
