"""The whole accelerator: every swept config elaborates to Verilog, and small programs run
bit-exact in amaranth.sim (a Python DRAM on the AXI4 master) against the behavioral simulator."""

import gc
import warnings

import numpy as np
import pytest
from amaranth.hdl import Shape
from system_model import run_program, run_programs
from tiers import slow

from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.compiler.programs.blocked_gemm import blocked_gemm
from tilecraft.errors import AccessError
from tilecraft.hw import regs
from tilecraft.hw.config import preset
from tilecraft.hw.rtl.dsp import ECP5_DSP_MODEL
from tilecraft.hw.rtl.signatures import flat_ports
from tilecraft.hw.rtl.top import Top, top_signature
from tilecraft.ops import Conv2d, Epilogue, GemmTiles, Multiplier
from tilecraft.runtime import get_device
from tilecraft.runtime.layout import pack_inputs, random_inputs


@pytest.mark.slow
@pytest.mark.parametrize("config", ["default", "1x8x8", "2x16x16"])
def test_presets_elaborate_without_combinational_cycles(config):
    from amaranth.back import rtlil

    top = Top(preset(config))
    text = rtlil.convert(top, name="tilecraft_top", ports=flat_ports(top))
    for port in ("s_axi_control_awaddr", "m_axi_arlen", "aresetn", "interrupt"):
        assert f"\\{port}" in text, port


def test_the_register_map_fits_the_control_port():
    offsets = [r.offset for r in regs.REGISTERS]
    assert len(set(offsets)) == len(offsets)
    assert all(o % 4 == 0 for o in offsets)
    assert max(offsets) < regs.REGISTER_SPAN <= 1 << regs.ADDR_BITS
    widths = {
        "_".join(map(str, path)): Shape.cast(member.shape).width
        for path, member in top_signature(preset("1x8x8")).members.flatten()
        if member.is_port
    }
    assert widths["s_axi_control_awaddr"] == widths["s_axi_control_araddr"] == regs.ADDR_BITS


def _check(program, inputs, latency=6, packed=None):
    done, outputs, _ = run_program(program, inputs, latency=latency, packed=packed)
    assert done, "the accelerator never raised its interrupt"
    want = get_device("sim").run(program, inputs).outputs
    for name, value in want.items():
        assert np.array_equal(outputs[name], value), name


@pytest.mark.parametrize("tiles", [(2, 2, 4), slow((16, 2, 2), id="tiles1")])
def test_blocked_gemm_runs_bit_exact(tiles):
    cfg = preset("1x8x8")
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (16, 32), dtype=np.int8)
    w = rng.integers(-128, 128, (32, 16), dtype=np.int8)
    program = blocked_gemm(cfg, 16, 32, 16, tiles=GemmTiles(*tiles, overlap=tiles[0] == 16))
    _check(program, pack_inputs(program, {"a": a, "b": w}))


@pytest.mark.parametrize(
    "packed", [None, slow(ECP5_DSP_MODEL, id="ecp5-dsp-model")]
)  # ECP5: every product on MULT18X18D
def test_compiled_convolution_with_every_epilogue_step_runs_bit_exact(packed):
    cfg = preset("1x8x8")
    op = Conv2d(1, 12, 6, 6, 10, kernel=3, stride=2, pad=1)
    ep = Epilogue(bias=True, multiplier="channel", shift=12, residual=True, relu=True)
    program = conv2d(cfg, op, ep)
    inputs = pack_inputs(program, random_inputs(program, np.random.default_rng(1)))
    _check(program, inputs, latency=11, packed=packed)


@pytest.mark.parametrize(
    ("from_end", "y_size", "sram_from_end", "want"),
    [
        (4, 4, None, 0),  # four elements ending at DRAM's last byte
        (3, 4, None, regs.ErrorCode.DRAM_RANGE),  # one element past the end
        (4, 5, None, regs.ErrorCode.DRAM_RANGE),  # one row past the end (the span's rows part)
        (None, 1, None, regs.ErrorCode.DRAM_RANGE),  # at 4 GiB - 2 elements: past 4 GiB
        (4, 4, 4, 0),  # the accumulator's last four rows
        (4, 4, 3, regs.ErrorCode.SRAM_RANGE),  # one row past them
    ],
)
@pytest.mark.slow
@pytest.mark.parametrize("packed", [None, slow(ECP5_DSP_MODEL, id="ecp5-dsp-model")])
def test_store_checks_its_ranges_at_the_boundary(from_end, y_size, sram_from_end, want, packed):
    """STORE's range checks at and just past the end: DRAM ((dram_base + span) x element bytes
    > DRAM_SIZE, worked out as the span's rows part against what the rest of the region
    leaves) and SRAM (sram_base + elements > depth, as the elements against what is left)."""
    from tilecraft.compiler.operator.builder import ProgramBuilder
    from tilecraft.hw.isa import Finish, Store
    from tilecraft.runtime.buffers import Role

    cfg = preset("1x8x8")
    pb = ProgramBuilder(cfg, "store_edge")
    pb.buffer("o", Role.OUTPUT, (4, 1, cfg.block_out), np.int8)
    n = pb.build([Finish()]).dram_size // cfg.elem_bytes("out")  # DRAM's size in OUT elements
    base = (1 << 32) - 2 if from_end is None else n - from_end
    sram = 0 if sram_from_end is None else cfg.depth("acc") - sram_from_end
    store = Store(
        sram_base=sram, dram_base=base, y_size=y_size, x_size=1, x_stride=1, push_prev=True
    )
    program = pb.build([store, Finish(pop_next=True)])  # FINISH waits for the STORE
    codes = []

    def watch(ctx, dut, cycle):
        if ctx.get(dut.regs.error):
            codes.append(ctx.get(dut.regs.error_code))

    done, _, _ = run_program(program, {}, watch=watch, packed=packed)
    assert done
    assert (codes[-1] if codes else 0) == want
    if want:
        sim_says = "DRAM" if want == regs.ErrorCode.DRAM_RANGE else "scratchpad"
        with pytest.raises(AccessError, match=sim_says):
            get_device("sim").run(program, {})
    else:
        get_device("sim").run(program, {})


@pytest.mark.parametrize("unit", ["gemm", "alu"])
def test_a_units_range_error_reaches_the_report_with_its_index(unit):
    """A GEMM or ALU index past the accumulator (the unit's range check, then the compute stage's
    error capture): the report's code and instruction index are the simulator's (the second
    instruction's, not the first's)."""
    from tilecraft.compiler.operator.builder import ProgramBuilder
    from tilecraft.hw.isa import Alu, AluOp, Finish, Gemm
    from tilecraft.runtime.buffers import Role

    cfg = preset("1x8x8")
    pb = ProgramBuilder(cfg, f"{unit}_range")
    pb.buffer("o", Role.OUTPUT, (4, 1, cfg.block_out), np.int8)
    past = {
        "uop_bgn": 0,
        "uop_end": 1,
        "iter_out": 1,
        "iter_in": 3,
        "dst_in": cfg.depth("acc") - 1,
    }  # the third index is past the end
    bad = Gemm(**past) if unit == "gemm" else Alu(op=AluOp.ADD, use_imm=True, imm=1, **past)
    program = pb.build([Gemm(uop_bgn=0, uop_end=1, iter_out=1, iter_in=1), bad, Finish()])
    reports = []

    def watch(ctx, dut, cycle):
        if ctx.get(dut.regs.error):
            reports.append((ctx.get(dut.regs.error_code), ctx.get(dut.regs.error_index)))

    done, _, _ = run_program(program, {}, watch=watch)
    assert done
    with pytest.raises(AccessError) as sim_error:
        get_device("sim").run(program, {})
    assert sim_error.value.index > 0
    assert reports and reports[-1] == (regs.ErrorCode.SRAM_RANGE, sim_error.value.index)


@pytest.mark.slow
@pytest.mark.parametrize("unit", [False, True])
def test_programs_run_one_after_another_with_no_reset_between_them(unit):
    """A board's host STARTs program after program on one accelerator: each run is the
    simulator's, bit for bit, in the cycles it takes after a reset (the compute stage left
    FINISHED for a run that ended, so a second START ran no instruction: one cycle, its
    outputs whatever DRAM held). After an error the units keep it, so the next START stops at
    once with it, until a reset (the board's runtime downloads the overlay again then)."""
    from tilecraft.compiler.operator.builder import ProgramBuilder
    from tilecraft.hw.isa import Finish, Gemm
    from tilecraft.runtime.buffers import Role

    cfg = preset("1x8x8").replace(requant_lanes=8 if unit else 0)
    rng = np.random.default_rng(11)
    op = Conv2d(1, 16, 6, 6, 16, 3, 1, 1)
    if unit:  # a float32 multiplier per channel: its STOREs requantize on the unit
        ep = Epilogue(bias=True, multiplier=Multiplier.FLOAT32, offset=5)
        conv = conv2d(
            cfg,
            op,
            ep,
            bias=rng.integers(-3000, 3000, op.oc).astype(np.int32),
            multiplier=(rng.uniform(1, 2, op.oc) * 2.0**-9).astype(np.float32),
        )
    else:
        conv = conv2d(cfg, op, Epilogue(shift=7, relu=True))
    gemm = blocked_gemm(cfg, 8, 32, 16)
    jobs = [(p, pack_inputs(p, random_inputs(p, rng))) for p in (conv, conv, gemm, conv)]
    runs, _ = run_programs(jobs)
    for k, ((program, inputs), run) in enumerate(zip(jobs, runs)):
        want = get_device("sim").run(program, inputs)
        alone = run_programs([(program, inputs)])[0][0]
        assert run["done"] and not run["error"], k
        assert run["cycles"] == alone["cycles"] > 100, (k, run["cycles"], alone["cycles"])
        for name, value in want.outputs.items():
            assert np.array_equal(run["outputs"][name], value), (k, name)

    pb = ProgramBuilder(cfg, "gemm_range")
    pb.buffer("o", Role.OUTPUT, (4, 1, cfg.block_out), np.int8)
    past = Gemm(uop_bgn=0, uop_end=1, iter_out=1, iter_in=3, dst_in=cfg.depth("acc") - 1)
    bad = pb.build([past, Finish()])
    runs, _ = run_programs([(bad, {}), jobs[2], jobs[2]])
    assert [r["done"] for r in runs] == [True] * 3
    codes = {(r["error"], r["error_code"], r["error_index"]) for r in runs}
    assert codes == {(1, regs.ErrorCode.SRAM_RANGE, 0)}  # the first run's, each time


def test_the_depthwise_mode_builds_where_its_passes_fit_under_the_reads():
    """1x8x8's 3x3 taps take two weight elements: on a packed core that is four array passes an
    output, more than a column's three reads, and the RTL says so; on the ECP5's DSPs (no
    packing) two, and it builds."""
    from tilecraft.errors import ConfigError
    from tilecraft.hw.rtl.dsp import ECP5_DSP
    from tilecraft.hw.rtl.top import verilog

    cfg = preset("1x8x8").with_depthwise_mode(3)
    assert "module" in verilog(
        cfg.replace(log_block_in=4, log_block_out=4)
    )  # the remedy the error names
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ConfigError, match=r"4 array passes an output .* exceed the window's 3"):
            verilog(cfg)
        with pytest.raises(
            ConfigError, match=r"log_block_in = log_block_out >= 4, or build for the ECP5"
        ):
            verilog(cfg)
        gc.collect()  # Amaranth warns of a part built and never used as it is collected
    # refused before any part is built: the error alone, not a screen of warnings after it
    assert [str(w.message) for w in caught if w.category.__name__ == "UnusedElaboratable"] == []
    assert "module" in verilog(cfg, packed=ECP5_DSP)
