"""The configs a sweep visits: the sweep presets, each also with its scratchpads halved and
doubled and with a 128-bit AXI port, and each of those without and with the requantization unit
(`+requant`: `HwConfig.with_requant_unit`, lanes at the bus's pace). Ordered smallest array
first, so `limit` keeps the cheap ones. A variant the RTL cannot build is left out: the STORE
stage writes whole OUT elements, so an OUT element must be a whole number of AXI beats (1x8x8's
8-byte element and a 16-byte bus do not go together), and its ISA must exist (larger
scratchpads widen the index fields past 128-bit instructions)."""

from __future__ import annotations

from tilecraft.errors import ConfigError
from tilecraft.hw.config import HwConfig, preset, preset_names
from tilecraft.hw.isa import isa_for

BUFFERS = ("log_inp_buff", "log_wgt_buff", "log_acc_buff")
VARIANTS = ("", "half-buffers", "double-buffers", "axi128")


def variant(cfg: HwConfig, kind: str) -> HwConfig:
    if kind == "":
        return cfg
    if kind == "axi128":
        return cfg.replace(axi_data_bits=128)
    step = -1 if kind == "half-buffers" else 1
    return cfg.replace(**{f: getattr(cfg, f) + step for f in BUFFERS})


def sweep_configs(limit: int | None = None) -> list[tuple[str, HwConfig]]:
    """(name, config) of every valid point, smallest MAC array first; `limit` keeps the first."""
    if limit is not None and limit < 1:
        raise ConfigError(f"a sweep needs at least one config, not {limit}")
    points, seen = [], set()
    bases = sorted(preset_names(), key=lambda n: _macs(preset(n)))
    for base in bases:
        for kind in VARIANTS:
            try:
                cfg = variant(preset(base), kind)
                isa_for(cfg)
            except ConfigError:
                continue  # a buffer beyond the config's range, or fields past 128 bits
            if cfg.elem_bytes("out") % cfg.axi_bytes:
                continue
            name = f"{base}+{kind}" if kind else base
            for unit in (False, True):
                point = cfg.with_requant_unit() if unit else cfg
                if point.digest not in seen:
                    seen.add(point.digest)
                    points.append((f"{name}+requant" if unit else name, point))
    return points[:limit] if limit else points


def _macs(cfg: HwConfig) -> int:
    return cfg.batch * cfg.block_in * cfg.block_out
