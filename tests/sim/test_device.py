"""The sim device: a program's first run is timed, a later run of the same program replays the
order its instructions ran in, on the semantics alone, and gives what a timed run would."""

import dataclasses

import numpy as np
import pytest

from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.errors import AccessError
from tilecraft.hw.config import preset
from tilecraft.hw.isa import Opcode, isa_for
from tilecraft.hw.timing import Timing
from tilecraft.ops import Conv2d, Epilogue
from tilecraft.ops import reference as R
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs
from tilecraft.sim import device as sim_device
from tilecraft.sim.device import SimDevice
from tilecraft.sim.simulator import replay, run_image

OP = Conv2d(1, 20, 9, 8, 24, kernel=3, stride=1, pad=1)
EP = Epilogue(bias=True, shift=9, residual=True, relu=True)


def _program(cfg, seed=0):
    rng = np.random.default_rng(seed)
    weight = rng.integers(-128, 128, OP.weight_shape, dtype=np.int8)
    bias = rng.integers(-999, 999, OP.oc, dtype=np.int32)
    return conv2d(cfg, OP, EP, weight=weight, bias=bias), weight, bias


@pytest.fixture
def calls(monkeypatch):
    """How often the device's `run` timed a program (a timed run records its order; the
    compiler's cycle measurements, which go through `cycles`, do not) and how often it
    replayed one."""
    counts = {"timed": 0, "replayed": 0}
    timed, replayed = sim_device.run_image, sim_device.replay

    def run_image(*args, **kwargs):
        counts["timed"] += "order" in kwargs
        return timed(*args, **kwargs)

    def replay(*args, **kwargs):
        counts["replayed"] += 1
        return replayed(*args, **kwargs)

    monkeypatch.setattr(sim_device, "run_image", run_image)
    monkeypatch.setattr(sim_device, "replay", replay)
    return counts


@pytest.mark.parametrize("config", ["default", "1x8x8", "2x16x16"])
def test_a_second_run_replays_and_gives_the_timed_runs_outputs_and_report(config, calls):
    cfg = preset(config)
    program, weight, bias = _program(cfg)
    device = SimDevice()
    first, second = (random_inputs(program, np.random.default_rng(s)) for s in (1, 2))
    a = device.run(program, pack_inputs(program, first))
    b = device.run(program, pack_inputs(program, second))
    assert calls == {"timed": 1, "replayed": 1}
    timed = SimDevice().run(program, pack_inputs(program, second))  # a fresh device times it
    for name, value in timed.outputs.items():
        np.testing.assert_array_equal(b.outputs[name], value)
    out = unpack_outputs(program, b.outputs)["output"]
    want = R.conv2d(OP, EP, second["input"], weight, residual=second["residual"], bias=bias)
    np.testing.assert_array_equal(out, want)
    assert not all(np.array_equal(a.outputs[k], b.outputs[k]) for k in a.outputs)
    assert b.report == a.report == timed.report
    assert b.report is not a.report  # each run its own report


def test_a_traced_run_is_timed_and_keeps_its_trace(calls):
    program, *_ = _program(preset("default"))
    device = SimDevice()
    inputs = pack_inputs(program, random_inputs(program, np.random.default_rng(3)))
    device.run(program, inputs)
    traced = device.run(program, inputs, trace=True)
    assert calls == {"timed": 2, "replayed": 0}
    assert traced.report.trace is not None
    again = device.run(program, inputs)
    assert calls == {"timed": 2, "replayed": 1} and again.report.trace is None


def test_replays_are_per_program_config_and_timing(calls):
    cfg = preset("default")
    one, _, _ = _program(cfg, seed=0)
    two, _, _ = _program(cfg, seed=1)  # other weights: another digest
    assert one.digest != two.digest
    device = SimDevice()
    for program in (one, two, one, two):
        device.run(program, pack_inputs(program, random_inputs(program, np.random.default_rng(4))))
    assert calls == {"timed": 2, "replayed": 2}
    timing = Timing.from_config(cfg)
    slower = dataclasses.replace(timing, gemm_depth=timing.gemm_depth + 40)
    inputs = pack_inputs(one, random_inputs(one, np.random.default_rng(5)))
    before = device.run(one, inputs).report.cycles
    device.timing = slower  # the device's timing changed: its replays do not hold
    assert device.run(one, inputs).report.cycles > before
    assert calls == {"timed": 3, "replayed": 3}


def test_the_device_keeps_the_latest_programs_runs_within_its_budget(calls, monkeypatch):
    cfg = preset("1x8x8")
    one, two, three = (_program(cfg, seed=s)[0] for s in range(3))
    device = SimDevice()

    def run(*programs):
        for p in programs:
            device.run(p, pack_inputs(p, random_inputs(p, np.random.default_rng(6))))

    monkeypatch.setattr(sim_device, "REPLAY_STEPS_KEPT", 1)  # the latest program's alone
    run(one, two, two)
    assert calls == {"timed": 2, "replayed": 1}
    run(one)  # dropped for two: timed again
    assert calls == {"timed": 3, "replayed": 1}
    monkeypatch.setattr(sim_device, "REPLAY_STEPS_KEPT", 10**6)
    run(two, three, one, two, three)
    assert calls == {"timed": 5, "replayed": 4}


def test_a_replayed_instruction_that_fails_is_named_as_in_a_timed_run():
    cfg = preset("default")
    program, *_ = _program(cfg)
    inputs = pack_inputs(program, random_inputs(program, np.random.default_rng(7)))
    order: list = []
    run_image(cfg, program.dram_image(inputs), program.insn_offset, len(program.insns), order=order)
    assert [k for k, _ in order] != sorted(k for k, _ in order)  # the stages interleave
    k = next(k for k, row in order if row["opcode"] == Opcode.GEMM and not row["reset"])
    bad = [(j, dict(row, uop_end=cfg.depth("uop") + 1) if j == k else row) for j, row in order]
    with pytest.raises(AccessError, match="micro-op range") as caught:
        replay(cfg, program.dram_image(inputs), bad)
    assert caught.value.index == k and caught.value.insn.startswith("GEMM")


def test_a_replay_takes_the_loop_plans_of_an_earlier_run_only_for_the_same_micro_ops():
    """Plans kept from a run serve a replay while its micro-op loads bring the same words; with
    other micro-ops (here every weight index 0) the replay works them out again and gives what
    a replay without kept plans gives."""
    cfg = preset("default")
    program, *_ = _program(cfg)
    inputs = pack_inputs(program, random_inputs(program, np.random.default_rng(8)))
    order: list = []
    _, machine = run_image(
        cfg, program.dram_image(inputs), program.insn_offset, len(program.insns), order=order
    )
    plans = machine.plans
    assert len(plans) > 1 and all(p for _, _, p in plans[1:])  # a span per micro-op load
    same = replay(cfg, program.dram_image(inputs), order, plans)
    assert all(a is b for a, b in zip(same.plans, plans))  # every span's plans taken again

    wgt = next(f for f in isa_for(cfg).uop if f.name == "wgt")

    def first_weights_only():
        dram = program.dram_image(inputs)
        n = len(program.uops) * cfg.uop_bytes
        words = dram[program.uop_offset : program.uop_offset + n].view(f"<u{cfg.uop_bytes}")
        words &= ~np.array(((1 << wgt.width) - 1) << wgt.offset, words.dtype)
        return dram

    kept = replay(cfg, first_weights_only(), order, plans)
    fresh = replay(cfg, first_weights_only(), order)
    np.testing.assert_array_equal(kept.dram, fresh.dram)
    assert not np.array_equal(kept.dram, same.dram)  # the micro-ops did change the result


def test_the_devices_options_are_checked_when_it_is_made():
    """A config name or a wrong timing object was taken, then failed deep in `run`."""
    from tilecraft.errors import ConfigError, DeviceError
    from tilecraft.runtime import get_device

    with pytest.raises(ConfigError, match="the sim device's config must be an HwConfig"):
        get_device("sim", config="1x8x8")
    with pytest.raises(DeviceError, match="timing must be a tilecraft.hw.timing.Timing, not 'x'"):
        get_device("sim", timing="x")
    timing = Timing.from_config(preset("1x8x8"))
    assert get_device("sim", config=preset("1x8x8"), timing=timing).config == preset("1x8x8")
