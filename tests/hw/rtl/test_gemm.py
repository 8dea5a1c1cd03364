"""The GEMM core against numpy, packed and unpacked."""

import numpy as np
import pytest
from amaranth import Signal, signed
from amaranth.sim import Simulator
from tiers import slow

from tilecraft.hw.config import preset
from tilecraft.hw.rtl.dsp import ECP5_DSP, ECP5_DSP_MODEL, Mult18x18dModel, mult18x18d_pins
from tilecraft.hw.rtl.gemm import GemmCore


def pack(values, bits):
    out = 0
    for k, v in enumerate(np.asarray(values).reshape(-1)):
        out |= (int(v) & ((1 << bits) - 1)) << (k * bits)
    return out


def unpack(word, n, bits):
    vals = [(word >> (k * bits)) & ((1 << bits) - 1) for k in range(n)]
    return np.array([v - (1 << bits) if v >> (bits - 1) else v for v in vals], np.int64)


@pytest.mark.parametrize(
    "config,packed",
    [
        ("1x8x8", True),
        ("1x8x8", False),
        ("2x16x16", True),
        ("1x16x8", True),
        # the MULT18X18D pins the ECP5 flows build, on the model
        slow("1x8x8", ECP5_DSP_MODEL, id="1x8x8-ecp5-dsp-model"),
        slow("2x16x16", ECP5_DSP_MODEL, id="2x16x16-ecp5-dsp-model"),
    ],
)
def test_dot_products_match_numpy_every_cycle(config, packed):
    cfg = preset(config)
    dut = GemmCore(cfg, packed=packed)
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    rng = np.random.default_rng(1)
    extremes = [np.full((b, bi), -128), np.full((b, bi), 127)]
    inputs = [rng.integers(-128, 128, (b, bi)) for _ in range(8)] + extremes
    weights = [rng.integers(-128, 128, (bo, bi)) for _ in range(8)] + [
        np.full((bo, bi), -128),
        np.full((bo, bi), -128),
    ]
    expected = [x @ w.T for x, w in zip(inputs, weights)]

    async def bench(ctx):
        got = []
        for k in range(len(inputs) + GemmCore.LATENCY):
            if k < len(inputs):
                ctx.set(dut.inp, pack(inputs[k], 8))
                ctx.set(dut.wgt, pack(weights[k], 8))
            ctx.set(dut.valid, int(k < len(inputs)))
            await ctx.tick()
            if ctx.get(dut.sums_valid):
                got.append(unpack(ctx.get(dut.sums), b * bo, cfg.acc_bits).reshape(b, bo))
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g, e)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert dut.multipliers == (b * bi * bo // 2 if packed is True else b * bi * bo)


@pytest.mark.slow
def test_the_ecp5_build_instantiates_registered_dsps():
    """The Verilog of the ECP5 flows has one MULT18X18D per product, its operands and product
    registered in the DSP (no operand or product flip-flops of its own), and the model refuses
    pins it does not cover."""
    from amaranth.back import verilog

    cfg = preset("1x8x8")
    core = GemmCore(cfg, packed=ECP5_DSP)
    text = verilog.convert(core, name="core")
    assert text.count("MULT18X18D") == cfg.batch * cfg.block_in * cfg.block_out
    for param in ("REG_INPUTA_CLK", "REG_INPUTB_CLK", "REG_OUTPUT_CLK"):
        assert text.count(f'.{param}("CLK0")') == 64, param
    assert "a0_0" not in text and " w0_0" not in text  # the DSP holds the operands
    with pytest.raises(ValueError, match="REG_OUTPUT_CLK"):
        pins = mult18x18d_pins(Signal(8), Signal(8), Signal(36))
        Mult18x18dModel({**pins, "p_REG_OUTPUT_CLK": "NONE"})
    # the input registers both off (the ALU's multipliers) or both on, not one of them
    pins = mult18x18d_pins(Signal(8), Signal(8), Signal(36), input_registers=False)
    with pytest.raises(ValueError, match="REG_INPUTB_CLK"):
        Mult18x18dModel({**pins, "p_REG_INPUTA_CLK": "CLK0"})


@pytest.mark.parametrize("input_registers, latency", [(True, 2), (False, 1)])
def test_the_dsp_model_gives_its_product_after_its_registers(input_registers, latency):
    """The model of a signed MULT18X18D: the product of the operands at P `latency` cycles
    after they are set (the input registers and P's, or P's alone), not a cycle sooner."""
    a, b, product = Signal(signed(18)), Signal(signed(18)), Signal(signed(36))
    model = Mult18x18dModel(mult18x18d_pins(a, b, product, input_registers=input_registers))
    seen = []

    async def bench(ctx):
        ctx.set(a, -131_072)  # the operands' extremes: -2**17 x (2**17 - 1)
        ctx.set(b, 131_071)
        for _ in range(latency):
            seen.append(ctx.get(product))
            await ctx.tick()
        seen.append(ctx.get(product))

    sim = Simulator(model)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [0] * latency + [-131_072 * 131_071]
