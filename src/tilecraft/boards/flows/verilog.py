"""The accelerator as files a board flow starts from: its top-level Verilog, its register map
(JSON, from hw/regs.py) and the config it was made for."""

from __future__ import annotations

import json
from pathlib import Path

from tilecraft.errors import PathError
from tilecraft.files import write_atomic
from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig, check_rtl

TOP = regs.MODULE


def export_verilog(cfg: HwConfig, folder: str | Path) -> list[Path]:
    """Write `tilecraft_top.v`, `registers.json` and `config.toml` into `folder` (made if
    missing); returns their paths."""
    check_rtl(cfg)
    from tilecraft.hw.rtl.top import verilog

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise PathError(f"output folder {str(folder)!r} is a file; give a folder to write into")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PathError(f"cannot make the folder {str(folder)!r}: {exc.strerror or exc}") from None
    regmap = {
        r.name: {"offset": r.offset, "access": r.access, "doc": r.doc} for r in regs.REGISTERS
    }
    return [
        write_atomic(folder / f"{TOP}.v", verilog(cfg, TOP)),
        write_atomic(folder / "registers.json", json.dumps(regmap, indent=2) + "\n"),
        write_atomic(folder / "config.toml", cfg.to_toml()),
    ]
