"""The GEMM core's depthwise mode (DEPTHWISE, configs with `depthwise_window`): its semantics
against a loop per output, tap and lane; its cycles on the model; its errors."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft.errors import AccessError, EncodingError, IllegalInstructionError
from tilecraft.hw.config import preset
from tilecraft.hw.isa import Depthwise, Load, MemId, isa_for
from tilecraft.hw.timing import Timing, busy_cycles

from harness import run

CONFIGS = [("default", 3), ("1x8x8", 3), ("2x16x16", 3), ("default", 5), ("1x8x8", 7)]
INP_AT = 0  # DRAM bytes of the plane, then the weights
WGT_AT = 1 << 14


def _program(cfg, rng, rows, cols, sy, sx, inp_base=3, wgt_base=1, acc_base=7):
    """A plane and weights loaded, one DEPTHWISE over them; (instructions, data, plane, taps)."""
    b, lanes, passes = cfg.batch, cfg.block_in, cfg.depthwise_passes
    plane = rng.integers(-128, 128, (rows * cols, b, lanes), dtype=np.int8)
    taps = rng.integers(-128, 128, (passes, lanes, lanes), dtype=np.int8)
    wgt_elem = WGT_AT // cfg.elem_bytes("wgt")
    insns = [
        Load(
            mem=MemId.INP,
            sram_base=inp_base,
            dram_base=0,
            y_size=1,
            x_size=rows * cols,
            x_stride=rows * cols,
        ),
        Load(
            mem=MemId.WGT,
            sram_base=wgt_base,
            dram_base=wgt_elem,
            y_size=1,
            x_size=passes,
            x_stride=passes,
            push_next=True,
        ),
        Depthwise(
            acc_base=acc_base,
            inp_base=inp_base,
            wgt_base=wgt_base,
            in_rows=rows,
            in_cols=cols,
            stride_y=sy,
            stride_x=sx,
            pop_prev=True,
        ),
    ]
    return insns, {INP_AT: plane, WGT_AT: taps}, plane, taps


def _naive(cfg, plane, taps, rows, cols, sy, sx):
    """Output (oy, ox), batch row b, lane c: the window's taps of lane c, one at a time."""
    k = cfg.depthwise_window
    weights = taps.astype(np.int64).transpose(1, 0, 2).reshape(cfg.block_out, -1)
    oh, ow = (rows - k) // sy + 1, (cols - k) // sx + 1
    out = np.zeros((oh * ow, cfg.batch, cfg.block_out), np.int64)
    for oy in range(oh):
        for ox in range(ow):
            for b in range(cfg.batch):
                for c in range(cfg.block_out):
                    total = 0
                    for ky in range(k):
                        for kx in range(k):
                            pixel = (oy * sy + ky) * cols + ox * sx + kx
                            total += int(plane[pixel, b, c]) * int(weights[c, ky * k + kx])
                    out[oy * ow + ox, b, c] = total
    return out


@pytest.mark.parametrize("name,window", CONFIGS)
@pytest.mark.parametrize("stride", [(1, 1), (2, 2), (1, 2), (2, 1)])
def test_depthwise_matches_a_loop_per_tap(name, window, stride):
    cfg = preset(name).with_depthwise_mode(window)
    rng = np.random.default_rng(window * 10 + stride[0] * 3 + stride[1])
    rows, cols = window + int(rng.integers(0, 6)), window + int(rng.integers(0, 7))
    insns, data, plane, taps = _program(cfg, rng, rows, cols, *stride)
    report, machine, _ = run(cfg, insns, data)
    want = _naive(cfg, plane, taps, rows, cols, *stride)
    np.testing.assert_array_equal(machine.acc[7 : 7 + len(want)], want)
    assert machine.acc[7 + len(want)].any() == 0  # nothing written past the outputs
    assert report.gemm_uops == len(want) * cfg.depthwise_passes


def test_depthwise_writes_its_outputs_afresh():
    cfg = preset("default").with_depthwise_mode(3)
    rng = np.random.default_rng(1)
    insns, data, plane, taps = _program(cfg, rng, 4, 5, 1, 1)
    twice = insns + [Depthwise(acc_base=7, inp_base=3, wgt_base=1, in_rows=4, in_cols=5)]
    _, machine, _ = run(cfg, twice, data)
    np.testing.assert_array_equal(machine.acc[7:13], _naive(cfg, plane, taps, 4, 5, 1, 1))


@pytest.mark.parametrize("name", ["default", "1x8x8"])
def test_its_cycles_are_the_windows_rows_of_each_column_read_in_turn(name):
    cfg = preset(name).with_depthwise_mode(3)
    t = Timing.from_config(cfg)
    row = Depthwise(
        acc_base=0, inp_base=0, wgt_base=0, in_rows=10, in_cols=12, stride_y=2, stride_x=1
    ).row()
    # 4 output rows, each reading 3 rows of each of the plane's 12 columns; an output's array
    # passes (its tap groups, each for both lanes of a packed multiplier pair) run under the
    # next column's reads, holding them past 3; the last output's after the last read
    assert t.dw_passes == {"default": 2, "1x8x8": 4}[name]
    held = max(t.dw_passes - 3, 0) * 4 * 10
    want = t.insn_overhead + 4 * 3 * 12 + held + t.dw_passes + t.dw_depth
    assert busy_cycles(t, row) == want
    # on the model: the same instruction, alone after its loads, takes its busy cycles
    rng = np.random.default_rng(2)
    insns, data, _, _ = _program(cfg, rng, 10, 12, 2, 1)
    alone, _, _ = run(
        cfg, insns[:2] + [insns[2].with_flags(pop_prev=False)], data, check_races=False
    )
    loads, _, _ = run(cfg, insns[:2], data, check_races=False)
    assert alone.stages["compute"].busy_cycles - loads.stages["compute"].busy_cycles == want


def test_a_config_without_the_mode_refuses_it_by_name():
    cfg = preset("default")
    insn = Depthwise(acc_base=0, inp_base=0, wgt_base=0, in_rows=3, in_cols=3)
    with pytest.raises(
        EncodingError,
        match=r"DEPTHWISE, but config 1x16x16\S* has no "
        r"depthwise mode.*depthwise_window > 0",
    ):
        run(cfg, [insn])
    assert "DEPTHWISE" not in {op.name for op in isa_for(cfg).formats}


@pytest.mark.parametrize(
    "name,fields,error,message",
    [
        (
            "default",
            dict(in_rows=2, in_cols=5),
            IllegalInstructionError,
            r"plane 2x5 .* at least the 3x3",
        ),
        ("default", dict(stride_x=0), IllegalInstructionError, r"stride \(1, 0\).*one of \(1, 2\)"),
        ("default", dict(stride_y=3), IllegalInstructionError, r"stride \(3, 1\).*one of \(1, 2\)"),
        ("default", dict(inp_base=2047), AccessError, r"inp rows \[2047, 2072\) are outside"),
        ("default", dict(acc_base=2046), AccessError, r"acc rows \[2046, 2055\) are outside"),
        # two weight elements a channel block's taps on 8 lanes: the second past the buffer
        ("1x8x8", dict(wgt_base=1023), AccessError, r"wgt rows \[1023, 1025\) are outside"),
    ],
)
def test_bad_planes_and_ranges_are_named(name, fields, error, message):
    cfg = preset(name).with_depthwise_mode(3)
    values = dict(acc_base=0, inp_base=0, wgt_base=0, in_rows=5, in_cols=5) | fields
    with pytest.raises(error, match=message):
        run(cfg, [Depthwise(**values)])


def test_the_knob_is_checked_and_keeps_older_configs_as_they_were():
    from tilecraft.errors import ConfigError

    cfg = preset("default")
    assert "depthwise_window" not in cfg.to_dict()
    twin = cfg.with_depthwise_mode(3)
    assert twin.tag.endswith("_dw3") and twin.arch_digest != cfg.arch_digest
    assert (
        twin.depthwise_passes == 1 and preset("1x8x8").with_depthwise_mode(3).depthwise_passes == 2
    )
    with pytest.raises(ConfigError, match="odd window side 3, 5 or 7, not 4"):
        cfg.replace(depthwise_window=4)
    with pytest.raises(ConfigError, match="needs BLOCK_IN == BLOCK_OUT.*not 16 and 8"):
        preset("1x16x8").with_depthwise_mode(3)
