"""The block design of a PYNQ overlay, described once: the Zynq processing system, the
accelerator as a module reference, its register window, its DDR port, its interrupt (through an
AXI interrupt controller, the only way `pynq.Interrupt` can wait on it) and the fabric clock.
The Vivado Tcl (`flows/vivado.py`) builds this design; the `.hwh` writer (`flows/hwh.py`)
describes the same design the way Vivado's hardware handoff would, so the runtime's off-board
tests open an overlay PYNQ parses exactly as it parses a real one."""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.boards import Board
from tilecraft.errors import ConfigError
from tilecraft.hw import regs
from tilecraft.hw.config import HwConfig

MODULE = regs.MODULE  # the Verilog top (boards/flows/verilog.py writes it)
INSTANCE = "tilecraft_0"
VLNV = f"xilinx.com:module_ref:{MODULE}:1.0"  # what a module reference shows up as in a .hwh
REGISTER_RANGE = 0x10000  # 64K: the smallest window Vivado's address editor assigns
INTC = "axi_intc_0"  # the AXI interrupt controller between the accelerator and the PS
ZYNQ_INTC_BASE = 0x41800000  # where PYNQ's base overlays put axi_intc_0 on Zynq-7000
DIVISOR_MAX = 63  # each of the two 6-bit fabric clock divisors
CLOCK_TOLERANCE = 0.01  # how far the achievable fabric clock may be from the config's


@dataclass(frozen=True)
class FabricClock:
    requested_mhz: float
    divisor0: int
    divisor1: int
    pll_mhz: float

    @property
    def mhz(self) -> float:
        return self.pll_mhz / (self.divisor0 * self.divisor1)


def fabric_clock(pll_mhz: float, mhz: float) -> FabricClock:
    """The divisor pair that brings the PLL closest to `mhz`; an error naming the nearest
    achievable clocks when none is within 1%."""
    if mhz <= 0:
        raise ConfigError(f"the fabric clock must be positive, not {mhz} MHz")
    pairs = [(a, b) for a in range(1, DIVISOR_MAX + 1) for b in range(1, DIVISOR_MAX + 1)]
    a, b = min(pairs, key=lambda p: (abs(pll_mhz / (p[0] * p[1]) - mhz), p[1], p[0]))
    clock = FabricClock(mhz, a, b, pll_mhz)
    if abs(clock.mhz - mhz) > CLOCK_TOLERANCE * mhz:
        near = sorted({round(pll_mhz / n, 3) for n in range(1, 64)}, key=lambda f: abs(f - mhz))
        raise ConfigError(
            f"a {mhz} MHz fabric clock cannot be divided from the {pll_mhz} MHz PLL; the "
            f"nearest are {', '.join(f'{f:g}' for f in sorted(near[:4]))} MHz"
        )
    return clock


@dataclass(frozen=True)
class BlockDesign:
    """One overlay: `name` is its bitstream's stem (`name.bit` + `name.hwh`)."""

    name: str
    board: Board
    config: HwConfig

    @property
    def zynqmp(self) -> bool:
        return self.board.family == "zynqmp"

    @property
    def ps_instance(self) -> str:
        return "zynq_ultra_ps_e_0" if self.zynqmp else "processing_system7_0"

    @property
    def clock(self) -> FabricClock:
        return fabric_clock(self.board.ps.pll_mhz, self.config.clock_mhz)

    @property
    def register_base(self) -> int:
        return self.board.ps.register_base

    @property
    def control_port(self) -> str:
        return self.board.ps.control_port

    @property
    def data_port(self) -> str:
        return self.board.ps.data_port

    @property
    def clock_pin(self) -> str:
        return "pl_clk0" if self.zynqmp else "FCLK_CLK0"

    @property
    def reset_pin(self) -> str:
        return "pl_resetn0" if self.zynqmp else "FCLK_RESET0_N"

    @property
    def interrupt_pin(self) -> str:
        """The PS interrupt input (IRQ_F2P, pl_ps_irq0) the interrupt controller drives."""
        return self.board.ps.interrupt

    @property
    def intc_base(self) -> int:
        """Where the interrupt controller's 64K of registers start: PYNQ's Interrupt class
        enables and acknowledges the accelerator's line there. Zynq-7000: where PYNQ's base
        overlays put theirs, in the GP0 range. ZynqMP: the 64K after the accelerator's, in the
        same HPM0_FPD range."""
        return self.register_base + REGISTER_RANGE if self.zynqmp else ZYNQ_INTC_BASE

    @property
    def registers(self) -> tuple[regs.Register, ...]:
        return regs.REGISTERS

    def ps_settings(self) -> dict[str, str]:
        """The processing system's CONFIG values this design sets (Vivado and the .hwh)."""
        c = self.clock
        if self.zynqmp:
            return {
                "PSU__USE__M_AXI_GP0": "1",
                "PSU__USE__M_AXI_GP1": "0",
                "PSU__USE__M_AXI_GP2": "0",
                "PSU__USE__S_AXI_GP2": "1",
                "PSU__SAXIGP2__DATA_WIDTH": str(self.config.axi_data_bits),
                "PSU__MAXIGP0__DATA_WIDTH": "32",
                "PSU__USE__IRQ0": "1",
                "PSU__FPGA_PL0_ENABLE": "1",
                "PSU__CRL_APB__PL0_REF_CTRL__SRCSEL": "IOPLL",
                "PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ": f"{c.requested_mhz:g}",
                "PSU__CRL_APB__PL0_REF_CTRL__DIVISOR0": str(c.divisor0),
                "PSU__CRL_APB__PL0_REF_CTRL__DIVISOR1": str(c.divisor1),
                "PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ": f"{c.mhz:.6f}",
                "PSU__OVERRIDE__BASIC_CLOCK": "0",
            }
        return {
            "PCW_USE_M_AXI_GP0": "1",
            "PCW_USE_S_AXI_HP0": "1",
            "PCW_S_AXI_HP0_DATA_WIDTH": "64",  # fixed at boot; PYNQ never changes it
            "PCW_USE_FABRIC_INTERRUPT": "1",
            "PCW_IRQ_F2P_INTR": "1",
            "PCW_EN_CLK0_PORT": "1",
            "PCW_EN_RST0_PORT": "1",
            "PCW_FPGA_FCLK0_ENABLE": "1",
            "PCW_FCLK0_PERIPHERAL_CLKSRC": "IO PLL",
            "PCW_FPGA0_PERIPHERAL_FREQMHZ": f"{c.requested_mhz:g}",
            "PCW_FCLK0_PERIPHERAL_DIVISOR0": str(c.divisor0),
            "PCW_FCLK0_PERIPHERAL_DIVISOR1": str(c.divisor1),
            "PCW_ACT_FPGA0_PERIPHERAL_FREQMHZ": f"{c.mhz:.6f}",
        }


def block_design(board: Board, config: HwConfig | None = None, name: str = "tilecraft"):
    """The overlay of `config` (default: the board's own) on `board`."""
    if not name.isidentifier():
        raise ConfigError(f"an overlay name must be an identifier (it names files), not {name!r}")
    design = BlockDesign(name, board, config or board.config)
    design.clock  # noqa: B018 - refuse an unreachable fabric clock now, not in Vivado
    if design.config.axi_data_bits > 128 or (
        not design.zynqmp and design.config.axi_data_bits != 64
    ):
        raise ConfigError(
            f"the {board.name} data port {board.ps.data_port} is "
            f"{'64' if not design.zynqmp else '32 to 128'} bits wide; the config's AXI master "
            f"is {design.config.axi_data_bits}"
        )
    return design
