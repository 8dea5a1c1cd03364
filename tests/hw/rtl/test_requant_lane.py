"""The requantization unit's lane (hw/rtl/requant.py) against its spec, ops.requant.requantize
(itself proved equal to onnxruntime's float32 arithmetic): random accumulators, biases, scales,
zero points and clips, one a cycle, with the values that make each rounding tie and the int32
extremes among them; bit for bit, at the declared latency."""

from __future__ import annotations

import re

import numpy as np
import pytest
from amaranth.sim import Simulator

from tilecraft.hw.rtl.dsp import ECP5_DSP_MODEL
from tilecraft.hw.rtl.requant import FLIP_FLOPS, LATENCY, RequantLane
from tilecraft.ops.requant import requantize, scale_fields


def _vectors(seed: int, count: int):
    rng = np.random.default_rng(seed)
    exponent = rng.integers(-30, 2, count)
    scale = (rng.uniform(1, 2, count) * 2.0**exponent).astype(np.float32)
    scale[: count // 8] = np.float32(2.0**-20)  # exact powers of two: products tie
    k = rng.integers(-300, 300, count)
    ties = np.clip(np.round((k + 0.5) / scale.astype(np.float64)), -(2**31), 2**31 - 1)
    v = np.where(
        rng.random(count) < 0.5,
        ties.astype(np.int64) + rng.integers(-1, 2, count),
        rng.integers(-(2**31), 2**31, count),
    )
    v[:4] = [-(2**31), 2**31 - 1, 0, -1]
    bias = rng.integers(-(2**20), 2**20, count)
    acc = ((v - bias + 2**31) % 2**32) - 2**31  # acc + bias wraps back to v
    zero = rng.integers(-200, 200, count)
    lo = rng.integers(-256, 0, count)
    hi = lo + rng.integers(0, 400, count)
    return acc, bias, scale, zero, lo, hi


@pytest.mark.parametrize(
    "seed, dsp, residual",
    [
        (0, None, False),
        (1, None, False),
        (2, ECP5_DSP_MODEL, False),
        (3, None, True),
        (4, ECP5_DSP_MODEL, True),
    ],  # fmt: skip
)  # ECP5_DSP_MODEL: the partial products through MULT18X18D's pins, as the ECP5 flow builds it
def test_lane_is_the_spec_bit_for_bit(seed, dsp, residual):
    """With `residual` (configs with `requant_residual`) an int8 residual too, and the clip
    bounds within int8 as a STORE's parameter rows hold them (hw/isa/requant.py)."""
    count = 1500
    acc, bias, scale, zero, lo, hi = _vectors(seed, count)
    res = np.random.default_rng(seed).integers(-128, 128, count)
    if residual:
        lo, hi = np.clip(lo, -128, 127), np.clip(hi, -128, 127)
        zero = np.clip(zero * 3, -511, 511)  # the zero point's whole range
    fields = scale_fields(scale)
    want = [
        int(
            requantize(
                acc[i] + bias[i], fields_i, int(zero[i]), int(lo[i]), int(hi[i]),
                residual=np.asarray(res[i]) if residual else None,
            )[()]
        )
        for i, fields_i in enumerate(
            type(fields)(fields.significand[j : j + 1], fields.exponent[j : j + 1])
            for j in range(count)
        )
    ]  # fmt: skip
    dut = RequantLane(dsp, residual)
    got: list[tuple[int, int]] = []

    async def bench(ctx):
        for cycle in range(count + LATENCY + 2):
            i = cycle
            on = i < count and i % 7 != 3  # some idle cycles between inputs
            if i < count:
                ctx.set(dut.valid, on)
                ctx.set(dut.acc, int(acc[i]))
                ctx.set(dut.bias, int(bias[i]))
                ctx.set(dut.significand, int(fields.significand[i]))
                ctx.set(dut.exponent, int(fields.exponent[i]))
                ctx.set(dut.zero, int(zero[i]))
                ctx.set(dut.lo, int(lo[i]))
                ctx.set(dut.hi, int(hi[i]))
                if residual:
                    ctx.set(dut.residual, int(res[i]))
            else:
                ctx.set(dut.valid, 0)
            if ctx.get(dut.out_valid):
                got.append((cycle - LATENCY, ctx.get(dut.out)))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    expected = [(i, want[i]) for i in range(count) if i % 7 != 3]
    assert len(got) == len(expected)
    bad = [(i, g, w) for (i, g), (_, w) in zip(got, expected) if g != w]
    assert not bad, (
        f"seed {seed}: {len(bad)} of {len(got)} differ; first: input {bad[0][0]} "
        f"(acc {acc[bad[0][0]]}, bias {bias[bad[0][0]]}, scale {scale[bad[0][0]]!r}): "
        f"lane {bad[0][1]}, spec {bad[0][2]}"
    )
    assert [i for i, _ in got] == [i for i, _ in expected]  # at exactly LATENCY cycles


def test_the_accelerator_puts_the_lanes_in_its_store_stage():
    """A config with the unit elaborates with `requant_lanes` lanes in the store stage (the
    system tests in tests/sim/test_rtl.py run its programs against the simulator), and one
    whose accumulators are not the lanes' 32 bits is refused by name."""
    from tilecraft.hw.config import preset
    from tilecraft.hw.rtl.requant_store import RequantStream
    from tilecraft.hw.rtl.top import verilog

    cfg = preset("1x8x8").replace(requant_lanes=4)
    text = verilog(cfg)
    assert text.count("module tilecraft_top") == 1
    assert (
        sum(1 for line in text.splitlines() if line.startswith("module ") and "lane" in line) >= 1
    )
    with pytest.raises(ValueError, match=r"take 32-bit accumulators, 8 of them .* 1x8x8_i8w8a16"):
        RequantStream(preset("1x8x8").replace(requant_lanes=8, log_acc_width=4))


def _register_attributes(text: str) -> dict[str, set[str]]:
    """Each `reg` of a Verilog module by name, with the names of the attributes above it."""
    regs, attrs = {}, set()
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("(*"):
            attrs.add(line[2:].split("=")[0].strip())
            continue
        found = re.match(r"reg (?:\[[^\]]*\] )?\\?(\S+)", line)
        if found:
            regs[found.group(1)] = attrs
        attrs = set()
    return regs


def test_the_lane_registers_stay_flip_flops_on_xilinx_alone():
    """On the Xilinx build every register of the lane carries `FLIP_FLOPS` (yosys's
    synth_xilinx would make the chains that delay the parameters, reset-less, SRL16E shift
    registers, a LUT each: 79 a lane, default with the unit and the depthwise mode over 75% of
    the xc7z020's LUTs); the ECP5 build's (no shift registers there) carry none, so its
    netlists, and their routes, are unchanged."""
    from amaranth.back import verilog

    xilinx = _register_attributes(verilog.convert(RequantLane(None), name="lane"))
    ecp5 = _register_attributes(verilog.convert(RequantLane(ECP5_DSP_MODEL), name="lane"))
    chains = [
        f"{name}_{k}"
        for name, depth in (("zero", 13), ("lo", 14), ("sig", 5))
        for k in range(1, depth + 1)
    ]
    assert set(chains) <= set(xilinx), sorted(xilinx)
    bare = [name for name in chains if not set(FLIP_FLOPS) <= xilinx[name]]
    assert not bare, f"without {sorted(FLIP_FLOPS)} on the Xilinx build: {bare}"
    kept = [name for name, attrs in ecp5.items() if attrs & set(FLIP_FLOPS)]
    assert not kept, f"the ECP5 build keeps {kept}"
