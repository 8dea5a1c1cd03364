"""A pip-installable overlay package for a board: the overlay's `.bit`, `.hwh` and `.toml`,
found by PYNQ through a `pynq.overlays` entry point, a `device()` that opens it, and an example
that offloads a conv from the ARM and compares it with the host's result.

`tilecraft build --board B -o DIR` writes it to `DIR/package/`; the build script copies the
overlay into it once Vivado has made the bitstream. The example's conv is compiled here, at
build time (by the caller: boards do not import the compiler) and shipped as a program file,
so a board needs only the runtime to run it."""

from __future__ import annotations

from pathlib import Path

from tilecraft.boards.block_design import BlockDesign
from tilecraft.files import write_atomic
from tilecraft.runtime.program import Program


def package_name(design: BlockDesign) -> str:
    return f"tilecraft_overlay_{design.board.name.replace('-', '_')}"


def _pyproject(design: BlockDesign, package: str) -> str:
    what = f"The tilecraft accelerator ({design.config.tag}) as a PYNQ overlay"
    return f"""\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{package.replace("_", "-")}"
version = "0.1.0"
description = "{what} for the {design.board.description}"
requires-python = ">={design.board.pynq.python}"
dependencies = ["tilecraft", "pynq"]

[project.entry-points."pynq.overlays"]
{package} = "{package}"

[tool.setuptools]
packages = ["{package}"]

[tool.setuptools.package-data]
{package} = ["*.bit", "*.hwh", "*.toml", "*.tcp"]
"""


def _init(design: BlockDesign) -> str:
    return f'''\
"""The tilecraft overlay for the {design.board.description}: `device()` opens it."""

from pathlib import Path

BITFILE = Path(__file__).with_name("{design.name}.bit")


def device(**options):
    """The `pynq` device on this overlay (options: see tilecraft.runtime.pynq.PynqDevice)."""
    from tilecraft.runtime import get_device

    return get_device("pynq", bitfile=BITFILE, **options)
'''


EXAMPLE = '''\
"""Offload a conv from the ARM to the accelerator and compare it with the host's result:
`python -m {package}.example`."""

from pathlib import Path

import numpy as np

from tilecraft.runtime import Program
from tilecraft.runtime.check import expected_outputs
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs


def main(seed: int = 0, **options) -> bool:
    from {package} import device

    program = Program.load(Path(__file__).with_name("conv.tcp"))
    inputs = random_inputs(program, np.random.default_rng(seed))
    result = device(**options).run(program, pack_inputs(program, inputs))
    got = unpack_outputs(program, result.outputs)["output"]
    want = expected_outputs(program, inputs)["output"]
    same = bool(np.array_equal(got, want))
    print(f"conv {{program.name}}: {{result.report.cycles:,}} cycles on the FPGA, "
          f"{{'equal to' if same else 'DIFFERENT from'}} the host's result")
    return same


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
'''


def write_package(design: BlockDesign, folder: str | Path, example: Program) -> Path:
    """The package's source tree in `folder` with `example` (a conv program of the design's
    config) as its example; the build copies the overlay files in. Returns the Python
    package's folder."""
    folder = Path(folder)
    package = package_name(design)
    inner = folder / package
    inner.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "pyproject.toml", _pyproject(design, package))
    write_atomic(inner / "__init__.py", _init(design))
    write_atomic(inner / "example.py", EXAMPLE.format(package=package))
    example.save(inner / "conv.tcp")
    return inner
