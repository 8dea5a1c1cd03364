"""The seeded random programs of the differential tests: verified, reproducible, and on a
config with the requantization unit, requantizing STOREs with their parameters in their bank;
on one with STORE into INP, STOREs there in turns with INP LOADs."""

import numpy as np
import pytest

from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.programs.random_test_programs import (
    PARAM_AT,
    inp_turns_program,
    random_program,
    requant_pace_program,
)
from tilecraft.errors import TilecraftError
from tilecraft.hw.config import preset
from tilecraft.hw.isa import MemId, Opcode
from tilecraft.runtime import get_device


def test_the_same_seed_gives_the_same_program():
    a, x = random_program(preset("1x8x8"), 3)
    b, y = random_program(preset("1x8x8"), 3)
    assert np.array_equal(a.insns, b.insns) and all(np.array_equal(x[k], y[k]) for k in x)


@pytest.mark.parametrize("name", ["1x8x8", "default"])
def test_random_programs_on_the_unit_requantize_from_their_own_bank(name):
    """Half the STOREs requantize, some with a parameter set per row, each reading parameter
    rows in its own bank; the programs verify and run on the simulator."""
    cfg = preset(name).replace(requant_lanes=8)
    stores = per_row = 0
    for seed in range(8):
        program, inputs = random_program(cfg, seed)
        verify(program)
        table = program.table()
        mine = table[(table["opcode"] == Opcode.STORE) & (table["requant"] != 0)]
        for row in mine:
            bank = int(row["sram_base"]) // cfg.acc_bank_rows
            assert int(row["param_base"]) - bank * cfg.acc_bank_rows >= PARAM_AT
        stores += len(mine)
        per_row += int(mine["param_per_row"].sum())
        get_device("sim").run(program, inputs)
    assert stores >= 8 and 0 < per_row < stores


def test_random_programs_with_the_path_into_inp_store_there_and_draw_the_rest_as_before():
    """With `store_to_inp`, some requantizing STOREs write INP rows the GEMMs may read; the
    programs verify and run on the simulator (its race check included); and every other
    instruction is drawn as on the config without the path (its own random stream)."""
    plain = preset("default").replace(requant_lanes=8)
    cfg = plain.with_store_to_inp()
    into = 0
    for seed in range(8):
        program, inputs = random_program(cfg, seed)
        verify(program)
        table = program.table()
        into += int(((table["opcode"] == Opcode.STORE) & (table["to_inp"] != 0)).sum())
        get_device("sim").run(program, inputs)
    assert into >= 4
    fields = ["opcode", "uop_bgn", "uop_end", "iter_out", "iter_in", "dst_out", "src_out", "imm"]
    for seed in range(4):
        before, after = (random_program(c, seed)[0].table() for c in (plain, cfg))
        units = [
            t[np.isin(t["opcode"], (Opcode.GEMM, Opcode.ALU))][fields] for t in (before, after)
        ]
        assert np.array_equal(*units), seed


@pytest.mark.parametrize("name", ["1x8x8", "default"])
def test_pace_programs_store_long_runs_of_parameter_sets(name):
    """The pace programs' STOREs all requantize, most with three sets or more (the random
    programs' have two at most), from their own bank; they verify and run on the simulator, and
    a config without the unit is refused by name."""
    cfg = preset(name).replace(requant_lanes=8)
    long_runs = 0
    for seed in range(4):
        program, inputs = requant_pace_program(cfg, seed)
        verify(program)
        table = program.table()
        stores = table[table["opcode"] == Opcode.STORE]
        assert len(stores) == 8 and (stores["requant"] != 0).all()
        for row in stores:
            bank = int(row["sram_base"]) // cfg.acc_bank_rows
            assert int(row["param_base"]) // cfg.acc_bank_rows == bank
        long_runs += int(((stores["param_per_row"] != 0) & (stores["y_size"] >= 3)).sum())
        get_device("sim").run(program, inputs)
    assert long_runs >= 8
    with pytest.raises(TilecraftError, match=f"config {preset(name).tag} has no requant"):
        requant_pace_program(preset(name), 0)


@pytest.mark.parametrize("name", ["1x8x8", "default"])
def test_inp_turns_programs_store_into_inp_beside_inp_loads_and_read_it(name):
    """Each round's STORE into INP follows an INP LOAD (INP's write port taken in turns) and a
    GEMM reads what it wrote: eight of each a program, their rows overlapping the LOADs' at
    times, the GEMM's sums in the output; verified, and run on the simulator."""
    cfg = preset(name).replace(requant_lanes=8).with_store_to_inp()
    overlaps = 0
    for seed in range(4):
        program, inputs = inp_turns_program(cfg, seed)
        table = program.table()
        into = table[(table["opcode"] == Opcode.STORE) & (table["to_inp"] != 0)]
        loads = table[(table["opcode"] == Opcode.LOAD) & (table["mem"] == MemId.INP)][1:]
        assert len(into) == 8 and len(loads) == 8 and (into["requant"] != 0).all()
        for store, load in zip(into, loads):
            s0 = int(store["dram_base"])
            s1 = s0 + (int(store["y_size"]) - 1) * int(store["x_stride"]) + int(store["x_size"])
            height = int(load["y_pad0"] + load["y_size"] + load["y_pad1"])
            width = int(load["x_pad0"] + load["x_size"] + load["x_pad1"])
            l0 = int(load["sram_base"])
            overlaps += s0 < l0 + height * width and l0 < s1
        out = get_device("sim").run(program, inputs).outputs["out"]
        assert len(np.unique(out)) > 16  # the sums of what INP held, not one value
    assert overlaps >= 1
    with pytest.raises(TilecraftError, match="has no path from STORE into INP"):
        inp_turns_program(preset(name).replace(requant_lanes=8), 0)
