"""A chained layer's first weights load while the layer before it computes, into WGT rows that
layer leaves alone (its own rows moved where they must be): the chain is bit-exact with its
layers run one by one, the whole-program rules agree, and a load ahead that breaks a rule is
refused by name."""

import numpy as np
import pytest

from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.graph.chain import Part, _chain_table, chain_programs
from tilecraft.compiler.graph.weights_ahead import (
    Ahead,
    check_early,
    first_weights,
    plan_ahead,
    wgt_span,
)
from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.errors import VerifyError
from tilecraft.hw.config import preset
from tilecraft.hw.isa import MemId, Stage, stage_of
from tilecraft.ops import Conv2d, Epilogue
from tilecraft.runtime import get_device
from tilecraft.runtime.layout import pack_inputs, unpack_outputs

CFG = preset("1x8x8")
OP = Conv2d(1, 16, 8, 8, 16, kernel=3, pad=1)


def _layers(constant=True):
    rng = np.random.default_rng(0)
    weights = [rng.integers(-128, 128, OP.weight_shape, dtype=np.int8) for _ in range(2)]
    kw = [{"weight": w} if constant else {} for w in weights]
    a = conv2d(CFG, OP, Epilogue(shift=6), name="a", **kw[0])
    b = conv2d(CFG, OP, Epilogue(shift=7), name="b", **kw[1])
    return [Part(a, {"output": "y"}), Part(b, {"input": "y", "output": "z"})]


def _run(program, inputs):
    result = get_device("sim").run(program, pack_inputs(program, inputs))  # races checked
    return unpack_outputs(program, result.outputs)


def _placed(program, parts):
    offsets = {b.name: b.offset for b in program.buffers}
    plans = plan_ahead(CFG, [p.program for p in parts])
    _, placed, early = _chain_table(CFG, parts, offsets, program.uop_offset // CFG.uop_bytes, plans)
    return placed, early


def test_the_next_layers_first_weights_load_in_rows_the_layer_before_leaves_alone():
    parts = _layers()
    a, b = (p.program for p in parts)
    assert wgt_span(a) == wgt_span(b) == (0, 18)  # one shape: the same rows
    plans = plan_ahead(CFG, [a, b])
    assert plans[0] == Ahead() and plans[1].shift == 18 and plans[1].early == first_weights(b)
    program, _ = chain_programs(parts, {"z"})
    verify(program)  # the whole-program rules agree
    placed, early = _placed(program, parts)
    table = program.table()
    rows = early[1]
    assert rows is not None and rows.start in placed[0]  # inside the first layer's rows...
    loads = [k for k in placed[0] if stage_of(table[k]["opcode"], table[k]["mem"]) == Stage.LOAD]
    assert list(rows) == loads[-len(rows) :]  # ...after its last load
    assert all(table[k]["sram_base"] >= 18 for k in rows)  # clear of its rows (0..18)
    x = np.random.default_rng(1).integers(-128, 128, (1, 16, 8, 8), dtype=np.int8)
    y = _run(a, {"input": x})["output"]
    want = _run(b, {"input": y})["output"]
    np.testing.assert_array_equal(_run(program, {"a.input": x})["z"], want)


def test_weights_a_program_takes_as_inputs_wait_for_the_junction():
    parts = _layers(constant=False)
    assert first_weights(parts[1].program) == ()  # not constants: the host may write them
    assert plan_ahead(CFG, [p.program for p in parts]) == [Ahead(), Ahead()]


def test_a_chain_of_three_moves_each_layers_rows_clear_of_the_one_before():
    """Three layers of one shape: the second's rows move past the first's, the third's need
    not move (the first is complete before the second's loads start)."""
    parts = _layers()
    weight = np.random.default_rng(3).integers(-128, 128, OP.weight_shape, dtype=np.int8)
    c = conv2d(CFG, OP, Epilogue(shift=5), weight=weight, name="c")
    parts = [parts[0], Part(parts[1].program, {"input": "y", "output": "v"})]
    parts.append(Part(c, {"input": "v", "output": "z"}))
    plans = plan_ahead(CFG, [p.program for p in parts])
    assert [p.shift for p in plans] == [0, 18, 0] and all(p.early for p in plans[1:])
    program, _ = chain_programs(parts, {"z"})
    verify(program)
    x = np.random.default_rng(2).integers(-128, 128, (1, 16, 8, 8), dtype=np.int8)
    want = x
    for part in parts:
        want = _run(part.program, {"input": want})["output"]
    np.testing.assert_array_equal(_run(program, {"a.input": x})["z"], want)


@pytest.mark.parametrize(
    "change, why",
    [
        ({"sram_base": 0}, "writes WGT rows that layer touches"),
        ({"pop_next": 1}, "carries a token flag"),
        ({"dram_base": None}, "reads outside the constant buffers"),
        ({"mem": int(MemId.INP)}, "is not a LOAD WGT"),
    ],
)
def test_a_load_ahead_that_breaks_a_rule_is_refused(change, why):
    parts = _layers()
    program, _ = chain_programs(parts, {"z"})
    placed, early = _placed(program, parts)
    table = program.table()
    check_early(program, table, early[1], placed[0], "a")
    k = early[1].start
    for name, value in change.items():
        z = program.buffer("z").offset // CFG.elem_bytes("wgt")  # the output b stores
        table[name][k] = z if value is None else value
    with pytest.raises(VerifyError, match=f"ahead of layer a's junction {why}") as info:
        check_early(program, table, early[1], placed[0], "a")
    assert info.value.rule == "junction" and info.value.index == k


def test_a_load_ahead_must_follow_the_layers_last_load_and_lie_in_its_rows():
    parts = _layers()
    program, _ = chain_programs(parts, {"z"})
    placed, early = _placed(program, parts)
    table = program.table()
    k = early[1].start
    last = max(
        j
        for j in placed[0]
        if j < k and stage_of(table[j]["opcode"], table[j]["mem"]) == Stage.LOAD
    )
    table[[last, k]] = table[[k, last]]  # the early load swapped with the layer's last load
    with pytest.raises(VerifyError, match="comes before that layer's last load"):
        check_early(program, table, range(last, last + 1), placed[0], "a")
    with pytest.raises(VerifyError, match="are not among that layer's rows"):
        check_early(program, table, range(placed[0].stop, placed[0].stop + 1), placed[0], "a")


def test_loading_ahead_shortens_the_junction(monkeypatch):
    """What it is for: on the cycle model the chain with the second layer's first weights
    loaded ahead takes fewer cycles than the same chain with none."""
    import tilecraft.compiler.graph.chain as chain
    from tilecraft.runtime.device import cycle_model

    parts = _layers()
    ahead, _ = chain_programs(parts, {"z"})
    monkeypatch.setattr(chain, "plan_ahead", lambda cfg, programs: [Ahead() for _ in programs])
    plain, _ = chain_programs(parts, {"z"})
    timer = cycle_model()
    assert timer(ahead) < timer(plain)
