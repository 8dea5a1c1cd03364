"""The hardware handoff (`.hwh`) of an overlay, written the way Vivado writes it, without Vivado.

PYNQ opens an overlay from `name.bit` and the `name.hwh` beside it. pynqmetadata's HwhFrontend
parses the XML and PYNQ's views read:
* `ip_dict`: the processing system's master BUSINTERFACE and its MEMORYMAP give the
  accelerator's base address, range and VLNV (the VLNV picks the driver class). The
  accelerator's ADDRESSBLOCK gives `registers`, which `ip.register_map` is built from.
* `clock_dict`: the PS clock parameters (enable, divisors, source). `Overlay.download` writes
  them into the PS clock registers. On ZynqMP it also writes the C_*AXIGP*_DATA_WIDTH port
  widths.
* `interrupt_controllers` and `interrupt_pins` (what `pynq.Interrupt` looks a pin up in): PYNQ
  walks from the PS's interrupt input (IRQ_F2P, pl_ps_irq0) along its net to cells whose VLNV
  names `axi_intc` (each a controller, numbered in order, its parent the PS), then from each
  controller's `intr` port along its net to the pins that drive it (index 0 for the first).
  A pin wired straight to the PS is listed nowhere, hence the `axi_intc_0` between the
  accelerator's `interrupt` and the PS.
* The other nets (PORT/CONNECTION): the PS clock and reset to the accelerator and controller.

The file is synthetic so that off-board tests, run with a fake `pynq.Device`, can open an
overlay before any bitstream exists. PYNQ parses it exactly as it parses Vivado's. It uses
Vivado's element and attribute names and describes the three cells PYNQ reads: the PS, the
accelerator (its buses joined to the PS's net by net, with each side's own address and data
widths) and the interrupt controller. It leaves out what PYNQ reads nothing from: the
interconnects and reset block that Vivado's automation inserts between the cells (so the
controller's `s_axi`, which shares the PS's control port with the accelerator through an
interconnect, is written unconnected; the PS's memory map is what places it), the controller's
register descriptions, and the thousands of PS and controller parameters the design leaves at
their defaults. One addition: Vivado writes no registers for a module reference, but this file
carries hw.regs' register map, so `register_map` works.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from tilecraft.boards.block_design import (
    INSTANCE,
    INTC,
    MODULE,
    REGISTER_RANGE,
    VLNV,
    BlockDesign,
)
from tilecraft.files import write_atomic
from tilecraft.hw import axi, regs

AXIMM = "xilinx.com:interface:aximm:1.0"
PS_VLNVS = {
    "processing_system7": "xilinx.com:ip:processing_system7:5.5",
    "zynq_ultra_ps_e": "xilinx.com:ip:zynq_ultra_ps_e:3.5",
}
CONTROL = "s_axi_control"  # the accelerator's AXI4-Lite slave
MASTER = "m_axi"  # its AXI4 master into DDR
SEGMENT = "reg0"  # the address segment Vivado gives a module reference's slave
INTC_VLNV = "xilinx.com:ip:axi_intc:4.1"  # its version in the Vivado releases PYNQ builds with
INTC_SLAVE = "s_axi"
INTC_SEGMENT = "Reg"  # the address segment Vivado gives the controller's registers
INTC_ADDR_BITS = 9  # its C_S_AXI_ADDR_WIDTH
NO_NET = "__NOC__"  # what Vivado names the bus of an unconnected interface
LEVEL_HIGH = {"SENSITIVITY": "LEVEL_HIGH", "SIGIS": "INTERRUPT"}
ACCESS = {"rw": "read-write", "r": "read-only", "w": "write-only"}
# The address widths of the PS ports: (master, slave) on Zynq-7000 and on ZynqMP.
PS_ADDR_BITS = {False: (32, 32), True: (40, 49)}
# The ZynqMP AXI interfaces by the index their ports (maxigp0_*, saxigp2_*) and their
# C_MAXIGP<n>_DATA_WIDTH / C_SAXIGP<n>_DATA_WIDTH parameters use.
ZYNQMP_GP = {
    "M_AXI_HPM0_FPD": 0, "M_AXI_HPM1_FPD": 1, "M_AXI_HPM0_LPD": 2,
    "S_AXI_HPC0_FPD": 0, "S_AXI_HPC1_FPD": 1, "S_AXI_HP0_FPD": 2, "S_AXI_HP1_FPD": 3,
    "S_AXI_HP2_FPD": 4, "S_AXI_HP3_FPD": 5, "S_AXI_LPD": 6,
}  # fmt: skip
ZYNQMP_MASTER_WIDTHS = ("128", "128", "32")  # Vivado's defaults for C_MAXIGP0..2_DATA_WIDTH
ZYNQMP_SLAVE_WIDTH = "128"  # and for C_SAXIGP0..6_DATA_WIDTH
ZYNQMP_LOW_DDR = 2 << 30  # the first 2 GiB of DRAM sit at 0, the rest at ZYNQMP_HIGH_DDR
ZYNQMP_HIGH_DDR = 0x8_0000_0000

AxiSignal = axi.Signal
End = tuple[str, str]  # one end of a net: (instance, port)
# a port's net name and the net's other ends; None for a port Vivado leaves unconnected
Links = dict[End, tuple[str, list[End]] | None]


@dataclass(frozen=True)
class Interface:
    """A cell's AXI bus interface: its signals and the port each is on."""

    instance: str
    name: str
    master: bool
    signals: tuple[AxiSignal, ...]
    ports: tuple[str, ...]

    @property
    def data_bits(self) -> int:
        return next(width for name, width, _ in self.signals if name == "wdata")

    def physical_ports(self) -> list[tuple[str, int, bool]]:
        """(port, width, is an output) of each signal."""
        return [
            (port, width, master_drives == self.master)
            for port, (_, width, master_drives) in zip(self.ports, self.signals)
        ]


@dataclass(frozen=True)
class Bus:
    """An AXI connection, named as Vivado names it: after its master."""

    master: Interface
    slave: Interface

    @property
    def name(self) -> str:
        return f"{self.master.instance}_{self.master.name}"


def hwh_text(design: BlockDesign) -> str:
    """The `.hwh` XML of `design`."""
    board = design.board
    root = ET.Element("EDKSYSTEM", EDWVERSION="1.2", VIVADOVERSION=board.pynq.vivado)
    device, package, speed = _part_fields(board.part, board.part_family)
    ET.SubElement(
        root,
        "SYSTEMINFO",
        ARCH="zynquplus" if design.zynqmp else "zynq",
        BOARD=board.board_part,
        DEVICE=device,
        NAME=design.name,
        PACKAGE=package,
        SPEEDGRADE=speed,
    )
    ET.SubElement(root, "EXTERNALPORTS")
    ET.SubElement(root, "EXTERNALINTERFACES")
    modules = ET.SubElement(root, "MODULES")
    control, data, intc = _control_bus(design), _data_bus(design), _intc_interface()
    links = _links(_nets(design, (control, data)))
    links.update(dict.fromkeys(((INTC, port) for port in intc.ports), None))
    modules.append(_ps_module(design, links, control, data, intc))
    modules.append(_accelerator_module(design, links, control, data))
    modules.append(_intc_module(design, links, intc))
    ET.indent(root)
    text = ET.tostring(root, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8" standalone="no" ?>\n{text}\n'


def write_hwh(design: BlockDesign, path: str | Path) -> Path:
    """Write `design`'s `.hwh` to `path` (PYNQ wants it beside the `.bit`, with the same
    stem). Returns the path."""
    return write_atomic(path, hwh_text(design))


def _part_fields(part: str, device: str) -> tuple[str, str, str]:
    """(device, package, speed grade) of a part: xczu7ev-ffvc1156-2-e -> xczu7ev, ffvc1156,
    -2; xc7z020clg400-1 -> xc7z020, clg400, -1."""
    package, speed = re.match(r"-?([a-z]+\d+)-(\w+)", part[len(device) :]).groups()
    return device, package, f"-{speed}"


# --- the buses and nets ---


def _ps_interface(design: BlockDesign, name: str, signals: tuple[AxiSignal, ...]) -> Interface:
    """A PS interface, its ports named as the PS names them: M_AXI_GP0_ARADDR on Zynq-7000,
    maxigp0_araddr on ZynqMP."""
    if design.zynqmp:
        prefix = f"{name[0].lower()}axigp{ZYNQMP_GP[name]}_"
        ports = tuple(prefix + signal for signal, _, _ in signals)
    else:
        ports = tuple(f"{name}_{signal.upper()}" for signal, _, _ in signals)
    return Interface(design.ps_instance, name, name.startswith("M_"), signals, ports)


def _accelerator_interface(name: str, master: bool, signals: tuple[AxiSignal, ...]) -> Interface:
    ports = tuple(f"{name}_{signal}" for signal, _, _ in signals)
    return Interface(INSTANCE, name, master, signals, ports)


def _intc_interface() -> Interface:
    """The interrupt controller's AXI4-Lite slave: s_axi_awaddr and so on."""
    signals = axi.axi_lite(INTC_ADDR_BITS, axi.LITE_DATA_BITS)
    ports = tuple(f"{INTC_SLAVE}_{signal}" for signal, _, _ in signals)
    return Interface(INTC, INTC_SLAVE, False, signals, ports)


def _control_bus(design: BlockDesign) -> Bus:
    """The PS's master port to the accelerator's registers."""
    ps_bits = PS_ADDR_BITS[design.zynqmp][0]
    return Bus(
        _ps_interface(design, design.control_port, axi.axi_lite(ps_bits, axi.LITE_DATA_BITS)),
        _accelerator_interface(CONTROL, False, axi.axi_lite(regs.ADDR_BITS, axi.LITE_DATA_BITS)),
    )


def _data_bus(design: BlockDesign) -> Bus:
    """The accelerator's master port to the PS's DDR port."""
    ps_bits, data_bits = PS_ADDR_BITS[design.zynqmp][1], design.config.axi_data_bits
    return Bus(
        _accelerator_interface(MASTER, True, axi.axi4(axi.ADDR_BITS, data_bits)),
        _ps_interface(design, design.data_port, axi.axi4(ps_bits, data_bits)),
    )


def _ps_aclk(design: BlockDesign, interface: str) -> str:
    """The PS clock input of `interface`: M_AXI_GP0_ACLK, maxihpm0_fpd_aclk."""
    if design.zynqmp:
        return interface.lower().replace("_axi_", "axi") + "_aclk"
    return f"{interface}_ACLK"


def _nets(design: BlockDesign, buses: tuple[Bus, ...]) -> list[tuple[End, list[End]]]:
    """Every net as (driver, sinks): the clock, reset and interrupt (the accelerator's into
    the controller, the controller's to the PS), and each bus signal."""
    ps = design.ps_instance
    clock_sinks = [(INSTANCE, "aclk"), (INTC, "s_axi_aclk")] + [
        (ps, _ps_aclk(design, port)) for port in (design.control_port, design.data_port)
    ]
    nets = [
        ((ps, design.clock_pin), clock_sinks),
        ((ps, design.reset_pin), [(INSTANCE, "aresetn"), (INTC, "s_axi_aresetn")]),
        ((INSTANCE, "interrupt"), [(INTC, "intr")]),
        ((INTC, "irq"), [(ps, design.interrupt_pin)]),
    ]
    for bus in buses:
        master, slave = bus.master, bus.slave
        for (_, _, master_drives), m_port, s_port in zip(master.signals, master.ports, slave.ports):
            m_end, s_end = (master.instance, m_port), (slave.instance, s_port)
            nets.append((m_end, [s_end]) if master_drives else (s_end, [m_end]))
    return nets


def _links(nets: list[tuple[End, list[End]]]) -> Links:
    """Each connected port's net, as Vivado lists a net on every end: named after its driver,
    the driver listing its sinks and each sink its driver."""
    links: Links = {}
    for driver, sinks in nets:
        name = "_".join(driver)
        links[driver] = (name, sinks)
        for sink in sinks:
            links[sink] = (name, [driver])
    return links


# --- the three cells ---


def _ps_module(
    design: BlockDesign, links: Links, control: Bus, data: Bus, intc: Interface
) -> ET.Element:
    ps = design.ps_instance
    module = _module(ps, PS_VLNVS[design.board.ps.ip], design.board.ps.ip, IS_PL="FALSE")
    parameters = ET.SubElement(module, "PARAMETERS")
    for name, value in sorted(_ps_parameters(design).items()):
        ET.SubElement(parameters, "PARAMETER", NAME=name, VALUE=value)
    ports = ET.SubElement(module, "PORTS")
    hz = _clock_hz(design)
    _port(ports, links, ps, design.clock_pin, True, SIGIS="clk", CLKFREQUENCY=hz)
    _port(ports, links, ps, design.reset_pin, True, SIGIS="rst", POLARITY="ACTIVE_LOW")
    _port(ports, links, ps, design.interrupt_pin, False, LEFT="0", RIGHT="0", **LEVEL_HIGH)
    for interface in (design.control_port, design.data_port):
        _port(ports, links, ps, _ps_aclk(design, interface), False, SIGIS="clk", CLKFREQUENCY=hz)
    _bus_interfaces(module, ports, links, ((control, control.master), (data, data.slave)))
    memory_map = ET.SubElement(module, "MEMORYMAP")
    _memrange(memory_map, control, SEGMENT, design.register_base, REGISTER_RANGE, "REGISTER")
    to_intc = Bus(control.master, intc)
    _memrange(memory_map, to_intc, INTC_SEGMENT, design.intc_base, REGISTER_RANGE, "REGISTER")
    return module


def _ps_parameters(design: BlockDesign) -> dict[str, str]:
    """The design's PS settings, plus what PYNQ reads that the design leaves at Vivado's
    defaults: the idle fabric clocks 1-3 and, on ZynqMP, every AXI port's data width."""
    settings = design.ps_settings()
    parameters = {}
    for i in range(1, 4):
        parameters.update(_idle_clock(design.zynqmp, i))
    if design.zynqmp:
        for n, default in enumerate(ZYNQMP_MASTER_WIDTHS):
            width = settings.get(f"PSU__MAXIGP{n}__DATA_WIDTH", default)
            parameters[f"C_MAXIGP{n}_DATA_WIDTH"] = width
        for n in range(7):
            width = settings.get(f"PSU__SAXIGP{n}__DATA_WIDTH", ZYNQMP_SLAVE_WIDTH)
            parameters[f"C_SAXIGP{n}_DATA_WIDTH"] = width
    return parameters | settings


def _idle_clock(zynqmp: bool, i: int) -> dict[str, str]:
    """Fabric clock `i`, disabled, as Vivado describes an unused one."""
    if zynqmp:
        prefix = f"PSU__CRL_APB__PL{i}_REF_CTRL__"
        return {
            f"PSU__FPGA_PL{i}_ENABLE": "0",
            f"{prefix}SRCSEL": "RPLL",
            f"{prefix}DIVISOR0": "4",
            f"{prefix}DIVISOR1": "1",
            f"{prefix}FREQMHZ": "100",
            f"{prefix}ACT_FREQMHZ": "100",
        }
    return {
        f"PCW_FPGA_FCLK{i}_ENABLE": "0",
        f"PCW_FCLK{i}_PERIPHERAL_CLKSRC": "IO PLL",
        f"PCW_FCLK{i}_PERIPHERAL_DIVISOR0": "1",
        f"PCW_FCLK{i}_PERIPHERAL_DIVISOR1": "1",
    }


def _accelerator_module(design: BlockDesign, links: Links, control: Bus, data: Bus):
    module = _module(INSTANCE, VLNV, MODULE)
    blocks = ET.SubElement(module, "ADDRESSBLOCKS")
    block = ET.SubElement(
        blocks,
        "ADDRESSBLOCK",
        ACCESS="read-write",
        INTERFACE=CONTROL,
        NAME=SEGMENT,
        RANGE=str(REGISTER_RANGE),
        USAGE="register",
    )
    registers = ET.SubElement(block, "REGISTERS")
    for register in design.registers:
        _register(registers, register)
    ports = ET.SubElement(module, "PORTS")
    _port(ports, links, INSTANCE, "aclk", False, SIGIS="clk", CLKFREQUENCY=_clock_hz(design))
    _port(ports, links, INSTANCE, "aresetn", False, SIGIS="rst", POLARITY="ACTIVE_LOW")
    _port(ports, links, INSTANCE, "interrupt", True, **LEVEL_HIGH)
    _bus_interfaces(module, ports, links, ((control, control.slave), (data, data.master)))
    memory_map = ET.SubElement(module, "MEMORYMAP")
    for name, base, size in _dram_segments(design):
        _memrange(memory_map, data, name, base, size, "MEMORY")
    return module


def _intc_module(design: BlockDesign, links: Links, intc: Interface) -> ET.Element:
    """The interrupt controller as Vivado configures it from the Tcl: one input (Vivado sizes
    C_NUM_INTR_INPUTS to the net on `intr`), level-high like the accelerator's `interrupt`
    (bit 0 of C_KIND_OF_INTR clear: level; C_KIND_OF_LVL: high), a single level-high `irq`
    wire (the Tcl's C_IRQ_CONNECTION 1), and the SIE/CIE registers PYNQ's driver enables and
    masks its lines with."""
    module = _module(INTC, INTC_VLNV, "axi_intc", "INTERRUPT_CNTLR")
    parameters = ET.SubElement(module, "PARAMETERS")
    for name, value in (
        ("C_S_AXI_ADDR_WIDTH", str(INTC_ADDR_BITS)),
        ("C_S_AXI_DATA_WIDTH", str(axi.LITE_DATA_BITS)),
        ("C_NUM_INTR_INPUTS", "1"),
        ("C_KIND_OF_INTR", "0xfffffffe"),
        ("C_KIND_OF_EDGE", "0xffffffff"),
        ("C_KIND_OF_LVL", "0xffffffff"),
        ("C_HAS_SIE", "1"),
        ("C_HAS_CIE", "1"),
        ("C_IRQ_IS_LEVEL", "1"),
        ("C_IRQ_ACTIVE", "0x1"),
        ("C_IRQ_CONNECTION", "1"),
        ("C_BASEADDR", f"0x{design.intc_base:08X}"),
        ("C_HIGHADDR", f"0x{design.intc_base + REGISTER_RANGE - 1:08X}"),
    ):
        ET.SubElement(parameters, "PARAMETER", NAME=name, VALUE=value)
    ports = ET.SubElement(module, "PORTS")
    _port(ports, links, INTC, "s_axi_aclk", False, SIGIS="clk", CLKFREQUENCY=_clock_hz(design))
    _port(ports, links, INTC, "s_axi_aresetn", False, SIGIS="rst", POLARITY="ACTIVE_LOW")
    _port(ports, links, INTC, "intr", False, LEFT="0", RIGHT="0", **LEVEL_HIGH)
    _port(ports, links, INTC, "irq", True, **LEVEL_HIGH)
    _bus_interfaces(module, ports, links, ((None, intc),))
    return module


def _clock_hz(design: BlockDesign) -> str:
    return str(round(design.clock.mhz * 1e6))


def _dram_segments(design: BlockDesign) -> list[tuple[str, int, int]]:
    """(name, base, size) of the DRAM the data port reaches, as Vivado's address editor names
    it: HP0_DDR_LOWOCM on Zynq-7000; HP0_DDR_LOW (the low 2 GiB) and HP0_DDR_HIGH on ZynqMP."""
    port = design.data_port.split("_")[2]  # S_AXI_HP0_FPD -> HP0
    dram = design.board.memory.dram_mib << 20
    if not design.zynqmp:
        return [(f"{port}_DDR_LOWOCM", 0, dram)]
    low = min(dram, ZYNQMP_LOW_DDR)
    segments = [(f"{port}_DDR_LOW", 0, low)]
    if dram > low:
        segments.append((f"{port}_DDR_HIGH", ZYNQMP_HIGH_DDR, dram - low))
    return segments


# --- elements ---


def _module(
    instance: str, vlnv: str, modtype: str, modclass: str = "PERIPHERAL", **attrs: str
) -> ET.Element:
    return ET.Element(
        "MODULE",
        FULLNAME=f"/{instance}",
        INSTANCE=instance,
        IPTYPE="PERIPHERAL",
        IS_ENABLE="1",
        MODCLASS=modclass,
        MODTYPE=modtype,
        VLNV=vlnv,
        **attrs,
    )


def _port(
    ports: ET.Element,
    links: Links,
    instance: str,
    name: str,
    output: bool,
    width: int = 1,
    **attrs: str,
) -> None:
    """A PORT and its net, or, unconnected, neither SIGNAME nor CONNECTIONS (as Vivado writes
    one); SIGIS and the like in `attrs`."""
    if width > 1:
        attrs.update(LEFT=str(width - 1), RIGHT="0")
    attrs.setdefault("SIGIS", "undef")
    link = links[(instance, name)]
    port = ET.SubElement(ports, "PORT", DIR="O" if output else "I", NAME=name)
    if link is not None:
        port.set("SIGNAME", link[0])
    for key in sorted(attrs):
        port.set(key, attrs[key])
    if link is not None:
        connections = ET.SubElement(port, "CONNECTIONS")
        for other_instance, other_port in link[1]:
            ET.SubElement(connections, "CONNECTION", INSTANCE=other_instance, PORT=other_port)


def _bus_interfaces(module: ET.Element, ports: ET.Element, links: Links, ends) -> None:
    """The ports and BUSINTERFACE of each (bus, this cell's interface on it) in `ends`; a bus
    of None for an interface this file leaves unconnected."""
    interfaces = ET.SubElement(module, "BUSINTERFACES")
    for bus, interface in ends:
        for port, width, output in interface.physical_ports():
            _port(ports, links, interface.instance, port, output, width)
        element = ET.SubElement(
            interfaces,
            "BUSINTERFACE",
            BUSNAME=NO_NET if bus is None else bus.name,
            DATAWIDTH=str(interface.data_bits),
            NAME=interface.name,
            TYPE="MASTER" if interface.master else "SLAVE",
            VLNV=AXIMM,
        )
        portmaps = ET.SubElement(element, "PORTMAPS")
        for (signal, _, _), port in zip(interface.signals, interface.ports):
            ET.SubElement(portmaps, "PORTMAP", LOGICAL=signal.upper(), PHYSICAL=port)


def _memrange(memory_map: ET.Element, bus: Bus, block: str, base: int, size: int, memtype: str):
    """What `bus`'s master reaches at `base`: `block` of its slave."""
    ET.SubElement(
        memory_map,
        "MEMRANGE",
        ADDRESSBLOCK=block,
        BASENAME="C_BASEADDR",
        BASEVALUE=f"0x{base:08X}",
        HIGHNAME="C_HIGHADDR",
        HIGHVALUE=f"0x{base + size - 1:08X}",
        INSTANCE=bus.slave.instance,
        IS_DATA="TRUE",
        IS_INSTRUCTION="TRUE",
        MASTERBUSINTERFACE=bus.master.name,
        MEMTYPE=memtype,
        SLAVEBUSINTERFACE=bus.slave.name,
    )


def _register(registers: ET.Element, register: regs.Register) -> None:
    """A REGISTER as pynqmetadata reads one: a 32-bit word at an offset, with its access."""
    element = ET.SubElement(registers, "REGISTER", NAME=register.name)
    for name, value in (
        ("DESCRIPTION", register.doc),
        ("ADDRESS_OFFSET", f"{register.offset:#x}"),
        ("SIZE", "32"),
        ("ACCESS", ACCESS[register.access]),
        ("IS_ENABLED", "true"),
    ):
        ET.SubElement(element, "PROPERTY", NAME=name, VALUE=value)
