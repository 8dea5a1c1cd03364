"""The requantization unit's residual add (configs with `requant_residual`): a requantizing
STORE with `residual` adds INP row residual_base + i to its data row i after the rounding; the
rows read through INP's own read port, so the STORE takes the cycles it takes without; the
hazards the INP read makes between the load and store stages; what is refused, and where."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.operator.builder import ProgramBuilder
from tilecraft.errors import (
    AccessError,
    ConfigError,
    EncodingError,
    HazardError,
    IllegalInstructionError,
    VerifyError,
)
from tilecraft.hw.config import check_rtl, preset
from tilecraft.hw.isa import Finish, Load, MemId, Store, encode, isa_for
from tilecraft.ops.requant import float32_requantize
from tilecraft.runtime import get_device
from tilecraft.runtime.buffers import Role

from harness import requant_rows, run

RES_OFF = 32768  # DRAM bytes: the residual rows
OUT_OFF = 40960  # the STORE's output


def _cfg(name="default"):
    lanes = 16 if name == "2x16x16" else 8
    return preset(name).replace(requant_lanes=lanes).with_requant_residual()


def _residual_store(cfg, rows: int, res_base: int, y_size: int = 1, **store):
    """LOAD `rows * y_size` residual rows into INP from `res_base` (load stage), the
    accumulator rows and their parameter set (compute stage, after the residual's token), a
    requantizing STORE with the residual of `y_size` rows of `rows` elements to OUT_OFF, and a
    compute no-op that waits for it."""
    n = rows * y_size
    b = cfg.batch
    idle = dict(sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0)
    fields = dict(residual=True, residual_base=res_base, requant=True, param_base=n)
    return [
        Load(
            mem=MemId.INP, sram_base=res_base, dram_base=RES_OFF // (b * cfg.block_in), y_size=1,
            x_size=n, x_stride=n, push_next=True,
        ),
        Load(
            mem=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=n + 3, x_stride=n + 3,
            pop_prev=True, push_next=True,
        ),
        Store(
            sram_base=0, dram_base=OUT_OFF // (b * cfg.block_out), y_size=y_size, x_size=rows,
            x_stride=rows, pop_prev=True, push_prev=True, **{**fields, **store},
        ),
        Load(mem=MemId.UOP, **idle, pop_next=True),
    ]  # fmt: skip


def _data(cfg, rows: int, seed: int):
    rng = np.random.default_rng(seed)
    acc, values = requant_rows(cfg, rng, rows)
    res = rng.integers(-128, 128, (rows, cfg.batch, cfg.block_in)).astype(np.int8)
    return acc, res, values


@pytest.mark.parametrize("name", ["default", "1x8x8", "2x16x16"])
def test_a_residual_store_adds_its_inp_rows_after_the_rounding(name):
    """Each output element is rint(fl32(acc + bias) * scale) + residual + zero point, clipped
    (`float32_requantize` with the residual: numpy's float32 arithmetic), over transfers of one
    row and of several."""
    cfg = _cfg(name)
    for pix, bands in ((20, 1), (7, 3)):
        rows = pix * bands
        acc, res, (bias, scale, zero, lo, hi) = _data(cfg, rows, pix)
        _, _, dram = run(cfg, _residual_store(cfg, pix, 600, bands), {0: acc, RES_OFF: res})
        v = acc[:rows].astype(np.int64) + bias
        want = float32_requantize(
            v, scale, zero, lo, hi, channel_axis=2, residual=res.astype(np.int64)
        )
        size = rows * cfg.batch * cfg.block_out
        got = dram[OUT_OFF : OUT_OFF + size].view(np.int8).reshape(want.shape)
        np.testing.assert_array_equal(got, want)
        without = float32_requantize(v, scale, zero, lo, hi, channel_axis=2)
        inside = slice(0, rows // 2)  # requant_rows' rows inside the clip, mostly
        assert (got[inside] != without[inside]).mean() > 0.8  # the residual made a difference


def test_a_residual_store_takes_the_cycles_of_one_without():
    """The residual comes through INP's own read port, beside the unit's accumulator reads:
    the STORE's cycles are those of the same STORE without it."""
    cfg = _cfg()
    acc, res, _ = _data(cfg, 48, 1)
    cycles = []
    for residual in (True, False):
        insns = _residual_store(cfg, 48, 600, residual=residual)
        report, _, _ = run(cfg, insns, {0: acc, RES_OFF: res})
        cycles.append(report.cycles)
    assert cycles[0] == cycles[1]


def _unordered(cfg, rows: int):
    """The residual's LOAD with no token before the STORE: it starts as the STORE does, once
    the accumulator rows are in (a token from the compute stage), and the compute stage takes
    its token only after the STORE (so that FINISH still waits for it)."""
    load_res, load_acc, store, wait = _residual_store(cfg, rows, 600)
    idle = dict(sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0)
    return [
        load_acc.with_flags(pop_prev=False, push_prev=True),
        load_res.with_flags(pop_next=True),
        store,
        wait,
        Load(mem=MemId.UOP, **idle, pop_prev=True),
    ]


def test_a_residual_not_ordered_after_its_load_is_a_raw_hazard():
    """Without the load-to-compute token that the STORE's own token follows, the unit may read
    the INP rows before the LOAD writes them: the verifier names the rule and both stages, and
    the simulator catches the race."""
    cfg = _cfg()
    rows, loaded = 8, 1400  # a STORE that starts long before the residual's LOAD ends
    acc, _, _ = _data(cfg, rows, 2)
    res = np.ones((loaded, cfg.batch, cfg.block_in), np.int8)
    insns = _unordered(cfg, rows)
    pb = ProgramBuilder(cfg, "unordered-residual")
    a = pb.buffer("acc", Role.CONSTANT, acc.shape, np.int32, data=acc)
    r = pb.buffer("res", Role.CONSTANT, res.shape, np.int8, data=res)
    at = pb.elem(r, "inp")
    insns[0] = Load(**{**insns[0].__dict__, "dram_base": pb.elem(a, "acc")})
    insns[1] = Load(**{**insns[1].__dict__, "dram_base": at, "x_size": loaded, "x_stride": loaded})
    out = pb.buffer("out", Role.OUTPUT, (rows, cfg.batch, cfg.block_out), np.int8)
    insns[2] = Store(**{**insns[2].__dict__, "dram_base": pb.elem(out, "out")})
    program = pb.build([*insns, Finish()])
    with pytest.raises(VerifyError, match="raw") as info:
        verify(program)
    assert "STORE" in str(info.value) and "LOAD" in str(info.value)
    with pytest.raises(HazardError, match="inp row"):
        get_device("sim").run(program, {})


def test_what_a_residual_store_refuses():
    """The field on a config without the add (the encoder names the knob), a residual without
    the unit's requantization, rows past INP's end; the knob without the unit, on blocks that
    are not square, or beside STORE into INP on the presets' buffers (the word's room)."""
    cfg = _cfg()
    acc, res, _ = _data(cfg, 8, 3)
    plain = preset("default").replace(requant_lanes=8)
    with pytest.raises(EncodingError, match="no requantization unit's residual add.*requant_resid"):
        encode(isa_for(plain), _residual_store(plain, 8, 600))
    insns = _residual_store(cfg, 8, 600)
    insns[2] = Store(**{**insns[2].__dict__, "requant": False})
    with pytest.raises(IllegalInstructionError, match="STORE with residual without requant"):
        run(cfg, insns, {0: acc, RES_OFF: res})
    late = cfg.depth("inp") - 4
    insns = _residual_store(cfg, 8, 600)
    insns[2] = Store(**{**insns[2].__dict__, "residual_base": late})
    with pytest.raises(AccessError, match=f"STORE residual index {late + 7} is outside the inp"):
        run(cfg, insns, {0: acc, RES_OFF: res})
    with pytest.raises(ConfigError, match="requant_residual = 1 needs the requantization unit"):
        preset("default").with_requant_residual()
    with pytest.raises(ConfigError, match="BLOCK_IN == BLOCK_OUT.*not requant_lanes = 8, 16 and 8"):
        preset("1x16x8").replace(requant_lanes=8).with_requant_residual()
    with pytest.raises(ConfigError, match="STORE field residual_base .* does not fit the 128"):
        isa_for(cfg.with_store_to_inp())  # (no room for both in the STORE word)
    check_rtl(cfg)  # the RTL builds it (tests/sim/test_rtl_requant_residual.py)
