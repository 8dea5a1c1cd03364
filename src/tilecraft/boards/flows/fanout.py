"""The nets of a synthesized netlist that reach the most cell inputs (yosys's JSON netlist).

A net with thousands of sinks is routed on the fabric to every slice it reaches, unless the
placer promotes it to a global network, which nextpnr-ecp5 does for clocks alone: 1x8x8 with
the requantization unit had its reset reach 14,871 cell inputs against the plain core's 6,704,
and its routes stalled on congestion (src/tilecraft/benchmarks/TIMING.md). `hw timing` reports
the highest ones beside the routed figures so that such a net shows before a route is spent.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Fanout:
    net: str
    sinks: int  # cell inputs the net drives


def highest_fanouts(netlist: str | Path, top: str, count: int = 6) -> list[Fanout]:
    """The `count` nets of module `top` in yosys's JSON netlist `netlist` with the most cell
    inputs, highest first; each named by its shortest name in the netlist (a bit of a wider
    net with its index). None where the netlist has no such module (yosys writes one for each
    design it synthesizes)."""
    module = json.loads(Path(netlist).read_text()).get("modules", {}).get(top)
    if module is None:
        return []
    names: dict[int, str] = {}
    for name, net in module["netnames"].items():
        wide = len(net["bits"]) > 1
        for k, bit in enumerate(net["bits"]):
            label = f"{name}[{k}]" if wide else name
            if isinstance(bit, int) and (bit not in names or len(label) < len(names[bit])):
                names[bit] = label
    sinks: Counter[int] = Counter()
    for cell in module["cells"].values():
        directions = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            if directions.get(port) == "input":
                sinks.update(bit for bit in bits if isinstance(bit, int))
    return [Fanout(names.get(bit, str(bit)), n) for bit, n in sinks.most_common(count)]
