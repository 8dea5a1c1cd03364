"""The `pynq` device: programs on the accelerator in a PYNQ overlay, from the board's ARM.

`get_device("pynq", bitfile="tilecraft.bit")` opens the overlay with PYNQ's own `Overlay` (the
`.hwh` beside the `.bit` says where the registers are), checks the MAGIC and config-digest
registers against the config the overlay was built for (`<stem>.toml` beside the bitstream,
or `config=`), and keeps one contiguous `pynq.allocate` arena, grown as programs need, that
holds a program's whole DRAM region: instructions, micro-ops, constants and tensors.

A run writes the region, flushes it out of the ARM's caches (the HP port is not coherent),
programs the registers of `hw/regs.py`, writes START, waits for DONE by polling STATUS (or by
the PL interrupt, `wait="interrupt"`) with a timeout, invalidates the region and reads the
outputs. An accelerator that stops on an error raises what the simulator raises, and one that
never finishes raises `DeviceTimeout` with a dump of its registers; either way the overlay is
downloaded again first, so the device is usable (START does not reset the accelerator: a run
that stopped on an error leaves its queued instructions, tokens and error behind, and the next
START would report that error again at once). Needs numpy and pynq only (Python 3.10, numpy
1.26 on PYNQ 3.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilecraft.errors import ConfigError, DeviceError
from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig
from tilecraft.runtime.device import RunResult, check_inputs, check_program
from tilecraft.runtime.program import Program
from tilecraft.runtime.status import raise_for_error

PAGE = 4096  # pynq.allocate hands out whole pages; the accelerator's bursts never cross one
WAITS = ("poll", "interrupt")


RESET = "the overlay was downloaded again, so the device is reset and usable"


class DeviceTimeout(DeviceError):
    """The accelerator did not raise DONE in time (the message holds a register dump)."""


@dataclass
class BoardReport:
    cycles: int  # the CYCLES register: clock cycles from START to DONE
    seconds: float  # host wall time from START to DONE seen
    instructions: int


def overlay_config(bitfile: Path) -> HwConfig:
    """The config an overlay was built for: `<stem>.toml` beside its bitstream."""
    path = bitfile.with_suffix(".toml")
    if not path.exists():
        raise ConfigError(
            f"no {path.name} beside {bitfile.name}: pass the overlay's config "
            f"(get_device('pynq', bitfile=..., config=...)) or keep the build's {path.name}"
        )
    return HwConfig.load(path)


def cma_free_bytes(meminfo: str | Path = "/proc/meminfo") -> int | None:
    """The kernel's free contiguous memory (CmaFree), or None where it cannot be read."""
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("CmaFree:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class PynqDevice:
    name = "pynq"

    def __init__(
        self,
        bitfile: str | Path,
        *,
        config: HwConfig | None = None,
        timeout_s: float = 10.0,
        wait: str = "poll",
        download: bool = True,
        meminfo: str | Path = "/proc/meminfo",
    ):
        """`bitfile`: the overlay's `.bit` (its `.hwh` beside it); `config`: the config it
        was built for (default: `<stem>.toml` beside it); `timeout_s`: how long a run may take
        before it is abandoned; `wait`: "poll" STATUS or wait for the "interrupt";
        `download`: program the FPGA now (False: it already holds this overlay)."""
        import pynq

        if wait not in WAITS:
            raise DeviceError(f"unknown wait {wait!r}; valid: {', '.join(WAITS)}")
        if not timeout_s > 0:
            raise DeviceError(f"timeout_s must be positive, not {timeout_s!r}")
        self.bitfile = Path(bitfile)
        if self.bitfile.suffix != ".bit" or not self.bitfile.is_file():
            raise DeviceError(f"no bitstream {str(self.bitfile)!r} (a .bit with its .hwh beside)")
        self.config = config or overlay_config(self.bitfile)
        self.timeout_s, self.wait, self.meminfo = timeout_s, wait, meminfo
        self._pynq = pynq
        self.overlay = pynq.Overlay(str(self.bitfile), download=download)
        self.instance = self._find_accelerator()
        self.ip = getattr(self.overlay, self.instance)
        self._arena = None
        self.check_identity()
        pin = f"{self.instance}/interrupt"
        self._irq = None
        if wait == "interrupt":
            if pin not in self.overlay.interrupt_pins:
                raise DeviceError(
                    f"{self.bitfile.name} does not list {pin} among its interrupt pins (PYNQ "
                    f"waits only on pins behind an AXI interrupt controller, and this overlay "
                    f"has none in front of it): use wait='poll'"
                )
            self._irq = pynq.Interrupt(pin)

    # ---- opening ---------------------------------------------------------------------------
    def _find_accelerator(self) -> str:
        found = [
            name
            for name, ip in self.overlay.ip_dict.items()
            if f":module_ref:{regs.MODULE}:" in str(ip.get("type", ""))
        ]
        if len(found) != 1:
            have = ", ".join(f"{n} ({ip.get('type')})" for n, ip in self.overlay.ip_dict.items())
            raise DeviceError(
                f"{self.bitfile.name} holds {len(found)} {regs.MODULE} accelerators (expected "
                f"one); its IPs: {have or 'none'}"
            )
        return found[0]

    def read(self, name: str) -> int:
        return int(self.ip.read(regs.OFFSETS[name]))

    def write(self, name: str, value: int) -> None:
        self.ip.write(regs.OFFSETS[name], int(value) & 0xFFFFFFFF)

    def check_identity(self) -> None:
        """The overlay is a tilecraft accelerator built for this device's config."""
        magic = self.read("MAGIC")
        if magic != regs.MAGIC:
            raise DeviceError(
                f"{self.instance} in {self.bitfile.name} reads MAGIC 0x{magic:08X}, not "
                f"0x{regs.MAGIC:08X}: not a tilecraft accelerator, or the bitstream is not loaded"
            )
        found = regs.digest_of(self.read("ID_LO"), self.read("ID_HI"))
        if found != self.config.digest:
            raise ConfigError(
                f"the bitstream {self.bitfile.name} was built for config {found}, but this "
                f"device expects {self.config.tag} ({self.config.digest}): rebuild the overlay "
                f"for it, or open the device with the bitstream's config"
            )

    # ---- memory ----------------------------------------------------------------------------
    def _arena_for(self, nbytes: int):
        """The contiguous arena, (re)allocated when a program needs more than it holds."""
        if self._arena is not None and self._arena.nbytes >= nbytes:
            return self._arena
        self.close()
        size = -(-nbytes // PAGE) * PAGE
        try:
            arena = self._pynq.allocate((size,), dtype=np.uint8)
        except (RuntimeError, MemoryError, OSError) as exc:
            free = cma_free_bytes(self.meminfo)
            have = f"{free:,} bytes free" if free is not None else "free bytes unknown"
            raise DeviceError(
                f"cannot allocate {size:,} bytes of contiguous memory (CMA) for the program's "
                f"DRAM region ({have}): {exc}"
            ) from None
        if arena.device_address % PAGE:
            raise DeviceError(
                f"pynq.allocate returned 0x{arena.device_address:x}, not page-aligned"
            )
        self._arena = arena
        return arena

    def close(self) -> None:
        """Give the arena back to the kernel."""
        if self._arena is not None:
            self._arena.freebuffer()
            self._arena = None

    # ---- running ---------------------------------------------------------------------------
    def run(self, program: Program, inputs: dict[str, np.ndarray], *, trace: bool = False):
        if trace:
            raise DeviceError("the pynq device has no trace; run the program on `sim` for one")
        check_program(program, self.config)
        image = program.dram_image(check_inputs(program, inputs))
        region = self._arena_for(program.dram_size)[: program.dram_size]
        region[:] = image
        region.flush()  # the ARM's caches out to DDR before the accelerator reads it
        base = int(region.device_address)
        self.write("DRAM_BASE_LO", base)
        self.write("DRAM_BASE_HI", base >> 32)
        self.write("INSN_OFFSET", program.insn_offset)
        self.write("INSN_COUNT", len(program.insns))
        self.write("DRAM_SIZE", program.dram_size)
        self.write("IRQ_ENABLE", int(self.wait == "interrupt"))
        t0 = time.perf_counter()
        self.write("CONTROL", regs.START)
        status = self._wait_done(program)
        seconds = time.perf_counter() - t0
        region.invalidate()  # drop stale lines before reading what the accelerator wrote
        if status & regs.ERROR:
            code, index = self.read("ERROR_CODE"), self.read("ERROR_INDEX")
            self._reset()  # what the stopped run left behind would stop the next one
            raise_for_error(code, index, RESET)
        dram = np.asarray(region)
        outputs = {b.name: program.read(dram, b.name) for b in program.outputs}
        cycles = self.read("CYCLES_LO") | (self.read("CYCLES_HI") << 32)
        return RunResult(outputs, BoardReport(cycles, seconds, len(program.insns)))

    def _wait_done(self, program: Program) -> int:
        if self.wait == "interrupt":
            self._wait_interrupt()
        deadline = time.monotonic() + self.timeout_s
        while True:
            status = self.read("STATUS")
            if status & regs.DONE:
                return status
            if time.monotonic() > deadline:
                self._timed_out(program, status)
            time.sleep(0)

    def _wait_interrupt(self) -> None:
        """Wait for the PL interrupt (PYNQ's asyncio `Interrupt`) within the timeout; either
        way the STATUS check follows. PYNQ registers its UIO reader on `get_event_loop()`'s
        loop, so the wait runs on that loop; inside a running loop (Jupyter) blocking on it is
        impossible, and the device polls instead."""
        try:
            asyncio.get_running_loop()
            return  # a running loop (Jupyter): poll
        except RuntimeError:
            pass

        async def wait():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._irq.wait(), self.timeout_s)

        asyncio.get_event_loop().run_until_complete(wait())

    def register_dump(self) -> str:
        return ", ".join(
            f"{r.name}=0x{self.read(r.name):08X}" for r in regs.REGISTERS if "r" in r.access
        )

    def _reset(self) -> None:
        self.overlay.download()  # reprogramming the PL resets the accelerator
        self.check_identity()

    def _timed_out(self, program: Program, status: int):
        dump = self.register_dump()
        self._reset()
        raise DeviceTimeout(
            f"program {program.name!r} ({len(program.insns)} instructions) did not finish "
            f"within {self.timeout_s:g} s (STATUS 0x{status:X}); registers: {dump}; {RESET}"
        )


def pynq_device(**options) -> PynqDevice:
    """`get_device("pynq", bitfile=..., ...)`."""
    if "bitfile" not in options:
        raise DeviceError(
            "the pynq device needs its overlay: get_device('pynq', bitfile='F.bit') (tilecraft "
            "run: --bitfile F.bit), the .hwh beside it"
        )
    try:
        import pynq  # noqa: F401
    except ImportError as exc:
        raise DeviceError(
            f"the pynq device needs PYNQ ({exc}): it runs on a board's PYNQ image, or "
            f"off-board with `pip install tilecraft[board]` in a venv of its own (numpy < 2)"
        ) from None
    return PynqDevice(**options)
