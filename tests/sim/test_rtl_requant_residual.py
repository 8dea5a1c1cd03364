"""The requantization unit's residual add on the generated Verilog (tier `rtl`; configs with
`requant_residual`): the store stage reads each data row's residual through INP's second read
port and the lanes add it after their rounding. Random programs (half their requantizing
STOREs with a residual), compiled residual convolutions on the unit, and bad STOREs: the
simulator's outputs (and the reference's for the convolutions), its error classes, and its
cycles within the bound every hardware change is held to."""

from __future__ import annotations

import numpy as np
import pytest
from tiers import require_rtl

from tilecraft.errors import AccessError, IllegalInstructionError
from tilecraft.hw.config import preset
from tilecraft.runtime import get_device

pytestmark = [pytest.mark.rtl, pytest.mark.slow]  # Verilator models take minutes to build

require_rtl()

MAX_CYCLE_ERROR = 0.005  # the bound for programs that use a hardware change
RANDOM, CONVS = 48, 4


def _cfg():
    return preset("1x8x8").replace(requant_lanes=8).with_requant_residual()


def _conv(cfg, seed: int):
    """A random conv2d whose float32 epilogue adds a residual on the unit: (program, inputs,
    the reference's output)."""
    from tilecraft.compiler.operator.conv2d import conv2d
    from tilecraft.compiler.operator.params import random_scales
    from tilecraft.ops import Conv2d, Epilogue
    from tilecraft.ops import reference as R
    from tilecraft.runtime.layout import pack_inputs, random_inputs

    rng = np.random.default_rng(seed)
    h = int(rng.integers(4, 12))
    op = Conv2d(1, int(rng.integers(3, 20)), h, h, int(rng.integers(4, 24)), kernel=3, pad=1)
    ep = Epilogue(bias=True, multiplier="float32", offset=int(rng.integers(-9, 9)), residual=True)
    params = {
        "weight": rng.integers(-128, 128, op.weight_shape, dtype=np.int8),
        "bias": rng.integers(-(1 << 14), 1 << 14, op.oc, dtype=np.int32),
        "multiplier": random_scales(rng, op.oc),
    }
    program = conv2d(cfg, op, ep, **params)
    inputs = random_inputs(program, rng)
    extra = {k: v for k, v in params.items() if k != "weight"}
    want = R.conv2d(op, ep, inputs["input"], params["weight"], residual=inputs["residual"], **extra)
    return program, pack_inputs(program, inputs), want


@pytest.fixture(scope="module")
def residual_runs():
    from tilecraft.compiler.programs.random_test_programs import random_program
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = _cfg()
    jobs = [(f"random seed {s}", *random_program(cfg, s), None) for s in range(RANDOM)]
    jobs += [(f"conv seed {s}", *_conv(cfg, s)) for s in range(CONVS)]
    rtl = RtlDevice(cfg).run_many([(p, i) for _, p, i, _ in jobs])
    sim = [get_device("sim").run(p, i) for _, p, i, _ in jobs]
    return cfg, jobs, rtl, sim


def test_residual_adds_are_bit_exact_and_timed_on_the_rtl(residual_runs):
    from tilecraft.hw.isa import Opcode, isa_for
    from tilecraft.hw.isa.codec import decode
    from tilecraft.runtime.layout import unpack_outputs

    cfg, jobs, rtl, sim = residual_runs
    residuals = 0
    for (name, program, _, want), r, s in zip(jobs, rtl, sim):
        rows = decode(isa_for(cfg), program.insns)
        residuals += int((rows["residual"][rows["opcode"] == Opcode.STORE] == 1).sum())
        for key in s.outputs:
            assert np.array_equal(r.outputs[key], s.outputs[key]), (name, key)
        if want is not None:
            got = unpack_outputs(program, r.outputs)["output"]
            np.testing.assert_array_equal(got, want, err_msg=name)
        error = abs(s.report.cycles - r.report.cycles) / r.report.cycles
        assert error <= MAX_CYCLE_ERROR, (name, s.report.cycles, r.report.cycles)
    assert residuals >= RANDOM  # about one a random program, and every conv's STOREs


def test_bad_residual_stores_raise_the_simulators_error_class():
    """A residual without the unit's requantization, and one whose rows run past INP's end:
    the store stage stops with the simulator's error class, at the same instruction; one whose
    last row is INP's last runs to the end as modeled."""
    from tilecraft.sim.rtl.device import RtlDevice

    from harness import requant_rows, requant_store_program

    cfg = _cfg()
    acc, _ = requant_rows(cfg, np.random.default_rng(2), 8)

    def program(at: int, requant: bool):
        store = dict(x_size=8, x_stride=8, requant=requant, param_base=8, residual=True)
        return requant_store_program(cfg, acc, store | {"residual_base": at})

    device = RtlDevice(cfg)
    last = cfg.depth("inp") - 8
    for p, cls in (
        (program(100, requant=False), IllegalInstructionError),
        (program(last + 1, requant=True), AccessError),
    ):
        with pytest.raises(cls) as rtl_error:
            device.run(p, {})
        with pytest.raises(cls) as sim_error:
            get_device("sim").run(p, {})
        assert rtl_error.value.index == sim_error.value.index == 1
    p = program(last, requant=True)  # its last row INP's last
    rtl, sim = device.run(p, {}), get_device("sim").run(p, {})
    assert np.array_equal(rtl.outputs["o"], sim.outputs["o"])
    assert abs(rtl.report.cycles - sim.report.cycles) <= 8, (rtl.report, sim.report)


def test_parameter_rows_the_simulator_refuses_stop_the_rtl_too():
    """A scale that is not a normalized float32 (its significand's top bit clear) and an empty
    clip (lo above hi), in one lane of the first set or of a later one: the store stage stops
    the run with the simulator's error class at the same instruction (REQUANT_PARAMS, as the
    STORE ends). Their edges, a significand of exactly 2**23 and a clip of one value, run as
    modeled."""
    from tilecraft.hw.isa.requant import pack_clip, pack_scale, unpack_clip, unpack_scale
    from tilecraft.sim.rtl.device import RtlDevice

    from harness import requant_rows, requant_store_program

    cfg = _cfg()
    good, _ = requant_rows(cfg, np.random.default_rng(3), 8)  # 8 rows, their set at 8
    sets = np.concatenate([good, good[8:]])  # two sets: rows 8-10 and 11-13
    significand, exponent = unpack_scale(good[9, 0].astype(np.int64))
    zero, lo, hi = unpack_clip(good[10, 0].astype(np.int64))

    def program(row: int, lane: int, word: int, **store):
        acc = sets.copy()
        acc[row, 0, lane] = np.array(word, np.int64).astype(np.int32)  # its bit 31 wraps
        store = dict(x_size=8, x_stride=8, param_base=8) | store
        return requant_store_program(cfg, acc, store, out_rows=16)

    two_sets = dict(x_size=4, x_stride=4, y_size=2, param_per_row=True)
    flat = pack_scale(np.int64(1 << 23) - 1, exponent[3])
    empty = pack_clip(zero[6], np.int64(5), np.int64(4))
    refused = (
        program(9, 3, flat),  # the scale, first set
        program(10, 6, empty),  # the clip, first set
        program(13, 6, empty, **two_sets),  # the clip of the second set, after rows written
        program(12, 0, flat, **two_sets),
    )
    device = RtlDevice(cfg)
    for p in refused:
        with pytest.raises(IllegalInstructionError, match="REQUANT_PARAMS") as rtl_error:
            device.run(p, {})
        with pytest.raises(IllegalInstructionError, match="requant param row") as sim_error:
            get_device("sim").run(p, {})
        assert rtl_error.value.index == sim_error.value.index == 1
    for p in (  # the edges: exactly 2**23, and lo == hi
        program(9, 3, pack_scale(np.int64(1 << 23), exponent[3])),
        program(13, 6, pack_clip(zero[6], np.int64(4), np.int64(4)), **two_sets),
    ):
        rtl, sim = device.run(p, {}), get_device("sim").run(p, {})
        assert np.array_equal(rtl.outputs["o"], sim.outputs["o"])
        assert abs(rtl.report.cycles - sim.report.cycles) <= 8, (rtl.report, sim.report)
