"""A PYNQ board in software, for testing the `pynq` device's real host code off-board.

`SimulatedBoard` is a `pynq.Device`: PYNQ's own `Overlay`, `MMIO`, `allocate` and driver code run
unchanged over it. Register reads and writes in the accelerator's window go to `Accelerator`
(the register file of `hw/regs.py`; START runs the program in DDR on the simulator), or, with
`rtl=`, to the generated Verilog itself (`RtlAccelerator`: each access an AXI4-Lite
transaction on the Verilator model), every other
register is a plain word (the PS clock registers PYNQ reads and programs on download start at
their boot values). Memory is a DDR
model behind a non-coherent cache: a buffer's bytes reach the accelerator only when flushed and
come back only when invalidated, so a host that forgets either reads wrong data, as on a board.
Contiguous memory (CMA) is a fixed pool; running out raises what XRT raises ("Allocate failed").

Faults to test against: `hang=True` makes START never finish (a timeout); a run that stops on
an error leaves it behind, so each START until a reset stops at once with the same error (as
the RTL does: tests/pynq_board/test_pynq_rtl.py); downloading the overlay again resets the
accelerator, as programming the PL does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tilecraft.errors import AccessError, DeviceError, ExecutionError, IllegalInstructionError
from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig
from tilecraft.sim.simulator import simulate

try:
    from pynq import Device
    from pynq.buffer import PynqBuffer

    class SimBuffer(PynqBuffer):
        """A buffer whose freeing gives its pages back to the board's pool (a view of one
        frees nothing)."""

        def freebuffer(self):
            owner = getattr(self, "owner", None)
            if owner is not None and not self.freed:
                self.freed = True
                owner.allocations.pop(self.device_address, None)

except ImportError:  # this module imports anywhere; making a board needs pynq
    Device, PynqBuffer, SimBuffer = object, None, None

PAGE = 4096
ZYNQ_SLCR = 0xF8000000  # Zynq-7000 clock registers, PS_CLK 50 MHz
ZYNQMP_CRL, ZYNQMP_CRF = 0xFF5E0000, 0xFD1A0000  # ZynqMP clock registers, PS_REF_CLK 33.333 MHz


def ps_clock_registers(zynqmp: bool, pll_mhz: float) -> dict[int, int]:
    """The PS clock registers PYNQ reads when it programs the fabric clock, at their boot
    values: the IO PLL at `pll_mhz` (as pynq's `Clocks` decodes it) and the fabric clock from it."""
    if zynqmp:
        fbdiv = round(pll_mhz * 2 / 33.333)  # FBDIV [14:8], DIV2 (bit 16) halves
        pll = lambda mult: (1 << 16) | (mult << 8)  # noqa: E731
        return {
            ZYNQMP_CRL + 0x20: pll(fbdiv),  # IOPLL_CTRL
            ZYNQMP_CRL + 0x30: pll(72),  # RPLL_CTRL
            ZYNQMP_CRL + 0xC0: (1 << 24) | (1 << 16) | (15 << 8),  # PL0_REF_CTRL: IOPLL / 15
            ZYNQMP_CRF + 0x20: pll(72),  # APLL_CTRL
            ZYNQMP_CRF + 0x2C: pll(64),  # DPLL_CTRL
            ZYNQMP_CRF + 0x38: pll(90),  # VPLL_CTRL
        }
    return {
        ZYNQ_SLCR + 0x100: 26 << 12,  # ARM_PLL_CTRL: PLL_FDIV [18:12]
        ZYNQ_SLCR + 0x104: 21 << 12,  # DDR_PLL_CTRL
        ZYNQ_SLCR + 0x108: round(pll_mhz / 50) << 12,  # IO_PLL_CTRL
        ZYNQ_SLCR + 0x170: (1 << 20) | (10 << 8),  # FPGA0_CLK_CTRL: IO PLL / 10 / 1
    }


def error_code(exc: ExecutionError) -> regs.ErrorCode | None:
    """The ERROR_CODE the hardware reports for what the simulator raised; None where the
    hardware reports nothing and never finishes (no FINISH, a deadlock)."""
    text = str(exc)
    if isinstance(exc, AccessError):
        if "micro-op" in text:
            return regs.ErrorCode.UOP_RANGE
        return regs.ErrorCode.DRAM_RANGE if "DRAM" in text else regs.ErrorCode.SRAM_RANGE
    if isinstance(exc, IllegalInstructionError):
        if "memory id" in text:
            return regs.ErrorCode.ILLEGAL_MEMORY
        if "requant param row" in text:
            return regs.ErrorCode.REQUANT_PARAMS
        return regs.ErrorCode.ILLEGAL_FLAGS if "flag" in text else regs.ErrorCode.ILLEGAL_OPCODE
    return None


class Accelerator:
    """The accelerator's register file over a DDR array (physical address = index + `ddr_base`)."""

    def __init__(self, config: HwConfig, ddr: np.ndarray, ddr_base: int, *, hang: bool = False):
        self.config, self.ddr, self.ddr_base, self.hang = config, ddr, ddr_base, hang
        self.runs = 0
        self.reset()

    def reset(self) -> None:
        self.values = {r.name: 0 for r in regs.REGISTERS}
        lo, hi = regs.id_words(self.config.digest)
        self.values.update(MAGIC=regs.MAGIC, ID_LO=lo, ID_HI=hi)
        self.stopped = None  # (code, index) of a run that stopped on an error, until a reset

    def read(self, offset: int) -> int:
        for r in regs.REGISTERS:
            if r.offset == offset:
                return self.values[r.name] if "r" in r.access else 0
        return 0

    def write(self, offset: int, value: int) -> None:
        for r in regs.REGISTERS:
            if r.offset == offset and "w" in r.access:
                self.values[r.name] = value & 0xFFFFFFFF
                if r.name == "CONTROL" and value & regs.START:
                    self.start()

    def start(self) -> None:
        v = self.values
        v.update(STATUS=regs.BUSY, ERROR_CODE=0, ERROR_INDEX=0, CONTROL=0)
        self.runs += 1
        if self.hang:
            return
        if self.stopped is not None:  # as the RTL: the units keep their error until a reset
            code, index = self.stopped
            v.update(STATUS=regs.DONE | regs.ERROR, ERROR_CODE=code, ERROR_INDEX=index)
            return
        base = (v["DRAM_BASE_HI"] << 32 | v["DRAM_BASE_LO"]) - self.ddr_base
        size = v["DRAM_SIZE"]
        region = self.ddr[max(base, 0) : max(base, 0) + size]
        try:
            if base < 0 or region.size < size:
                raise AccessError(f"DRAM region at 0x{base + self.ddr_base:x} is outside DDR")
            report = simulate(self.config, region, v["INSN_OFFSET"], v["INSN_COUNT"])
        except ExecutionError as exc:
            if error_code(exc) is None:
                return  # DONE never rises: the host times out
            self.stopped = (int(error_code(exc)), exc.index or 0)
            v.update(
                STATUS=regs.DONE | regs.ERROR,
                ERROR_CODE=self.stopped[0],
                ERROR_INDEX=self.stopped[1],
            )
            return
        v.update(STATUS=regs.DONE, CYCLES_LO=report.cycles & 0xFFFFFFFF)
        v.update(CYCLES_HI=report.cycles >> 32)


class RtlAccelerator:
    """The accelerator's registers served live by the generated Verilog (`sim.rtl.session`):
    every read and write is an AXI4-Lite transaction on the model. A START first places the
    region DRAM_BASE and DRAM_SIZE name (as the model's registers hold them) in the model's
    DRAM, and the model runs until DONE or `max_cycles`; its DRAM comes back into DDR only
    when it finished (a hung run leaves DDR alone, as a busy board does)."""

    def __init__(
        self, config: HwConfig, ddr: np.ndarray, ddr_base: int, session, max_cycles: int = 5_000_000
    ):
        self.config, self.ddr, self.ddr_base = config, ddr, ddr_base
        self.session, self.max_cycles = session, max_cycles
        self.runs = 0

    def reset(self) -> None:
        self.session.reset()

    def read(self, offset: int) -> int:
        return self.session.read(offset)

    def write(self, offset: int, value: int) -> None:
        start = offset == regs.OFFSETS["CONTROL"] and value & regs.START
        if not start:
            self.session.write(offset, value)
            return
        o = regs.OFFSETS
        base = self.session.read(o["DRAM_BASE_HI"]) << 32 | self.session.read(o["DRAM_BASE_LO"])
        size = self.session.read(o["DRAM_SIZE"])
        first = base - self.ddr_base
        if first < 0 or first + size > self.ddr.size:  # a host bug: say so, loudly
            raise AccessError(
                f"START with DRAM_BASE 0x{base:x} and DRAM_SIZE {size}: the region lies outside "
                f"the board's DDR [0x{self.ddr_base:x}, 0x{self.ddr_base + self.ddr.size:x})"
            )
        self.session.load(base, self.ddr[first : first + size])
        self.session.write(offset, value)
        self.runs += 1
        if self.session.run(self.max_cycles):
            self.ddr[first : first + size] = self.session.dump(size)


class SimulatedBoard(Device):
    """A board PYNQ drives through register reads/writes and buffers (no `/dev/mem`)."""

    def __init__(
        self,
        config: HwConfig,
        register_base: int,
        *,
        zynqmp: bool = False,
        pll_mhz: float = 1000.0,
        cma_bytes: int = 64 << 20,
        cma_base: int = 0x1000_0000,
        hang: bool = False,
        rtl=None,
    ):
        """`rtl`: an open `sim.rtl.session.RtlSession` on `config`'s model to serve the
        accelerator's registers (else the simulator does)."""
        if PynqBuffer is None:
            raise DeviceError("a simulated PYNQ board needs pynq (pip install tilecraft[board])")
        super().__init__("tilecraft-simulated-board")
        self.name = "tilecraft simulated board"
        self.capabilities = {"REGISTER_RW": True}
        self.arch = "aarch64" if zynqmp else "armv7l"
        self.timestamp = ""
        self.bitfile_name = None
        self.register_base = register_base
        self.cma_base, self.cma_bytes = cma_base, cma_bytes
        self.ddr = np.zeros(cma_bytes, np.uint8)  # what the accelerator sees
        if rtl is None:
            self.accelerator = Accelerator(config, self.ddr, cma_base, hang=hang)
        else:
            if hang:
                raise DeviceError("hang=True is for the simulated accelerator, not the RTL")
            self.accelerator = RtlAccelerator(config, self.ddr, cma_base, rtl)
        self.allocations: dict[int, int] = {}  # physical address -> bytes
        self.ps_registers = ps_clock_registers(zynqmp, pll_mhz)  # and what PYNQ writes there
        self.syncs: list[tuple[str, int, int]] = []  # ("flush"|"invalidate", address, bytes)
        self.downloads = 0

    # ---- what PYNQ calls -------------------------------------------------------------------
    def get_bitfile_metadata(self, bitfile_name, partial: bool = False):
        from pynq.metadata.runtime_metadata_parser import RuntimeMetadataParser
        from pynqmetadata.frontends import Metadata

        hwh = Path(bitfile_name).with_suffix(".hwh")
        if not hwh.exists():
            raise RuntimeError("Unable to find metadata for bitstream")
        return RuntimeMetadataParser(Metadata(input=hwh))

    def download(self, bitstream, parser=None):
        self.downloads += 1
        self.accelerator.reset()
        self.post_download(bitstream, parser, self.name)

    def _window(self, address: int) -> int | None:
        offset = address - self.register_base
        return offset if 0 <= offset < regs.REGISTER_SPAN else None

    def read_registers(self, address: int, length: int) -> bytes:
        words = []
        for a in range(address, address + length, 4):
            offset = self._window(a)
            value = (
                self.accelerator.read(offset) if offset is not None else self.ps_registers.get(a)
            )
            words.append(value or 0)
        return np.array(words, "<u4").tobytes()[:length]

    def write_registers(self, address: int, data: bytes) -> None:
        for k, word in enumerate(np.frombuffer(bytes(data).ljust(4, b"\0"), "<u4")):
            a = address + 4 * k
            offset = self._window(a)
            if offset is None:
                self.ps_registers[a] = int(word)
            else:
                self.accelerator.write(offset, int(word))

    def allocate(self, shape, dtype, **kwargs):
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        size = max(PAGE, -(-nbytes // PAGE) * PAGE)
        address = self._first_fit(size)
        if address is None:
            raise RuntimeError(f"Allocate failed: {nbytes} bytes ({self.free_bytes} free)")
        self.allocations[address] = size
        host = np.zeros(size, np.uint8)  # the CPU's (cached) view
        buf = SimBuffer(
            shape,
            dtype,
            buffer=host,
            device=self,
            device_address=address,
            bo=address,
            coherent=False,
        )
        buf.owner = self
        return buf

    def flush(self, bo, offset, ptr, size):
        address = bo + offset
        self.syncs.append(("flush", address, size))
        host = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * size).from_address(ptr))
        self.ddr[address - self.cma_base : address - self.cma_base + size] = host

    def invalidate(self, bo, offset, ptr, size):
        address = bo + offset
        self.syncs.append(("invalidate", address, size))
        host = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * size).from_address(ptr))
        host[:] = self.ddr[address - self.cma_base : address - self.cma_base + size]

    # ---- bookkeeping -----------------------------------------------------------------------
    def _first_fit(self, size: int) -> int | None:
        at = self.cma_base
        for address in sorted(self.allocations):
            if address - at >= size:
                return at
            at = max(at, address + self.allocations[address])
        return at if self.cma_base + self.cma_bytes - at >= size else None

    @property
    def free_bytes(self) -> int:
        return self.cma_bytes - sum(self.allocations.values())

    def write_meminfo(self, path: str | Path) -> Path:
        """A `/proc/meminfo` with this board's CMA figures (the device reads CmaFree)."""
        path = Path(path)
        path.write_text(
            f"CmaTotal: {self.cma_bytes // 1024} kB\nCmaFree: {self.free_bytes // 1024} kB\n"
        )
        return path
