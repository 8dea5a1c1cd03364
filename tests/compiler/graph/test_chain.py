"""Consecutive accelerator layers as one program: activations stay in DRAM in the blocked
layout, bit-exact with the layer-by-layer model and the chained reference; a missing barrier is
caught by the verifier; layouts that do not line up never hand a tensor over inside a program."""

import dataclasses

import numpy as np
import pytest
from network_models import tiny_resnet

from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.errors import VerifyError
from tilecraft.hw.config import HwConfig, preset
from tilecraft.hw.isa import Load, MemId, Opcode, encode, isa_for, table_insns
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model
from tilecraft.runtime.model import AcceleratorStep


def _compile(cfg, chain=True):
    graph = import_model(tiny_resnet(seed=4))
    return compile_network(graph, cfg, random_calibration(graph, 2, seed=4), chain=chain)


@pytest.mark.parametrize("name", ["default", "2x16x16"])
def test_chained_equals_layer_by_layer(name):
    chained, single = _compile(preset(name)), _compile(preset(name), chain=False)
    steps = [s for s in chained.model.steps if isinstance(s, AcceleratorStep)]
    assert [len(s.layers) for s in steps] == [8]  # conv1 with its max pool, 5 convs, GAP, fc
    x = {"input": np.random.default_rng(9).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    sim = get_device("sim")
    a = run_model(chained.model, x, sim, keep=True)
    b = run_model(single.model, x, sim, keep=True)
    ref = run_model(chained.model, x, keep=True)
    for name_, value in b.tensors.items():
        if name_ in a.tensors:  # a chain hands its inner tensors over in DRAM
            np.testing.assert_array_equal(a.tensors[name_], value, err_msg=name_)
            np.testing.assert_array_equal(ref.tensors[name_], value, err_msg=name_)
    out = chained.graph.outputs[0]
    np.testing.assert_array_equal(a.outputs[out], b.outputs[out])
    inner = set(b.tensors) - set(a.tensors)
    assert len(inner) == 7  # seven activations never leave the accelerator's DRAM


def test_a_missing_barrier_is_caught():
    comp = _compile(preset("default"))
    step = next(s for s in comp.model.steps if isinstance(s, AcceleratorStep) and s.layers)
    program = comp.model.programs[step.program]
    verify(program)
    insns = table_insns(program.table())
    waits = [
        k
        for k, i in enumerate(insns)
        if isinstance(i, Load) and i.mem == MemId.INP and i.x_size == 0 and i.pop_next
    ]
    assert len(waits) == 7  # one per boundary between the 8 layers
    broken = list(insns)
    for k in waits:  # the load stage no longer waits for the previous layer's stores
        broken[k] = dataclasses.replace(broken[k], pop_next=False)
    for k, i in enumerate(broken):
        if isinstance(i, Load) and i.mem == MemId.UOP and i.x_size == 0 and i.push_prev:
            broken[k] = dataclasses.replace(i, push_prev=False)
    bad = program.replace(insns=encode(isa_for(program.config), broken))
    with pytest.raises(VerifyError, match="war|raw|dram-order"):  # rows are shared here too
        verify(bad)


def test_dram_order_rule():
    """A LOAD of bytes a STORE wrote (raw), or a STORE over bytes a LOAD reads (war), on
    different stages, needs the other complete at its start."""
    from types import SimpleNamespace as A

    from tilecraft.compiler.analysis.completion import LOAD_LANE, STORE_LANE
    from tilecraft.compiler.analysis.dram_order import dram_order_problem
    from tilecraft.hw.isa import Stage

    store = A(index=0, stage=Stage.STORE, dram_reads=[], dram_writes=[(0, 64)])
    load = A(index=1, stage=Stage.LOAD, dram_reads=[(32, 40), (48, 96)], dram_writes=[])
    lanes, local = [STORE_LANE, LOAD_LANE], [0, 0]
    unordered = [np.full(4, -1), np.full(4, -1)]
    assert dram_order_problem([store, load], unordered, lanes, local) == (
        1,
        "reads DRAM bytes stored by",
        0,
    )
    ordered = [np.full(4, -1), np.array([-1, -1, -1, 0])]  # the store is complete
    assert dram_order_problem([store, load], ordered, lanes, local) is None
    elsewhere = A(index=1, stage=Stage.LOAD, dram_reads=[(64, 96)], dram_writes=[])
    assert dram_order_problem([store, elsewhere], unordered, lanes, local) is None
    late = A(index=1, stage=Stage.STORE, dram_reads=[], dram_writes=[(0, 8)])
    first = A(index=0, stage=Stage.LOAD, dram_reads=[(0, 64)], dram_writes=[])
    assert dram_order_problem([first, late], unordered, [LOAD_LANE, STORE_LANE], local)[1] == (
        "overwrites DRAM bytes still to be read by"
    )


def test_layouts_that_do_not_line_up_stay_apart():
    cfg = HwConfig(log_block_in=4, log_block_out=3, log_wgt_buff=16)  # 16 lanes in, 8 out
    comp = _compile(cfg)
    steps = [s for s in comp.model.steps if isinstance(s, AcceleratorStep)]
    assert len(steps) >= 6  # mostly a program per layer
    for step in steps:  # a chain never hands a tensor over: 16 lanes in, 8 out do not line up
        made = {b.tensor for layer in step.layers for b in layer.buffers if b.buffer == "output"}
        read = {b.tensor for layer in step.layers for b in layer.buffers if b.buffer != "output"}
        assert not made & read, step.name
    x = {"input": np.ones((1, 3, 16, 16), np.float32)}
    out = comp.graph.outputs[0]
    np.testing.assert_array_equal(
        run_model(comp.model, x, get_device("sim")).outputs[out],
        run_model(comp.model, x).outputs[out],
    )


def test_relocation_refuses_what_it_cannot_move():
    from tilecraft.compiler.graph.chain import Part, _relocate, chain_programs
    from tilecraft.compiler.operator.conv2d import conv2d
    from tilecraft.errors import ScheduleError
    from tilecraft.ops import Conv2d, Epilogue

    cfg = preset("1x8x8")
    program = conv2d(cfg, Conv2d(1, 8, 4, 4, 8, 1, 1, 0), Epilogue(shift=4))
    part = Part(program, {})
    where = {f"{program.name}.{b.name}": b.offset for b in program.buffers}
    moved = _relocate(cfg, 0, part, where, program.uop_offset // cfg.uop_bytes)
    assert np.array_equal(moved, program.table())  # nothing moves: the same table
    shifted = dict(where, **{f"{program.name}.input": where[f"{program.name}.input"] + 3})
    with pytest.raises(ScheduleError, match="input moves by 3 bytes, not a whole number"):
        _relocate(cfg, 0, part, shifted, 0)
    cut = program.replace(insns=program.insns[:-1])  # no FINISH at the end
    with pytest.raises(ScheduleError, match="does not end with FINISH"):
        chain_programs([Part(cut, {"output": "y"}), Part(program, {"input": "y"})], {"output"})


def _two_layers(first=None, verified_parts=False):
    """Two 1x1 convolutions chained through tensor y (`first` replaces the first's program)."""
    from tilecraft.compiler.graph.chain import Part, chain_programs
    from tilecraft.compiler.operator.conv2d import conv2d
    from tilecraft.ops import Conv2d, Epilogue

    cfg = preset("1x8x8")
    a = conv2d(cfg, Conv2d(1, 8, 4, 4, 8, 1, 1, 0), Epilogue(shift=4), name="a")
    b = conv2d(cfg, Conv2d(1, 8, 4, 4, 8, 1, 1, 0), Epilogue(shift=3), name="b")
    parts = [Part(first or a, {"output": "y"}), Part(b, {"input": "y", "output": "z"})]
    return chain_programs(parts, {"z"}, verified_parts=verified_parts)[0], parts


def _junction(program) -> int:
    """The row of a two-layer chain's junction pop (the second layer's first instruction)."""
    t = program.table()
    empty = (t["opcode"] == Opcode.LOAD) & (t["mem"] == MemId.INP) & (t["x_size"] == 0)
    return int(np.flatnonzero(empty & (t["pop_next"] != 0))[0])


def _with(program, k: int, **changes):
    insns = table_insns(program.table())
    insns[k] = dataclasses.replace(insns[k], **changes)
    return program.replace(insns=encode(isa_for(program.config), insns))


def test_a_chain_is_verified_by_its_parts_and_its_junctions():
    """The chain's verification: each part whole, then what joining adds. A junction that no
    longer waits is refused by name (the whole-program verifier finds the hazard too)."""
    from tilecraft.compiler.graph.chain import verify_chain

    program, parts = _two_layers()
    verify_chain(program, parts)
    verify(program)  # the whole-program rules agree
    j = _junction(program)  # the second part's first instruction
    for k, change in (
        (j, {"pop_next": False}),
        (j - 1, {"push_prev": False}),
        (j - 1, {"pop_next": False}),
    ):
        broken = _with(program, k, **change)
        with pytest.raises(VerifyError, match="after layer a is not the barrier") as info:
            verify_chain(broken, parts)
        assert info.value.rule == "junction" and info.value.index == k


def test_the_chain_is_its_parts_relocated_and_nothing_else():
    """An instruction changed inside a layer of the chain (its parts verified as they were) is
    refused: the chain's verification rebuilds what the parts and the buffers' places make."""
    from tilecraft.compiler.graph.chain import verify_chain

    program, parts = _two_layers()
    table = program.table()
    j = _junction(program) + 1  # the second layer's body
    gemms = (table["opcode"] == Opcode.GEMM) & (table["pop_prev"] != 0)
    k = j + int(np.flatnonzero(gemms[j:])[0])
    assert table[k]["opcode"] == Opcode.GEMM and table[k]["pop_prev"]
    with pytest.raises(VerifyError, match=f"instruction {k} is not the layers' relocated") as e:
        verify_chain(_with(program, k, pop_prev=False), parts, verified_parts=True)
    assert e.value.rule == "chain"
    other = program.uops.copy()
    other[-1] ^= 1  # the second layer's micro-op, another row
    moved = program.replace(uops=other)
    with pytest.raises(VerifyError, match="micro-ops are not the layers'"):
        verify_chain(moved, parts, verified_parts=True)


def test_a_broken_part_fails_the_chain_unless_the_caller_verified_it():
    """The chain verifies its parts (a hazard inside a layer is the part's to find) unless its
    caller says it did (a network verifies each layer where it compiles it)."""
    a = _two_layers()[1][0].program
    table = a.table()
    stage_load = (table["opcode"] == Opcode.LOAD) & np.isin(table["mem"], [MemId.INP, MemId.WGT])
    push = int(np.flatnonzero(stage_load & (table["push_next"] != 0))[0])
    pop = int(np.flatnonzero((table["opcode"] == Opcode.GEMM) & (table["pop_prev"] != 0))[0])
    # the first load-to-compute token dropped at both ends: still balanced, but that GEMM no
    # longer waits for the load it reads (nor FINISH for that load)
    broken = _with(_with(a, push, push_next=False), pop, pop_prev=False)
    with pytest.raises(VerifyError, match="finish|raw"):
        verify(broken)
    with pytest.raises(VerifyError, match="finish|raw"):
        _two_layers(first=broken)
    _two_layers(first=broken, verified_parts=True)  # trusted: its caller verified it


def test_relocation_keeps_each_transfer_inside_one_buffer():
    """A transfer that runs past its buffer in its own layer (into the next buffer, inside the
    program's region) would read another tensor once the chain moves the buffers apart."""
    a = _two_layers()[1][0].program
    table = a.table()
    load = int(
        np.flatnonzero(
            (table["opcode"] == Opcode.LOAD) & (table["mem"] == MemId.INP) & (table["x_size"] > 0)
        )[0]
    )
    rows = int(table["y_size"][load])
    over = _with(a, load, y_size=rows + 64)  # reads on past the input
    with pytest.raises(VerifyError, match="not inside one of its buffers") as info:
        _two_layers(first=over, verified_parts=True)
    assert info.value.rule == "dram" and info.value.index == load


def test_buffers_of_one_layer_never_share_arena_bytes():
    from tilecraft.compiler.graph.chain import verify_chain

    program, parts = _two_layers()
    bufs = {b.name: b for b in program.buffers}
    assert bufs["y"].role == "scratch" and bufs["z"].role == "output"  # may share, by lives
    clash = dataclasses.replace(bufs["z"], offset=bufs["y"].offset)  # but b reads y, writes z
    doctored = program.replace(
        buffers=tuple(clash if b.name == "z" else b for b in program.buffers)
    )
    with pytest.raises(VerifyError, match="layer b's buffers y and z share arena bytes"):
        verify_chain(doctored, parts, verified_parts=True)
