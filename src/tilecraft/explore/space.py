"""The configs a sweep visits: the sweep presets, each also with its scratchpads halved and
doubled and with a 128-bit AXI port, and each of those without and with the requantization unit
(`+requant`: `HwConfig.with_requant_unit`, lanes at the bus's pace); each preset as it is and
with the 128-bit port also with the unit and the GEMM core's depthwise mode for 3x3 windows
(`+requant+dw3`: `HwConfig.with_depthwise_mode`), beside the same without the mode, so the two
rows show what the mode costs and buys on either bus (its layers wait on the DRAM: the wider
port is where it buys more). Ordered smallest array first, so `limit` keeps the cheap ones.

A variant the RTL cannot build is left out: the STORE stage writes whole OUT elements, so an
OUT element must be a whole number of AXI beats (1x8x8's 8-byte element and a 16-byte bus do
not go together); its ISA must exist (larger scratchpads widen the index fields past 128-bit
instructions); and the depthwise mode needs square blocks and an output's array passes no more
than the window's reads a column (`hw/rtl/depthwise.py`: not 1x8x8 on a packed core)."""

from __future__ import annotations

from tilecraft.errors import ConfigError
from tilecraft.hw.config import HwConfig, preset, preset_names
from tilecraft.hw.isa import isa_for
from tilecraft.hw.rtl.depthwise import array_passes

BUFFERS = ("log_inp_buff", "log_wgt_buff", "log_acc_buff")
VARIANTS = ("", "half-buffers", "double-buffers", "axi128")
DEPTHWISE_WINDOW = 3  # MobileNets' depthwise kernels


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
            unit = cfg.with_requant_unit()
            named = [(name, cfg), (f"{name}+requant", unit)]
            mode = _with_depthwise(unit) if kind in ("", "axi128") else None
            if mode is not None:
                named.append((f"{name}+requant+dw{DEPTHWISE_WINDOW}", mode))
            for point_name, point in named:
                if point.digest not in seen:
                    seen.add(point.digest)
                    points.append((point_name, point))
    return points[:limit] if limit else points


def _with_depthwise(cfg: HwConfig) -> HwConfig | None:
    """`cfg` with the depthwise mode, or None where the config cannot have it (blocks not
    square) or the RTL's Xilinx build (its multipliers packed where
    `HwConfig.packs_multipliers`) cannot run an output's passes under its reads."""
    try:
        point = cfg.with_depthwise_mode(DEPTHWISE_WINDOW)
    except ConfigError:
        return None
    fits = array_passes(point, point.packs_multipliers) <= DEPTHWISE_WINDOW
    return point if fits else None


def _macs(cfg: HwConfig) -> int:
    return cfg.batch * cfg.block_in * cfg.block_out
