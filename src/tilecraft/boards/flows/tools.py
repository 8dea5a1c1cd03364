"""Finding the open FPGA tools (the YoWASP wheels, or native ones on the PATH)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from tilecraft.errors import DeviceError


def find_tool(*names: str, extra: str) -> str:
    """The first of `names` found next to this Python (a venv's tools are there even when it
    is not activated) or on the PATH; an error naming the pip extra that installs it."""
    here = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    for name in names:
        found = shutil.which(name, path=here)
        if found:
            return found
    raise DeviceError(
        f"this flow needs {' or '.join(names)}: pip install tilecraft[{extra}] (or put it on "
        f"the PATH)"
    )
