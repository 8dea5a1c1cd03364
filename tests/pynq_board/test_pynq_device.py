"""The `pynq` device through PYNQ's own Overlay/MMIO/allocate code, on a simulated board:
bit-exact with the `sim` device, the cache discipline, and every fault the issue names."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pynq.overlay")

import pynq  # noqa: E402

from tilecraft.compiler.operator.conv2d import conv2d  # noqa: E402
from tilecraft.errors import (  # noqa: E402
    AccessError,
    ConfigError,
    DeviceError,
    IllegalInstructionError,
)
from tilecraft.hw import regs  # noqa: E402
from tilecraft.hw.config import preset  # noqa: E402
from tilecraft.hw.isa import Finish, Load, MemId, encode, encode_uops, isa_for  # noqa: E402
from tilecraft.ops import Conv2d, Epilogue  # noqa: E402
from tilecraft.runtime import BufferSpec, Program, get_device  # noqa: E402
from tilecraft.runtime.layout import pack_inputs  # noqa: E402
from tilecraft.runtime.pynq import DeviceTimeout, PynqDevice  # noqa: E402
from tilecraft.sim.device import SimDevice  # noqa: E402

OP = Conv2d(1, 32, 8, 8, 32, 3, 1, 1)


@pytest.fixture(scope="module")
def conv():
    """A conv program of the PYNQ-Z1's config and its packed random inputs."""
    from tilecraft.boards import board

    program = conv2d(board("pynq-z1").config, OP, Epilogue(shift=7, relu=True))
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, OP.input_shape, dtype=np.int8)
    w = rng.integers(-128, 128, OP.weight_shape, dtype=np.int8)
    return program, pack_inputs(program, {"input": x, "weight": w})


def test_a_conv_runs_bit_exact_with_the_simulator(pynq_z1, make_board, conv):
    design, bit = pynq_z1
    fake = make_board(design)
    program, inputs = conv
    device = get_device("pynq", bitfile=bit)
    assert isinstance(device, PynqDevice) and device.instance == "tilecraft_0"
    assert fake.downloads == 1  # Overlay(download=True) programmed the "PL"
    want = SimDevice().run(program, inputs)
    got = device.run(program, inputs)
    for name, value in want.outputs.items():
        assert np.array_equal(got.outputs[name], value), name
    assert got.report.cycles == want.report.cycles > 0
    # one flush of the whole region before START, one invalidate after DONE
    kinds = [kind for kind, _, size in fake.syncs if size >= program.dram_size]
    assert kinds == ["flush", "invalidate"]
    assert fake.accelerator.runs == 1
    # a second run reuses the arena
    allocated = dict(fake.allocations)
    device.run(program, inputs)
    assert fake.allocations == allocated and fake.accelerator.runs == 2


def test_the_download_programs_the_fabric_clock(pynq_z1, make_board):
    from tilecraft.sim.pynq_board import ZYNQ_SLCR

    design, bit = pynq_z1
    fake = make_board(design)
    PynqDevice(bit)
    fclk0 = fake.ps_registers[ZYNQ_SLCR + 0x170]  # FPGA0_CLK_CTRL
    divisors = ((fclk0 >> 8) & 0x3F, (fclk0 >> 20) & 0x3F)
    assert divisors[0] * divisors[1] == design.clock.divisor0 * design.clock.divisor1


def test_a_zynqmp_board_runs_waiting_on_the_interrupt(overlay_of, make_board, monkeypatch):
    design, bit = overlay_of("zcu104")
    fake = make_board(design)
    program = conv2d(design.config, OP, Epilogue(shift=7))
    rng = np.random.default_rng(8)
    inputs = pack_inputs(
        program,
        {
            "input": rng.integers(-128, 128, OP.input_shape, dtype=np.int8),
            "weight": rng.integers(-128, 128, OP.weight_shape, dtype=np.int8),
        },
    )
    pins, waits = [], []

    class Interrupt:
        """pynq.Interrupt without the board's UIO device: its wait returns once the accelerator
        raises its interrupt line, DONE while IRQ_ENABLE is set (hw/rtl/top.py). The simulated
        accelerator finishes within the START write, so the line is already up here."""

        def __init__(self, pin):
            pins.append(pin)

        async def wait(self):
            registers = fake.accelerator.values
            assert registers["IRQ_ENABLE"] == 1 and registers["STATUS"] & regs.DONE
            waits.append(True)

    monkeypatch.setattr(pynq, "Interrupt", Interrupt)
    device = PynqDevice(bit, wait="interrupt")
    assert device.ip.mmio.base_addr == 0xA0000000
    got = device.run(program, inputs)
    assert pins == ["tilecraft_0/interrupt"] and waits == [True]
    want = SimDevice().run(program, inputs)
    assert np.array_equal(got.outputs["output"], want.outputs["output"])


def test_an_overlay_without_the_interrupt_pin_is_refused_the_interrupt_wait(
    pynq_z1, make_board, monkeypatch
):
    """An overlay whose interrupt does not reach the PS through an AXI interrupt controller
    (built before tilecraft added axi_intc_0, or by hand) has no `interrupt_pins` entry that
    pynq.Interrupt could wait on. Simulated by an Overlay that drops the entry PYNQ parsed."""
    design, bit = pynq_z1
    make_board(design)

    class DirectlyWiredOverlay(pynq.Overlay):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            del self.interrupt_pins["tilecraft_0/interrupt"]

    monkeypatch.setattr(pynq, "Overlay", DirectlyWiredOverlay)
    with pytest.raises(DeviceError, match="does not list tilecraft_0/interrupt .* wait='poll'"):
        PynqDevice(bit, wait="interrupt")
    PynqDevice(bit)  # polling needs no pin


def test_without_the_flush_the_accelerator_reads_stale_memory(
    pynq_z1, make_board, conv, monkeypatch
):
    """The simulated cache is not coherent: the equality above depends on the runtime's flush."""
    design, bit = pynq_z1
    make_board(design)
    program, inputs = conv
    device = PynqDevice(bit, timeout_s=0.05)
    monkeypatch.setattr(pynq.buffer.PynqBuffer, "flush", lambda self: None)
    with pytest.raises(DeviceTimeout):  # DDR holds zeros: no FINISH, so DONE never rises
        device.run(program, inputs)


def test_the_config_digest_register_is_checked(pynq_z1, make_board, tmp_path):
    design, bit = pynq_z1
    make_board(design)
    other = preset("1x8x8")
    with pytest.raises(ConfigError) as info:
        PynqDevice(bit, config=other)
    message = str(info.value)
    assert design.config.digest in message and other.digest in message and other.tag in message
    bit.with_suffix(".toml").unlink()
    with pytest.raises(ConfigError, match=r"no tilecraft.toml beside tilecraft.bit"):
        PynqDevice(bit)


def test_a_program_for_another_config_is_refused(pynq_z1, make_board):
    design, bit = pynq_z1
    make_board(design)
    from tilecraft.compiler.programs.blocked_gemm import blocked_gemm

    program = blocked_gemm(preset("1x8x8"), 8, 16, 16)
    with pytest.raises(Exception, match="1x8x8|block_in"):
        PynqDevice(bit).run(program, {})


def test_a_hung_accelerator_times_out_with_a_register_dump_and_is_reset(pynq_z1, make_board, conv):
    design, bit = pynq_z1
    fake = make_board(design, hang=True)
    program, inputs = conv
    device = PynqDevice(bit, timeout_s=0.05)
    with pytest.raises(DeviceTimeout) as info:
        device.run(program, inputs)
    message = str(info.value)
    assert "did not finish within 0.05 s" in message and "STATUS=0x00000001" in message
    assert f"INSN_COUNT=0x{len(program.insns):08X}" in message
    assert fake.downloads == 2  # opened, then reset by downloading again
    fake.accelerator.hang = False
    want = SimDevice().run(program, inputs)
    got = device.run(program, inputs)  # usable again
    assert np.array_equal(got.outputs["output"], want.outputs["output"])


def test_exhausted_cma_names_the_bytes(pynq_z1, make_board, conv, tmp_path):
    design, bit = pynq_z1
    fake = make_board(design, cma_bytes=2 * 4096)
    program, inputs = conv
    assert program.dram_size > fake.cma_bytes
    device = PynqDevice(bit, meminfo=fake.write_meminfo(tmp_path / "meminfo"))
    need = -(-program.dram_size // 4096) * 4096
    with pytest.raises(DeviceError, match=rf"cannot allocate {need:,} bytes .*8,192 bytes free"):
        device.run(program, inputs)


def _program(cfg, insns, dram_size=4096) -> Program:
    spec = isa_for(cfg)
    return Program(
        config=cfg,
        insns=encode(spec, insns),
        uops=encode_uops(spec, []),
        buffers=(BufferSpec("y", "output", (16,), "int8", 0),),
        constants={},
        insn_offset=1024,
        uop_offset=2048,
        dram_size=dram_size,
        name="faulty",
    )


def test_hardware_errors_raise_what_the_simulator_raises(pynq_z1, make_board):
    design, bit = pynq_z1
    fake = make_board(design)
    cfg = design.config
    device = PynqDevice(bit)
    far = Load(mem=MemId.INP, sram_base=0, dram_base=10**6, y_size=1, x_size=1, x_stride=1)
    with pytest.raises(AccessError) as info:
        device.run(_program(cfg, [far, Finish()]), {})
    assert info.value.index == 0 and "DRAM_RANGE" in str(info.value)
    assert "the overlay was downloaded again, so the device is reset" in str(info.value)
    assert fake.downloads == 2  # opened, then reset: the error would stop the next run
    flagged = Load(
        mem=MemId.INP, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0, pop_prev=True
    )
    with pytest.raises(IllegalInstructionError, match="ILLEGAL_FLAGS") as info:
        device.run(_program(cfg, [flagged, Finish()]), {})
    assert info.value.index == 0
    # and the device still runs a good program afterwards
    assert device.run(_program(cfg, [Finish()]), {}).report.cycles > 0
    assert fake.downloads == 3


def test_the_simulated_board_keeps_an_error_until_a_reset_as_the_rtl_does(pynq_z1, make_board):
    """Without the runtime's reset, the next START stops at once with the last error: the
    hardware's behaviour (test_pynq_rtl.py shows it on the Verilog), what the reset is for."""
    design, bit = pynq_z1
    fake = make_board(design)
    cfg = design.config
    device = PynqDevice(bit)
    device._reset = lambda: None  # a runtime that does not reset
    far = Load(mem=MemId.INP, sram_base=0, dram_base=10**6, y_size=1, x_size=1, x_stride=1)
    for program in (_program(cfg, [far, Finish()]), _program(cfg, [Finish()])):
        with pytest.raises(AccessError, match="DRAM_RANGE") as info:
            device.run(program, {})
        assert info.value.index == 0
    del device._reset  # the runtime's own: download the overlay again
    device._reset()
    assert fake.downloads == 2 and device.run(_program(cfg, [Finish()]), {}).report.cycles > 0


def test_bad_options_are_refused(pynq_z1, make_board, tmp_path):
    design, bit = pynq_z1
    make_board(design)
    with pytest.raises(DeviceError, match=r"needs its overlay: get_device\('pynq', bitfile="):
        get_device("pynq")
    with pytest.raises(DeviceError, match="unknown wait 'spin'; valid: poll, interrupt"):
        PynqDevice(bit, wait="spin")
    with pytest.raises(DeviceError, match="timeout_s must be positive"):
        PynqDevice(bit, timeout_s=0)
    with pytest.raises(DeviceError, match="no bitstream"):
        PynqDevice(tmp_path / "missing.bit")


def test_closing_gives_the_arena_back(pynq_z1, make_board, conv):
    design, bit = pynq_z1
    fake = make_board(design)
    program, inputs = conv
    device = PynqDevice(bit)
    device.run(program, inputs)
    assert len(fake.allocations) == 1 and fake.free_bytes < fake.cma_bytes
    device.close()
    assert fake.allocations == {} and fake.free_bytes == fake.cma_bytes
