"""A max pool taken on a conv's accumulators, in the conv's program: bit-exact with numpy's
conv then max pool over random shapes, pools, epilogues, configs and every kind of tiling (row
and column bands, the rows and columns handed between tiles), on the ALU's epilogue and on the
requantization unit; refused, naming why, where the epilogue may decrease or the windows do
not fit; the verifier's dataflow rule catches a window maximum left out."""

import dataclasses

import numpy as np
import pytest

from tilecraft.compiler.analysis.tokens import insert_tokens
from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.operator.conv2d import compile_conv2d
from tilecraft.compiler.operator.lowering import lower_conv
from tilecraft.compiler.operator.params import ConvParams
from tilecraft.compiler.operator.pipeline import plan_operator
from tilecraft.compiler.operator.pool_epilogue import accumulator_range, check_monotone
from tilecraft.errors import ScheduleError, VerifyError
from tilecraft.hw.config import preset
from tilecraft.hw.isa import Alu, AluOp
from tilecraft.ops import Computation, Conv2d, ConvSchedule, Epilogue, LoopOrder, MaxPool2d
from tilecraft.ops import reference as R
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs

# (h, w, conv kernel, conv pad, pool kernel, pool stride, pool pads)
SHAPES = [
    (16, 20, 3, 1, 3, 2, (1, 1, 1, 1)),  # ResNet's: windows share a row and a column
    (15, 13, 3, 1, 3, 2, (1, 1, 1, 1)),  # odd sizes: the last windows lose their last tap
    (12, 12, 1, 0, 2, 2, (0, 0, 0, 0)),  # windows apart
    (13, 14, 3, 1, 3, 2, (0, 0, 0, 0)),  # no padding: the first row is handed down
    (18, 17, 3, 1, 3, 3, (1, 0, 1, 2)),  # stride 3, padding on some sides
]


def _case(shape, seed: int, unit: bool = False):
    h, w, k, p, pk, ps, pads = shape
    rng = np.random.default_rng(seed)
    op = Conv2d(2, 20, h, w, 40, kernel=k, pad=p, pad_value=int(rng.integers(-9, 9)))
    pool = MaxPool2d(2, 40, op.oh, op.ow, kernel=pk, stride=ps, pads=pads, pad_value=-128)
    params = {
        "weight": rng.integers(-128, 128, op.weight_shape, dtype=np.int8),
        "bias": rng.integers(-999, 999, op.oc, dtype=np.int32),
    }
    if unit:
        ep = Epilogue(bias=True, multiplier="float32", relu=bool(seed % 2), offset=seed % 5)
        params["multiplier"] = (rng.random(op.oc) * 1e-3 + 1e-5).astype(np.float32)
    else:
        ep = Epilogue(bias=True, multiplier="channel", shift=12, relu=bool(seed % 2))
        params["multiplier"] = rng.integers(0, 1 << 8, op.oc, dtype=np.int32)
    return op, pool, ep, params, rng


def _run(program, rng):
    inputs = random_inputs(program, rng)
    result = get_device("sim").run(program, pack_inputs(program, inputs))
    outputs = unpack_outputs(program, result.outputs)
    ok, message = check_outputs(program, inputs, outputs)
    return ok, message, inputs, outputs


def _tilings(cfg, op, ep, pool, count: int):
    """`count` legal schedules of distinct tiles, spread over the ranked space."""
    distinct = {}
    for r in plan_operator(cfg, op, ep, pool=pool).ranked:
        s = r.schedule
        distinct.setdefault((s.tile_oc, s.tile_oh, s.tile_ow, s.acc_tiles, s.slots), s)
    every = list(distinct.values())
    return every[:: max(1, len(every) // count)][:count]


@pytest.mark.parametrize("config", ["default", "1x8x8", "2x16x16", "1x16x8"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_conv_and_its_pool_are_bit_exact_on_every_tiling(config, shape):
    cfg = preset(config)
    op, pool, ep, params, rng = _case(shape, SHAPES.index(shape))
    for s in _tilings(cfg, op, ep, pool, 4):
        program = compile_conv2d(cfg, op, ep, pool=pool, schedule=s, **params).program
        ok, message, inputs, outputs = _run(program, rng)
        assert ok, f"{config} {s.describe()}: {message}"
        extra = {k: v for k, v in params.items() if k != "weight"}
        conv = R.conv2d(op, ep, inputs["input"], params["weight"], **extra)
        np.testing.assert_array_equal(outputs["output"], R.maxpool2d(pool, conv))


@pytest.mark.parametrize("config", ["default", "1x8x8"])
def test_an_exact_requantization_whose_second_product_wraps(config):
    """The quantizer's exact requantization of a model with zero points: its second product
    wraps around int32 (modulo 2**32 the narrowed int8 is still exact), proven so and run."""
    cfg = preset(config)
    op, pool, _, params, rng = _case(SHAPES[0], 5)
    ep = Epilogue(multiplier="channel", acc_bounds=True, pre_shift=10, shift=24, offset=-128)
    n = op.oc
    params = {
        "weight": params["weight"],
        "multiplier": np.full(n, 1024, np.int32),
        "multiplier2": rng.integers(3000, 4000, n, dtype=np.int32),  # up to 0.98 * 2**32
        "acc_lo": np.zeros(n, np.int32),
        "acc_hi": np.full(n, 1 << 20, np.int32),
    }
    for s in _tilings(cfg, op, ep, pool, 2):
        program = compile_conv2d(cfg, op, ep, pool=pool, schedule=s, **params).program
        ok, message, *_ = _run(program, rng)
        assert ok, f"{config} {s.describe()}: {message}"


@pytest.mark.parametrize("config", ["default", "2x16x16"])
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_on_the_requantization_unit(config, shape):
    cfg = preset(config).with_requant_unit()
    op, pool, ep, params, rng = _case(shape, 7, unit=True)
    for s in _tilings(cfg, op, ep, pool, 3):
        program = compile_conv2d(cfg, op, ep, pool=pool, schedule=s, **params).program
        ok, message, *_ = _run(program, rng)
        assert ok, f"{config} {s.describe()}: {message}"


def test_the_heuristic_and_the_cycle_model_choose_a_fused_program_that_beats_two():
    """ResNet-18's first conv and its pool on the PYNQ-Z1: the fused program's cycles are
    fewer than the conv's and the pool's programs' together (it stores a quarter of the rows
    and never reads them back)."""
    from tilecraft.compiler.programs.pool import compile_maxpool
    from tilecraft.runtime.device import cycle_model

    cfg = preset("default")  # the PYNQ-Z1's
    op = Conv2d(1, 3, 64, 64, 64, kernel=7, stride=2, pad=3)
    pool = MaxPool2d(1, 64, 32, 32, kernel=3, stride=2, pads=(1, 1, 1, 1), pad_value=-128)
    rng = np.random.default_rng(0)
    ep = Epilogue(bias=True, multiplier="channel", shift=16, relu=True)
    params = {
        "weight": rng.integers(-128, 128, op.weight_shape, dtype=np.int8),
        "bias": rng.integers(-999, 999, 64, dtype=np.int32),
        "multiplier": rng.integers(1, 1 << 8, 64, dtype=np.int32),
    }
    timer = cycle_model()
    fused = timer(compile_conv2d(cfg, op, ep, pool=pool, **params).program)
    apart = timer(compile_conv2d(cfg, op, ep, **params).program) + timer(compile_maxpool(cfg, pool))
    assert fused < apart


def _params(**kw) -> ConvParams:
    return ConvParams(**{"weight": None, "bias": None, "multiplier": None, **kw},
                      tensor_multiplier=kw.pop("tensor_multiplier", None))  # fmt: skip


def test_the_epilogue_is_proven_never_to_decrease_or_refused():
    weight = np.full((2, 1, 1, 1), 100, np.int8)
    lo, hi = accumulator_range(weight)
    assert lo.tolist() == [-12800, -12800] and hi.tolist() == [12700, 12700]
    ep = Epilogue(bias=True, multiplier="channel", shift=8)
    check_monotone(ep, lo, hi, _params(bias=np.zeros(2), multiplier=np.array([5, 0])))
    with pytest.raises(ScheduleError, match="multiplier has a negative value"):
        check_monotone(ep, lo, hi, _params(bias=np.zeros(2), multiplier=np.array([5, -1])))
    with pytest.raises(ScheduleError, match="multiply may wrap around int32"):
        big = np.array([1 << 20, 1], np.int64)
        check_monotone(ep, lo, hi, _params(bias=np.zeros(2), multiplier=big))
    with pytest.raises(ScheduleError, match="bias add may wrap"):
        check_monotone(ep, lo, hi, _params(bias=np.array([2**31 - 100, 0]), multiplier=big))
    unit = Epilogue(bias=True, multiplier="float32")
    check_monotone(unit, lo, hi, _params(bias=np.zeros(2), multiplier=np.float32([1, 0])))
    with pytest.raises(ScheduleError, match="scale has a negative value"):
        nan = np.float32([1, np.nan])
        check_monotone(unit, lo, hi, _params(bias=np.zeros(2), multiplier=nan))
    # the quantizer's exact requantization: the second product wraps, then only shifts and
    # adds reach the narrowing store, whose int8 the exact values stay in: exact, kept
    exact = Epilogue(multiplier="channel", acc_bounds=True, pre_shift=10, shift=24, offset=-128)
    m, m2 = np.full(2, 1024), np.full(2, 4000)  # up to 2**30, then 0.98 * 2**32 (wraps)
    wide = {"acc_lo": np.zeros(2, int), "acc_hi": np.full(2, 1 << 20), "multiplier": m}
    check_monotone(exact, lo * 100, hi * 100, _params(**wide, multiplier2=m2))
    with pytest.raises(ScheduleError, match="second multiply may wrap .* only 6 exact bits"):
        shallow = dataclasses.replace(exact, shift=26, offset=0)
        check_monotone(shallow, lo * 100, hi * 100, _params(**wide, multiplier2=m2))
    narrow = Epilogue(acc_bounds=True, shift=0)  # narrowed without a clip: must stay in int8
    bounds = {"acc_lo": np.full(2, -128), "acc_hi": np.full(2, 127)}
    check_monotone(narrow, lo, hi, _params(**bounds))
    with pytest.raises(ScheduleError, match="narrowing wraps"):
        check_monotone(narrow, lo, hi, _params(acc_lo=np.full(2, -128), acc_hi=np.full(2, 128)))


def test_what_cannot_be_taken_on_the_accumulators_is_refused_by_name():
    cfg = preset("default")
    op, pool, ep, params, _ = _case(SHAPES[0], 0)
    with pytest.raises(ScheduleError, match="weights as a constant"):
        compile_conv2d(cfg, op, ep, pool=pool, **{**params, "weight": None})
    residual = dataclasses.replace(ep, residual=True)
    with pytest.raises(ScheduleError, match="residual"):
        compile_conv2d(cfg, op, residual, pool=pool, **params)
    zero_padded = dataclasses.replace(pool, pad_value=0)
    with pytest.raises(ScheduleError, match="padding holds 0"):
        compile_conv2d(cfg, op, ep, pool=zero_padded, **params)
    overlapping = MaxPool2d(2, 40, op.oh, op.ow, kernel=3, stride=1, pad_value=-128)
    with pytest.raises(ScheduleError, match="share 2 rows"):
        compile_conv2d(cfg, op, ep, pool=overlapping, **params)
    other = dataclasses.replace(pool, h=pool.h - 1)
    with pytest.raises(ScheduleError, match="is not the conv's output"):
        compile_conv2d(cfg, op, ep, pool=other, **params)
    with pytest.raises(ScheduleError, match="must be the pool's stride 2 times a divisor"):
        bad = ConvSchedule(1, 1, 3, 4, LoopOrder.OC_OUTER, True, 2)
        compile_conv2d(cfg, op, ep, pool=pool, schedule=bad, **params)
    with pytest.raises(ScheduleError, match="loop order oc_outer"):
        bad = ConvSchedule(1, 1, 2, 4, LoopOrder.SPATIAL_OUTER, True, 2)
        compile_conv2d(cfg, op, ep, pool=pool, schedule=bad, **params)
    with pytest.raises(ScheduleError, match="follows a conv2d without a residual"):
        Computation(op, residual, pool=pool)


def test_a_window_maximum_left_out_is_caught_by_the_dataflow_rule():
    cfg = preset("default")
    op, pool, ep, params, _ = _case(SHAPES[0], 0)
    comp = compile_conv2d(cfg, op, ep, pool=pool, **params)
    low, s = comp.mapped, comp.schedule
    from tilecraft.compiler.operator.params import check_params

    lowered = lower_conv(cfg, low, s, check_params(cfg, low, **params), "pooled")
    maxima = [k for k, x in enumerate(lowered.insns) if isinstance(x, Alu) and x.op == AluOp.MAX]
    insns = [x for k, x in enumerate(lowered.insns) if k != maxima[len(maxima) // 2]]
    tokens = insert_tokens(cfg, insns, lowered.uops, lowered.uop_region)
    broken = lowered.builder.build(tokens, computation=comp.program.computation, schedule=s)
    with pytest.raises(VerifyError, match="dataflow: .*pooled output"):
        verify(broken)


def test_a_pooled_program_says_what_it_computes_and_survives_saving(tmp_path):
    from tilecraft.runtime.program import Program

    cfg = preset("default")
    op, pool, ep, params, rng = _case(SHAPES[0], 0)
    program = compile_conv2d(cfg, op, ep, pool=pool, **params).program
    comp = program.computation
    assert comp.pool == pool and comp.output_shape == pool.output_shape
    assert comp.describe().endswith(f"then {pool.describe()}")
    conv, pooling = comp.stages()  # as separate kernels run it: the conv, then its pool
    assert conv.pool is None and pooling.op == pool and pooling.epilogue is None
    loaded = Program.load(program.save(tmp_path / "pooled.npz"))
    assert loaded.computation == comp
    ok, message, *_ = _run(loaded, rng)
    assert ok, message
