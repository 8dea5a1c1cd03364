"""STOREs into INP on the generated Verilog (tier `rtl`; configs with `store_to_inp`): the
store stage writes the unit's rows into INP, in turns with the load stage's INP LOADs on its
one write port, where the GEMMs and the depthwise pass read them. Random programs, programs of
such STOREs beside INP LOADs, inverted residual blocks on one pass, and bad STOREs: the
simulator's outputs (and numpy's for the blocks), its error classes, and its cycles within the
bound every hardware change is held to."""

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

INTO_INP_CONFIGS = ["1x8x8", "default"]  # with the unit and STORE into INP (default: the mode)
INTO_INP_RANDOM, INTO_INP_TURNS = 48, 8


def _into_inp_programs(cfg):
    """Random programs (half their requantizing STOREs into INP rows the GEMMs read), STOREs
    into INP in turns with INP LOADs, each round's GEMM reading what they wrote, and on a
    config with the mode inverted residual blocks on one pass (docs/DEPTHWISE.md: expand,
    the unit into INP, the depthwise pass, the unit into INP, the projection), whose outputs
    numpy gives too: (name, program, inputs, numpy's output or None)."""
    from tilecraft.compiler.programs.inverted_residual import Block, bands, build
    from tilecraft.compiler.programs.random_test_programs import inp_turns_program, random_program

    jobs = [(f"random seed {s}", *random_program(cfg, s), None) for s in range(INTO_INP_RANDOM)]
    jobs += [(f"turns seed {s}", *inp_turns_program(cfg, s), None) for s in range(INTO_INP_TURNS)]
    if cfg.depthwise_window:
        for block in (Block(10, 24, 32, 24, 1), Block(12, 16, 48, 40, 2)):
            tilings = bands(cfg, block)
            for band in (tilings[0], tilings[-1]):
                program, inputs, want = build(cfg, block, band, seed=band.rows)
                jobs.append((f"{block} {band}", program, inputs, (want, block.cout)))
    return jobs


@pytest.fixture(scope="module", params=INTO_INP_CONFIGS)
def into_inp_runs(request):
    from tilecraft.sim.rtl.device import RtlDevice

    cfg = preset(request.param).replace(requant_lanes=8).with_store_to_inp()
    if request.param == "default":
        cfg = cfg.with_depthwise_mode(3)
    jobs = _into_inp_programs(cfg)
    rtl = RtlDevice(cfg).run_many([(p, i) for _, p, i, _ in jobs])
    sim = [get_device("sim").run(p, i) for _, p, i, _ in jobs]
    return cfg, jobs, rtl, sim


def test_stores_into_inp_are_bit_exact_and_timed_on_the_rtl(into_inp_runs):
    """The store stage writes the unit's rows into INP (in turns with the INP LOADs on its one
    write port), the GEMMs and the depthwise pass read them: the simulator's outputs, numpy's
    for the blocks, and the cycle model within the bound every hardware change is held to."""
    from tilecraft.compiler.programs.inverted_residual import output
    from tilecraft.hw.isa import Opcode, isa_for
    from tilecraft.hw.isa.codec import decode

    cfg, jobs, rtl, sim = into_inp_runs
    into = 0
    for (name, program, _, want), r, s in zip(jobs, rtl, sim):
        rows = decode(isa_for(cfg), program.insns)
        into += int((rows["to_inp"][rows["opcode"] == Opcode.STORE] == 1).sum())
        for key in s.outputs:
            assert np.array_equal(r.outputs[key], s.outputs[key]), (name, key)
        if want is not None:
            np.testing.assert_array_equal(output(r.outputs["y"], want[1]), want[0], err_msg=name)
        error = abs(s.report.cycles - r.report.cycles) / r.report.cycles
        assert error <= MAX_CYCLE_ERROR, (name, s.report.cycles, r.report.cycles)
    assert into >= INTO_INP_TURNS * 8  # every turns program's eight, and the others'


def test_bad_stores_into_inp_raise_the_simulators_error_class():
    """A STORE into INP that does not requantize (only the unit's rows go there), and one whose
    rows run past INP's end: the store stage stops with the simulator's error class, at the
    same instruction. One whose last row is INP's last, and an empty one followed by an INP
    LOAD (the port's turn given back without a row written), run to the end as modeled."""
    from tilecraft.hw.isa import Load, MemId
    from tilecraft.sim.rtl.device import RtlDevice

    from harness import requant_rows, requant_store_program

    cfg = preset(INTO_INP_CONFIGS[0]).replace(requant_lanes=8).with_store_to_inp()
    acc, _ = requant_rows(cfg, np.random.default_rng(2), 8)

    def program(at: int, requant: bool, x: int = 8, then=()):
        store = dict(dram_base=at, x_size=x, x_stride=8, requant=requant, param_base=8)
        return requant_store_program(cfg, acc, store | {"to_inp": True}, out_rows=4, then=then)

    device = RtlDevice(cfg)
    past_the_end = cfg.depth("inp") - 6
    for p, cls in (
        (program(100, requant=False), IllegalInstructionError),
        (program(past_the_end, requant=True), AccessError),
    ):
        with pytest.raises(cls) as rtl_error:
            device.run(p, {})
        with pytest.raises(cls) as sim_error:
            get_device("sim").run(p, {})
        assert rtl_error.value.index == sim_error.value.index == 1
    inp_load = Load(mem=MemId.INP, sram_base=0, dram_base=0, y_size=1, x_size=4, x_stride=4)
    for p in (
        program(past_the_end - 2, requant=True),  # its last row INP's last
        program(100, requant=True, x=0, then=[inp_load]),
    ):
        rtl, sim = device.run(p, {}), get_device("sim").run(p, {})
        assert abs(rtl.report.cycles - sim.report.cycles) <= 8, (rtl.report, sim.report)
