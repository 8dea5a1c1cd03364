"""Every endpoint's slack after routing, from the SDF nextpnr writes (`--sdf`).

nextpnr's report names one critical path per clock; closing timing needs all of them at once.
The routed SDF has every cell's delays (IOPATH) and every routed connection's (INTERCONNECT), so
a longest-path pass over that graph gives each register's, block RAM's and multiplier's input
its arrival time. Endpoints are grouped by the RTL signals at the path's two ends (the netlist's
cell names keep the Amaranth hierarchy), so a report reads "ALU operand hit flag -> ALU write
data: 410 endpoints, worst 15.8 ns" instead of one path of 80 cells.
"""

from __future__ import annotations

import re
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

CLOCK_PINS = frozenset({"CLK", "CLKA", "CLKB", "WCK", "CLK0", "CLK1", "CLK2", "CLK3"})
_TOKENS = re.compile(
    r"\(INSTANCE ([^)]*)\)"
    r"|\(INTERCONNECT (\S+) (\S+) \(([\d.:-]+)\)"
    r"|\(IOPATH (\S+) (\S+) \(([\d.:-]+)\)"
    r"|\(SETUPHOLD \((?:posedge|negedge) (\S+)\) \(posedge \S+\) \(([\d.:-]+)\)"
)
# what yosys and nextpnr append to an RTL signal's name when they make cells of it
_PRIMITIVE = re.compile(
    r"[_$](MULT18X18D|CCU2C|CCU2_COMB|LUT4|PFUMX|L6MUX21|TRELLIS_FF|TRELLIS_RAMW|TRELLIS_COMB|"
    r"DP16KD|DPR16X4C|DPRAM)"
)
_SCALE_NS = 1e-3  # nextpnr writes (TIMESCALE 1ps)
BIN_NS = 0.5  # the histogram's bins: [0, 0.5), [0.5, 1.0), ... ns


@dataclass
class PathGroup:
    start: str  # RTL signal (or memory) the paths leave from
    end: str  # and the one they arrive at
    endpoints: int  # failing endpoints (bits) in the group
    worst_ns: float  # its longest path, setup included


@dataclass
class EndpointSummary:
    period_ns: float
    endpoints: int  # timed inputs of registers, block RAMs and multipliers
    failing: int  # of them, those whose path is longer than the period
    worst_ns: float
    total_negative_slack_ns: float
    groups: list[PathGroup] = field(default_factory=list)  # the failing ones, worst first
    histogram: list[int] = field(default_factory=list)  # endpoints per BIN_NS of path delay

    def to_dict(self) -> dict:
        return asdict(self)

    def format(self, rows: int = 12) -> str:
        lines = [
            f"{self.failing:,} of {self.endpoints:,} endpoints miss {self.period_ns:g} ns "
            f"(total negative slack {self.total_negative_slack_ns:,.0f} ns), in "
            f"{len(self.groups)} groups; the worst:"
        ]
        for g in self.groups[:rows]:
            lines.append(f"  {g.worst_ns:6.2f} ns {g.endpoints:5d}  {g.start} -> {g.end}")
        return "\n".join(lines)


def signal_name(pin: str) -> str:
    """The RTL signal behind a netlist pin: `dut.core.compute.alu.b_hit0` for
    `dut.core.compute.alu.b_hit0_TRELLIS_FF_Q_3/Q`; a memory's cells give the memory."""
    cell = pin.rsplit("/", 1)[0]
    found = _PRIMITIVE.search(cell)
    name = cell[: found.start()] if found else cell
    name = re.sub(r"\$\d+$", "", name)
    return re.sub(r"(\.\d+)+$", "", name)


def _delay(triple: str) -> float:
    return float(triple.split(":")[-1]) * _SCALE_NS  # the slow corner


def read_sdf(text: str):
    """(edges: pin -> [(pin, ns)], launches: pin -> clock-to-out ns, setup: pin -> ns)."""
    edges: dict[str, list] = defaultdict(list)
    launches: dict[str, float] = {}
    setup: dict[str, float] = {}
    inst = ""
    for m in _TOKENS.finditer(text):
        if m.group(1) is not None:
            inst = m.group(1).replace("\\", "")
        elif m.group(2):
            edges[m.group(2).replace("\\", "")].append(
                (m.group(3).replace("\\", ""), _delay(m.group(4)))
            )
        elif m.group(5):
            src, dst, d = m.group(5), m.group(6), _delay(m.group(7))
            if src in CLOCK_PINS:
                pin = f"{inst}/{dst}"
                launches[pin] = max(launches.get(pin, 0.0), d)
            else:
                edges[f"{inst}/{src}"].append((f"{inst}/{dst}", d))
        else:
            pin = f"{inst}/{m.group(8)}"
            setup[pin] = max(setup.get(pin, 0.0), _delay(m.group(9)))
    return edges, launches, setup


def arrivals(edges: dict, launches: dict) -> tuple[dict, dict]:
    """Longest arrival at every pin reached from a clocked output, and each pin's predecessor
    on that path (the graph is acyclic once clocked cells cut it; a combinational loop's pins
    are left out)."""
    indegree: dict[str, int] = defaultdict(int)
    for outs in edges.values():
        for dst, _ in outs:
            indegree[dst] += 1
    arrival = dict(launches)
    before: dict[str, str] = {}
    ready = deque(p for p in set(edges) | set(launches) if indegree[p] == 0)
    while ready:
        pin = ready.popleft()
        t = arrival.get(pin)
        for dst, d in edges.get(pin, ()):
            if t is not None and t + d > arrival.get(dst, -1.0):
                arrival[dst] = t + d
                before[dst] = pin
            indegree[dst] -= 1
            if indegree[dst] == 0:
                ready.append(dst)
    return arrival, before


def summarize(text: str, period_ns: float, groups: int = 40) -> EndpointSummary:
    edges, launches, setup = read_sdf(text)
    arrival, before = arrivals(edges, launches)
    ends = [
        (t + setup.get(pin, 0.0), pin)
        for pin, t in arrival.items()
        if pin not in edges and pin not in launches  # an unused clocked output is no endpoint
    ]
    failing = sorted(((t, p) for t, p in ends if t > period_ns), reverse=True)
    grouped: dict[tuple[str, str], PathGroup] = {}
    for t, pin in failing:
        start = pin
        while start in before:
            start = before[start]
        key = (signal_name(start), signal_name(pin))
        g = grouped.setdefault(key, PathGroup(key[0], key[1], 0, t))
        g.endpoints += 1
    histogram = [0] * (int(max((t for t, _ in ends), default=0.0) / BIN_NS) + 1)
    for t, _ in ends:
        histogram[int(t / BIN_NS)] += 1
    return EndpointSummary(
        period_ns=period_ns,
        endpoints=len(ends),
        failing=len(failing),
        worst_ns=max((t for t, _ in ends), default=0.0),
        total_negative_slack_ns=sum(t - period_ns for t, _ in failing),
        groups=sorted(grouped.values(), key=lambda g: -g.worst_ns)[:groups],
        histogram=histogram,
    )


def summarize_file(path: str | Path, period_ns: float, groups: int = 40) -> EndpointSummary:
    return summarize(Path(path).read_text(errors="replace"), period_ns, groups)


def plot_histogram(summary: EndpointSummary, path: str | Path, title: str) -> None:
    """Endpoints by the length of their longest path, the clock period marked: what a route
    leaves to fix, at a glance (`plot` extra: matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    lows = [k * BIN_NS for k in range(len(summary.histogram))]
    colors = ["tab:red" if lo + BIN_NS > summary.period_ns else "tab:blue" for lo in lows]
    ax.bar(lows, summary.histogram, width=BIN_NS, align="edge", color=colors)
    ax.axvline(
        summary.period_ns,
        color="black",
        linestyle="--",
        label=f"{summary.period_ns:g} ns clock period",
    )
    ax.set_yscale("log")
    ax.set_xlabel("longest path into the endpoint, setup included (ns)")
    ax.set_ylabel("endpoints")
    ax.set_title(f"{title}\n{summary.failing:,} of {summary.endpoints:,} endpoints miss the clock")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
