"""The synthetic `.hwh` (boards/flows/hwh.py), opened by PYNQ's own Overlay: pynq parses it, maps
the accelerator, programs the fabric clock and builds the register map. No board is needed. A
fake pynq.Device keeps registers in a dict. Run these tests in a venv that has pynq
(`.venv-pynq`); elsewhere they skip."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

# "pynq.overlay", not "pynq": tests/ is on sys.path, so where the package is missing this folder
# (tests/pynq) imports as an empty namespace package named pynq.
pytest.importorskip("pynq.overlay")

import pynq  # noqa: E402
from pynq.metadata.runtime_metadata_parser import RuntimeMetadataParser  # noqa: E402
from pynq.ps import ZU_CRL_REGISTERS, ZYNQ_SLCR_REGISTERS  # noqa: E402
from pynqmetadata.frontends import Metadata  # noqa: E402

from tilecraft.boards import board, board_names  # noqa: E402
from tilecraft.boards.block_design import (  # noqa: E402
    INSTANCE,
    INTC,
    REGISTER_RANGE,
    VLNV,
    BlockDesign,
    block_design,
)
from tilecraft.boards.flows.hwh import hwh_text, write_hwh  # noqa: E402
from tilecraft.hw import regs  # noqa: E402

ZYNQMP_BOARDS = [name for name in board_names() if board(name).family == "zynqmp"]
ACCESS = {"rw": "read-write", "r": "read-only", "w": "write-only"}


class _FakeDevice(pynq.Device):
    """Just enough of a board for pynq.Overlay: registers in a dict, the real metadata parser,
    and a download that only records itself."""

    _probe_priority_ = 613  # any free one: PYNQ's own devices take 50, 100 and 200

    @classmethod
    def _probe_(cls):
        return []  # never probed into Device.devices (cached on first use): see `device`

    def __init__(self, arch: str, registers: dict[int, int]):
        super().__init__("tilecraft_hwh_test")
        self.name = self.tag
        self.capabilities = {"REGISTER_RW": True}
        self.arch = arch
        self.timestamp = ""
        self.bitfile_name = None
        self.registers = dict(registers)
        self.written: set[int] = set()

    def read_registers(self, address: int, length: int) -> bytes:
        words = range(address, address + length, 4)
        return b"".join(self.registers.get(a, 0).to_bytes(4, "little") for a in words)

    def write_registers(self, address: int, data: bytes) -> None:
        for i in range(0, len(data), 4):
            self.registers[address + i] = int.from_bytes(data[i : i + 4], "little")
            self.written.add(address + i)

    def get_bitfile_metadata(self, bitfile_name: str, partial: bool = False):
        hwh = Path(bitfile_name).with_suffix(".hwh")
        return RuntimeMetadataParser(Metadata(input=str(hwh)))

    def download(self, bitstream, parser=None) -> None:
        self.post_download(bitstream, parser, self.name)


def _clock_registers(design: BlockDesign) -> tuple[int, int, list[int]]:
    """(IO PLL register, its value for the board's PLL, the four fabric clock registers), at
    the addresses and fields where pynq.Clocks reads and writes them (pynq/ps.py)."""
    if design.zynqmp:  # CRL_APB; the PLL multiplies the 33.333 MHz PSS_REF_CLK
        base, table, ref_mhz = 0xFF5E0000, ZU_CRL_REGISTERS, 33.333
        pll, multiplier, fabric = "IOPLL_CTRL", "FBDIV", "PL{}_REF_CTRL"
    else:  # SLCR; the PLL multiplies the 50 MHz PS_CLK
        base, table, ref_mhz = 0xF8000000, ZYNQ_SLCR_REGISTERS, 50.0
        pll, multiplier, fabric = "IO_PLL_CTRL", "PLL_FDIV", "FPGA{}_CLK_CTRL"
    shift = table[pll]["fields"][multiplier]["bit_offset"]
    value = round(design.board.ps.pll_mhz / ref_mhz) << shift
    clocks = [base + table[fabric.format(i)]["address_offset"] for i in range(4)]
    return base + table[pll]["address_offset"], value, clocks


@pytest.fixture(params=[n for n in board_names() if board(n).ps is not None])  # PYNQ boards
def design(request) -> BlockDesign:
    return block_design(board(request.param))


@pytest.fixture
def device(design, monkeypatch):
    """A fake device for `design`'s PS, made PYNQ's active device for the test. pynq.Clocks
    keeps the device it first drives (pynq/ps.py `_ClocksMeta._instance` caches
    `_real_instance`, and `Clocks.set_device` does not reset it), so each test starts it
    afresh and puts back whatever was there before."""
    pll, value, _ = _clock_registers(design)
    fake = _FakeDevice("aarch64" if design.zynqmp else "armv7l", {pll: value})
    monkeypatch.setattr(pynq.Device, "_active_device", fake, raising=False)
    monkeypatch.setattr(pynq.Clocks, "device", fake)
    before = vars(pynq.Clocks).get("_real_instance")
    _forget_clocks()
    yield fake
    _forget_clocks()
    if before is not None:
        pynq.Clocks._real_instance = before


def _forget_clocks() -> None:
    if "_real_instance" in vars(pynq.Clocks):
        del pynq.Clocks._real_instance


@pytest.fixture
def overlay(design, device, tmp_path):
    if not design.zynqmp and int(pynq.__version__.split(".")[0]) >= 4:
        pytest.skip("PYNQ 4 dropped Zynq-7000: it sets clocks from ZynqMP-only parameters")
    write_hwh(design, tmp_path / f"{design.name}.hwh")
    bit = tmp_path / f"{design.name}.bit"
    bit.write_bytes(b"")  # only its name is read until a real download
    return pynq.Overlay(str(bit), download=True)


def test_the_accelerator_is_an_ip_at_the_register_base(design, overlay, device):
    entry = overlay.ip_dict[INSTANCE]
    assert entry["phys_addr"] == design.register_base
    assert entry["addr_range"] == REGISTER_RANGE
    assert entry["type"] == VLNV
    assert overlay.ip_dict[overlay.parser.ps_name]["type"].split(":")[2] == design.board.ps.ip
    ip = overlay.tilecraft_0
    assert isinstance(ip, pynq.DefaultIP)
    ip.mmio.write(regs.OFFSETS["INSN_COUNT"], 7)
    assert device.registers[design.register_base + regs.OFFSETS["INSN_COUNT"]] == 7
    device.registers[design.register_base + regs.OFFSETS["STATUS"]] = regs.DONE
    assert ip.read(regs.OFFSETS["STATUS"]) == regs.DONE


def test_download_programs_the_fabric_clock(design, overlay, device):
    c = design.clock
    assert overlay.clock_dict[0].items() >= {"enable": 1, "divisor0": c.divisor0}.items()
    assert overlay.clock_dict[0]["divisor1"] == c.divisor1
    assert [overlay.clock_dict[i]["enable"] for i in (1, 2, 3)] == [0, 0, 0]
    _, _, clocks = _clock_registers(design)
    assert set(clocks) <= device.written
    assert pynq.Clocks.fclk0_mhz == pytest.approx(c.mhz, rel=1e-4)  # read back from the PS


def test_the_register_map_is_hw_regs(design, overlay, device):
    parsed = overlay.ip_dict[INSTANCE]["registers"]
    expected = {r.name: (r.offset, 32, ACCESS[r.access]) for r in design.registers}
    assert {n: (r["address_offset"], r["size"], r["access"]) for n, r in parsed.items()} == expected
    register_map = overlay.tilecraft_0.register_map
    register_map.DRAM_SIZE = 0x1000
    assert device.registers[design.register_base + regs.OFFSETS["DRAM_SIZE"]] == 0x1000
    device.registers[design.register_base + regs.OFFSETS["MAGIC"]] = regs.MAGIC
    assert int(register_map.MAGIC) == regs.MAGIC
    with pytest.raises(AttributeError):
        register_map.MAGIC = 0  # read-only: no setter


def test_the_interrupt_is_listed_behind_the_interrupt_controller(design, overlay):
    """pynq.Interrupt finds its pin in `interrupt_pins`, which holds only pins behind an AXI
    interrupt controller on a PS interrupt input (InterruptControllersView walks from the PS
    IRQ to axi_intc cells, InterruptPinsView from each one's `intr` to what drives it)."""
    pin = overlay.interrupt_pins[f"{INSTANCE}/interrupt"]
    assert (pin["controller"], pin["index"]) == (INTC, 0)
    assert overlay.ip_dict[INSTANCE]["interrupts"]["interrupt"]["controller"] == INTC
    controller = overlay.interrupt_controllers[INTC]
    assert (controller["parent"], controller["index"]) == ("", 0)  # "": the PS itself
    # IRQ_F2P[0] / pl_ps_irq0[0]: the GIC interrupt of the image's generic-uio node, which
    # pynq.Interrupt waits on (fabric@40000000: 0x1d, fabric@A0000000: 0x59; SPIs start at 32)
    assert controller["raw_irq"] == 32 + (0x59 if design.zynqmp else 0x1D)
    entry = overlay.ip_dict[INTC]  # where pynq's interrupt driver reads and writes it
    assert (entry["phys_addr"], entry["addr_range"]) == (design.intc_base, REGISTER_RANGE)
    assert entry["type"].startswith("xilinx.com:ip:axi_intc:")
    assert not design.register_base <= design.intc_base < design.register_base + REGISTER_RANGE
    # the wires: the accelerator into the controller's intr, its irq into the PS
    intr = overlay.systemgraph.blocks[INTC].ports["intr"].sig().connections().values()
    assert {(end.parent().parent().name, end.name) for end in intr} == {(INSTANCE, "interrupt")}
    ps = overlay.systemgraph.blocks[design.ps_instance]
    ends = ps.get_irqs[design.interrupt_pin].connections().values()
    assert {(end.parent().parent().name, end.name) for end in ends} == {(INTC, "irq")}


def test_the_accelerator_reaches_dram_through_the_data_port(design, overlay):
    m_axi = overlay.systemgraph.blocks[INSTANCE].ports["m_axi"]
    data_port = overlay.systemgraph.blocks[design.ps_instance].ports[design.data_port]
    regions = list(m_axi.addrmap.values())
    assert {(r["memtype"], r["subord_port"]) for r in regions} == {("memory", data_port.ref)}
    assert min(r["baseaddr"] for r in regions) == 0
    assert sum(r["addr_range"] for r in regions) == design.board.memory.dram_mib << 20


@pytest.mark.parametrize(
    "design", [block_design(board(name)) for name in ZYNQMP_BOARDS], ids=ZYNQMP_BOARDS
)
def test_zynqmp_port_widths_are_the_designs(design, overlay):
    """The widths download writes into the PS (embedded_device.set_axi_port_width reads them
    from here); the control port M_AXI_HPM0_FPD is MAXIGP0, the data port S_AXI_HP0_FPD is
    SAXIGP2."""
    assert (design.control_port, design.data_port) == ("M_AXI_HPM0_FPD", "S_AXI_HP0_FPD")
    parameters = overlay.ip_dict[overlay.parser.ps_name]["parameters"]
    widths = {k: v for k, v in parameters.items() if re.fullmatch(r"C_[MS]AXIGP\d_DATA_WIDTH", k)}
    assert len(widths) == 10 and set(widths.values()) <= {"32", "64", "128"}
    assert widths["C_MAXIGP0_DATA_WIDTH"] == "32"
    assert widths["C_SAXIGP2_DATA_WIDTH"] == str(design.config.axi_data_bits)


def test_the_accelerator_ports_are_the_rtls(design):
    wiring = pytest.importorskip("amaranth.lib.wiring")
    from amaranth.hdl import Shape

    from tilecraft.hw.rtl.top import top_signature

    rtl = {
        "_".join(map(str, path)): ("O" if m.flow == wiring.Out else "I", Shape.cast(m.shape).width)
        for path, m in top_signature(design.config).members.flatten()
        if m.is_port
    }
    module = ET.fromstring(hwh_text(design)).find(f"MODULES/MODULE[@INSTANCE='{INSTANCE}']")
    hwh = {
        p.get("NAME"): (p.get("DIR"), int(p.get("LEFT", "0")) - int(p.get("RIGHT", "0")) + 1)
        for p in module.iter("PORT")
    }
    assert hwh == rtl
