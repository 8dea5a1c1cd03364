"""A STORE through the requantization unit (configs with `requant_lanes`): onnxruntime's
float32 arithmetic lane by lane, bad parameter rows named, its pace against the DRAM's,
parameters per row, and the one bank it reads."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft.errors import AccessError, IllegalInstructionError
from tilecraft.hw.config import preset
from tilecraft.hw.isa import Load, Store
from tilecraft.hw.isa.requant import pack_clip
from tilecraft.hw.timing import Timing
from tilecraft.ops.requant import float32_requantize

from harness import requant_rows, requant_store, run


def _store_program(cfg, rows: int, out_off: int, param_base: int, y_size=1, loaded=None, **store):
    """`requant_store` to DRAM byte `out_off`."""
    dram = out_off // cfg.elem_bytes("out")
    return requant_store(cfg, rows, dram, param_base, y_size, loaded, **store)


@pytest.mark.parametrize("name, lanes", [("default", 8), ("1x8x8", 8), ("2x16x16", 16)])
def test_a_requantizing_store_is_onnxruntimes_float32_arithmetic(name, lanes):
    """Each lane c: float32(acc + bias[c]) * scale[c] rounded to even, plus the zero point,
    clipped: numpy's float32 (ops.requant.float32_requantize), not the unit's own integers."""
    cfg = preset(name).replace(requant_lanes=lanes)
    rng = np.random.default_rng(4)
    rows, out_off = 24, 40960
    acc, (bias, scale, zero, lo, hi) = requant_rows(cfg, rng, rows)
    _, m, dram = run(cfg, _store_program(cfg, rows, out_off, rows), {0: acc})
    eb = cfg.elem_bytes("out")
    out = dram[out_off : out_off + rows * eb].view(np.int8).reshape(rows, cfg.batch, -1)
    v = acc[:rows].astype(np.int64) + bias
    want = float32_requantize(v, scale, zero, lo, hi, channel_axis=2)
    np.testing.assert_array_equal(out, want)
    assert ((want > lo) & (want < hi)).mean() > 0.2  # not all clipped


@pytest.mark.parametrize(
    "row, value, message",
    [
        (1, 5, r"param row 25: a scale significand below 2\*\*23 \(5\)"),
        (2, None, r"param row 26, lane 0: clip \[10, -3\] is empty"),
    ],
)
def test_bad_requant_parameters_are_named(row, value, message):
    cfg = preset("default").replace(requant_lanes=8)
    acc, _ = requant_rows(cfg, np.random.default_rng(1), 24)
    acc[24 + row] = value if value is not None else pack_clip(0, 10, -3)
    with pytest.raises(IllegalInstructionError, match=message):
        run(cfg, _store_program(cfg, 24, 40960, 24), {0: acc})


def test_requant_param_rows_past_the_accumulator_are_an_access_error():
    cfg = preset("1x8x8").replace(requant_lanes=8)
    acc, _ = requant_rows(cfg, np.random.default_rng(1), 4)
    depth = cfg.depth("acc")
    with pytest.raises(AccessError, match="requant param"):
        run(cfg, _store_program(cfg, 4, 40960, depth - 2), {0: acc})


def _store_cycles(cfg, rows: int, requant: bool = True, per_row: bool = False) -> int:
    """Cycles of a program that loads `rows` accumulator rows and a parameter set for each,
    then STOREs the rows: requantized with one set, or with a set per row (a row of one
    element each), or not."""
    acc, _ = requant_rows(cfg, np.random.default_rng(2), rows)
    acc = np.concatenate([acc[:rows]] + [acc[rows:]] * rows)
    insns = _store_program(cfg, rows, 40960, rows)
    insns[0] = Load(**{**insns[0].__dict__, "x_size": len(acc), "x_stride": len(acc)})
    store = {**insns[1].__dict__, "requant": requant, "param_base": rows if requant else 0}
    if per_row:
        store.update(y_size=rows, x_size=1, x_stride=1, param_per_row=True)
    insns[1] = Store(**store)
    report, _, _ = run(cfg, insns, {0: acc})
    return report.cycles


@pytest.mark.parametrize("lanes", [8, 16, 4])
def test_a_requantizing_store_is_paced_by_the_slower_of_its_unit_and_the_dram(lanes):
    """A unit at the bus's pace or faster (8 or 16 lanes: a 16-channel row in 2 cycles or 1,
    against its 2 beats) hides under the DRAM's latency whatever the rows; one slower (4 lanes:
    4 cycles a row) costs what it takes beyond the DRAM's 2 beats a row and a gap a burst; a
    parameter set per row makes each row `requant_set_gap` cycles longer than its passes
    (sim/requant_pace.py). Each figure as what 24 more rows add."""
    cfg = preset("default").replace(requant_lanes=lanes)
    passes = 16 // lanes
    plain, one_set, per_row = (
        {n: _store_cycles(cfg, n, **kind) for n in (24, 48)}
        for kind in ({"requant": False}, {}, {"per_row": True})
    )
    dram = 24 * 2 + 24 * 2 // cfg.burst_len * Timing.burst_gap
    assert one_set[24] >= plain[24]
    assert one_set[48] - one_set[24] == max(24 * passes, dram) + plain[48] - plain[24] - dram
    assert per_row[48] - per_row[24] == 24 * (passes + Timing.requant_set_gap) + (
        plain[48] - plain[24] - dram
    )


def test_a_requantizing_store_with_parameters_per_row():
    """`param_per_row`: row y of the transfer (here a channel block each) takes the three
    parameter rows from param_base + 3 y."""
    cfg = preset("default").replace(requant_lanes=8)
    rng = np.random.default_rng(8)
    blocks, pix, out_off = 3, 8, 40960
    sets = [requant_rows(cfg, rng, 0) for _ in range(blocks)]
    acc = rng.integers(-(2**20), 2**20, (blocks * pix, 1, 16)).astype(np.int32)
    params = np.concatenate([p for p, _ in sets])
    data = np.concatenate([acc, params])
    insns = _store_program(
        cfg, pix, out_off, blocks * pix, y_size=blocks, loaded=len(data), param_per_row=True
    )
    _, _, dram = run(cfg, insns, {0: data})
    out = dram[out_off : out_off + blocks * pix * 16].view(np.int8).reshape(blocks, pix, 1, 16)
    for k, (_, (bias, scale, zero, lo, hi)) in enumerate(sets):
        v = acc[k * pix : (k + 1) * pix].astype(np.int64) + bias
        want = float32_requantize(v, scale, zero, lo, hi, channel_axis=2)
        np.testing.assert_array_equal(out[k], want, err_msg=f"channel block {k}")


@pytest.mark.parametrize(
    "sram_base, param_base, message",
    [
        (0, 1024 + 5, r"parameter rows 1029..1031 and its data rows \(bank 0\) lie in more than"),
        (1024 - 10, 1024 + 20, r"rows 1014..1037 cross the accumulator's bank boundary"),
    ],
)
def test_a_requantizing_store_reads_one_bank(sram_base, param_base, message):
    """The unit reads a STORE's data and parameter rows through one bank's read port: rows in
    both banks are refused, naming them, as a scratchpad range error (the RTL's SRAM_RANGE; the
    default config's banks are 1,024 rows)."""
    cfg = preset("default").replace(requant_lanes=8)
    assert cfg.acc_bank_rows == 1024
    acc, _ = requant_rows(cfg, np.random.default_rng(1), 24)
    insns = _store_program(cfg, 24, 40960, param_base)
    insns[0] = Load(**{**insns[0].__dict__, "sram_base": sram_base, "x_size": 24, "x_stride": 24})
    insns[1] = Store(**{**insns[1].__dict__, "sram_base": sram_base})
    with pytest.raises(AccessError, match=message):
        run(cfg, insns, {0: acc[:24]}, check_races=False)
