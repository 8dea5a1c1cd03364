"""Named tensors from files (.npz), for the inputs a device is given: read without pickle, with
clear errors for anything that is not an archive of named numeric arrays."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from tilecraft.errors import DeviceError


def load_tensors(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz archive, by name."""
    where = str(path)
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise DeviceError(f"cannot read inputs from {where!r}: not an .npz of named arrays")
        with npz:
            tensors = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DeviceError(f"cannot read inputs from {where!r}: {exc}") from None
    for name, arr in tensors.items():
        if arr.dtype.kind not in "biuf":
            raise DeviceError(
                f"cannot read inputs from {where!r}: {name!r} is {arr.dtype}, not a number array"
            )
    return tensors
