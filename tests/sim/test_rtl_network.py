"""A whole network on the generated Verilog (tier `rtl`): MobileNetV2 (the mobilenet-v2
suite's network, calibration and image) compiled for the PYNQ-Z1 preset with the
requantization unit and the depthwise mode, one accelerator program of 54 layers and about
2.8 million cycles, run on Verilator and on the simulator. Every output bit-exact, and the
cycle model within the bound every hardware change is held to."""

from __future__ import annotations

import numpy as np
import pytest
from tiers import require_rtl

from tilecraft.boards import resolve_config
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.hw.isa import Opcode
from tilecraft.models.zoo import MODELS
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model
from tilecraft.runtime.model import AcceleratorStep

pytestmark = [pytest.mark.rtl, pytest.mark.slow]

require_rtl()

MAX_CYCLE_ERROR = 0.005


def test_mobilenet_v2_with_the_unit_and_the_depthwise_mode_on_the_rtl():
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = resolve_config("pynq-z1").with_requant_unit().with_depthwise_mode(3)
    graph = import_model(MODELS["mobilenet_v2"](seed=0))
    model = compile_network(graph, cfg, random_calibration(graph, 2, seed=0)).model
    steps = [s for s in model.steps if isinstance(s, AcceleratorStep)]
    assert len(steps) == 1 and len(steps[0].layers) == 54  # the whole network, one program
    program = model.programs[steps[0].program]
    depthwise = program.table()["opcode"] == Opcode.DEPTHWISE
    assert depthwise.sum() >= 17  # a tile or more for each of the network's depthwise convs
    x = {"input": np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)}
    sim = run_model(model, x, get_device("sim"))
    rtl = run_model(model, x, RtlDevice(cfg, max_cycles=10_000_000))
    for name in model.outputs:
        assert np.array_equal(rtl.outputs[name], sim.outputs[name]), name
    model_cycles, rtl_cycles = sim.accelerator_cycles, rtl.accelerator_cycles
    assert rtl_cycles > 2_000_000
    assert abs(model_cycles - rtl_cycles) / rtl_cycles <= MAX_CYCLE_ERROR, (
        model_cycles,
        rtl_cycles,
    )
