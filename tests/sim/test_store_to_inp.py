"""A requantizing STORE into INP (configs with `store_to_inp`): the unit's rows written into
INP rows instead of DRAM, where a GEMM reads them; its pace (the unit's, no DRAM); INP's one
write port taken in turns with the load stage's INP LOADs; what is refused, and where."""

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
from tilecraft.hw.isa import Finish, Gemm, Load, MemId, Store, Uop, encode, isa_for, row_insn
from tilecraft.hw.timing import Timing
from tilecraft.ops.requant import float32_requantize
from tilecraft.runtime import get_device
from tilecraft.runtime.buffers import Role

from harness import requant_rows, requant_store, run

OUT_OFF = 40960  # where a STORE to DRAM writes (nothing is there before)


def _cfg(name="default"):
    return preset(name).replace(requant_lanes=8).with_store_to_inp()


def _inp_store(cfg, rows: int, inp_base: int, y_size: int = 1, x_stride=None, **flags):
    """Load the data rows and a parameter set, then STORE `y_size` rows of `rows` elements
    into INP from `inp_base`, `x_stride` apart; the compute stage waits for the rows (what a
    GEMM reading them would pop)."""
    stride = rows if x_stride is None else x_stride
    return requant_store(
        cfg, rows, inp_base, rows * y_size, y_size, x_stride=stride, to_inp=True, **flags
    )


@pytest.mark.parametrize("name", ["default", "2x16x16"])
def test_a_store_into_inp_writes_the_units_rows_there_and_nothing_to_dram(name):
    """Row y's elements go to INP rows dram_base + y * x_stride + x, each the unit's
    requantization (numpy's float32 arithmetic, `float32_requantize`); DRAM is untouched."""
    cfg = preset(name).replace(requant_lanes=16 if name == "2x16x16" else 8).with_store_to_inp()
    rng = np.random.default_rng(3)
    pix, bands, base, stride = 10, 3, 700, 14
    acc, (bias, scale, zero, lo, hi) = requant_rows(cfg, rng, pix * bands)
    report, m, dram = run(cfg, _inp_store(cfg, pix, base, bands, stride), {0: acc})
    v = acc[: pix * bands].astype(np.int64) + bias
    want = float32_requantize(v, scale, zero, lo, hi, channel_axis=2).reshape(bands, pix, -1)
    for y in range(bands):
        at = slice(base + y * stride, base + y * stride + pix)
        np.testing.assert_array_equal(m.inp[at].reshape(pix, -1), want[y].reshape(pix, -1))
        np.testing.assert_array_equal(m.inp_f[at], m.inp[at])  # what a GEMM multiplies
    assert not m.inp[base + pix : base + stride].any()  # the gaps between rows are left alone
    assert report.dram_bytes.get("out", 0) == 0
    assert not dram[OUT_OFF : OUT_OFF + 4096].any()


def _chain(cfg, seed: int, pix: int = 12):
    """A program: accumulator rows through the unit into INP rows, a GEMM over them with one
    weight block, the products STOREd (narrowed) to DRAM; (program, acc rows, weights, the
    unit's per-channel values)."""
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    rng = np.random.default_rng(seed)
    acc, values = requant_rows(cfg, rng, pix)
    w = rng.integers(-128, 128, (1, bo, bi)).astype(np.int8)
    pb = ProgramBuilder(cfg, "store-into-inp")
    acc_buf = pb.buffer("acc", Role.CONSTANT, acc.shape, np.int32, data=acc)
    w_buf = pb.buffer("w", Role.CONSTANT, w.shape, np.int8, data=w)
    out = pb.buffer("out", Role.OUTPUT, (pix, b, bo), np.int8)
    dst, inp = cfg.acc_bank_rows + 64, 300  # the GEMM in the other bank: no wait on the unit's
    pb.place_uops([Uop(dst, 0, 0), Uop(dst, inp, 0)])
    n = pix + 3
    insns = [
        Load(
            mem=MemId.ACC, sram_base=0, dram_base=pb.elem(acc_buf, "acc"), y_size=1, x_size=n,
            x_stride=n, push_next=True,
        ),
        Load(
            mem=MemId.WGT, sram_base=0, dram_base=pb.elem(w_buf, "wgt"), y_size=1, x_size=1,
            x_stride=1, push_next=True,
        ),
        Store(
            sram_base=0, dram_base=inp, y_size=1, x_size=pix, x_stride=pix, requant=True,
            param_base=pix, to_inp=True, pop_prev=True, push_prev=True,
        ),
        pb.load_uops(),
        Gemm(reset=True, uop_bgn=0, uop_end=1, iter_out=pix, dst_out=1),
        Gemm(
            uop_bgn=1, uop_end=2, iter_out=pix, dst_out=1, src_out=1, pop_prev=True,
            pop_next=True, push_next=True,
        ),
        Store(
            sram_base=dst, dram_base=pb.elem(out, "out"), y_size=1, x_size=pix, x_stride=pix,
            pop_prev=True, push_prev=True,
        ),
        Finish(pop_next=True),
    ]  # fmt: skip
    return pb.build(insns), acc, w, values


@pytest.mark.parametrize("name", ["default", "1x8x8"])
def test_a_gemm_reads_what_a_store_put_into_inp(name):
    """The chain a fused block runs (docs/DEPTHWISE.md): the unit's int8 rows in INP are the
    GEMM's operand, exactly as if they had gone through DRAM and an INP LOAD; the program
    verifies, and the simulator matches numpy."""
    cfg = _cfg(name)
    program, acc, w, (bias, scale, zero, lo, hi) = _chain(cfg, 5)
    assert verify(program)["tokens"]
    got = get_device("sim").run(program, {}).outputs["out"]
    pix = len(acc) - 3
    x = float32_requantize(acc[:pix].astype(np.int64) + bias, scale, zero, lo, hi, channel_axis=2)
    want = np.einsum("pbc,oc->pbo", x.astype(np.int64), w[0].astype(np.int64))
    np.testing.assert_array_equal(got, want.astype(np.int8))  # STORE truncates to int8


def _without_token(program):
    """The chain without the store's token to the GEMM (its push and the GEMM's pop)."""
    insns = [row_insn(r) for r in program.table()]
    k = next(i for i, x in enumerate(insns) if isinstance(x, Store) and x.to_inp)
    g = next(i for i, x in enumerate(insns) if isinstance(x, Gemm) and not x.reset)
    insns[k] = insns[k].with_flags(push_prev=False)
    insns[g] = insns[g].with_flags(pop_next=False)
    return program.replace(insns=encode(isa_for(program.config), insns))


def test_a_gemm_not_ordered_after_the_store_into_inp_is_a_raw_hazard():
    """Without the store's token the GEMM may read the INP rows before the unit writes them:
    the verifier names the rule and both instructions, and the simulator catches the race."""
    program = _without_token(_chain(_cfg(), 6, pix=40)[0])  # a store longer than the GEMM waits
    with pytest.raises(VerifyError, match=r"raw") as info:
        verify(program)
    assert info.value.rule == "raw" and "STORE" in str(info.value)
    with pytest.raises(HazardError, match="touches inp row 300"):
        get_device("sim").run(program, {})


def test_an_inp_load_and_a_store_into_inp_on_the_same_rows_need_an_order():
    """A LOAD into the INP rows the STORE writes, with no token between the two stages: which
    write lands last is not the program's to say, so the verifier refuses it (`waw`)."""
    program, *_ = _chain(_cfg(), 7)
    insns = [row_insn(r) for r in program.table()]
    extra = Load(mem=MemId.INP, sram_base=300, dram_base=0, y_size=1, x_size=4, x_stride=4)
    insns.insert(1, extra)  # before the weights, whose token orders it before FINISH
    with pytest.raises(VerifyError) as info:
        verify(program.replace(insns=encode(isa_for(program.config), insns)))
    assert info.value.rule == "waw"


def _slices(cfg, insns, data) -> dict[int, tuple[int, int]]:
    """Each instruction's (start, end) cycle on the model."""
    report, _, _ = run(cfg, insns, data, trace=True)
    clock = cfg.clock_mhz
    return {
        e["args"]["index"]: (round(e["ts"] * clock), round((e["ts"] + e["dur"]) * clock))
        for e in report.trace["traceEvents"]
        if e["ph"] == "X"
    }


@pytest.mark.parametrize("lanes", [8, 4])
@pytest.mark.parametrize("latency", [32, 200])
def test_a_store_into_inp_takes_its_units_pace_and_no_dram(lanes, latency):
    """From its start: the bank's grant (or the unit's checks), the parameter rows, a row
    every `passes` cycles, the unit's latency after a row's last pass into INP's write port,
    the store's tail (sim/requant_pace.py `last_inp_write`); the DRAM's latency plays no part."""
    cfg = preset("default").replace(requant_lanes=lanes, dram_latency=latency).with_store_to_inp()
    t = Timing.from_config(cfg)
    passes = 16 // lanes
    for rows in (24, 48):
        acc, _ = requant_rows(cfg, np.random.default_rng(2), rows)
        start, end = _slices(cfg, _inp_store(cfg, rows, 100), {0: acc})[1]
        first = max(t.hold_grant, t.requant_start) + 3 - passes
        assert end - start == first + rows * passes + t.requant_latency + passes + t.store_tail


def test_an_inp_load_and_a_store_into_inp_take_turns_on_inps_write_port():
    """With no token between them, a STORE into INP waits for the INP LOAD in flight, and an
    INP LOAD for the STORE into INP in flight (their rows apart: no hazard, one port). The
    compute stage lets one of them go a few cycles before the other, either way round."""
    cfg = _cfg()
    rows = 200
    acc, _ = requant_rows(cfg, np.random.default_rng(2), rows)
    big = Load(
        mem=MemId.INP, sram_base=1000, dram_base=0, y_size=1, x_size=600, x_stride=600,
        pop_next=True, push_next=True,
    )  # fmt: skip
    idle = dict(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0)
    load_acc, store, wait_store = _inp_store(cfg, rows, 100)
    for first in ("load", "store"):
        tokens = ("push_prev", "push_next") if first == "load" else ("push_next", "push_prev")
        insns = [
            load_acc.with_flags(**{"push_next": False, tokens[0]: True}),
            Load(**idle).with_flags(**{tokens[1]: True}),  # the other may go a little later
            big,
            store,
            wait_store,
            Load(**idle, pop_prev=True),  # FINISH after the INP LOAD
        ]
        slices = _slices(cfg, insns, {0: acc})
        (a, b) = (slices[2], slices[3]) if first == "load" else (slices[3], slices[2])
        assert a[0] < b[0], f"the {first} did not go first"
        assert a[1] <= b[0] <= a[1] + 4, f"{first} first: {a} then {b}"


def test_what_a_store_into_inp_refuses():
    """The field on a config without the path (the encoder names the knob), the path without
    the unit's requantization, rows past INP's end; and the config without the unit."""
    cfg = _cfg()
    acc, _ = requant_rows(cfg, np.random.default_rng(1), 8)
    plain = preset("default").replace(requant_lanes=8)
    with pytest.raises(EncodingError, match="no path from STORE into INP.*store_to_inp > 0"):
        encode(isa_for(plain), _inp_store(plain, 8, 100))
    insns = _inp_store(cfg, 8, 100)
    insns[1] = Store(**{**insns[1].__dict__, "requant": False})
    with pytest.raises(IllegalInstructionError, match="STORE into INP without requant"):
        run(cfg, insns, {0: acc})
    with pytest.raises(AccessError, match="STORE into INP index 2049 is outside the inp"):
        run(cfg, _inp_store(cfg, 8, cfg.depth("inp") - 6, y_size=1), {0: acc})
    with pytest.raises(ConfigError, match="store_to_inp = 1 needs the requantization unit"):
        preset("default").with_store_to_inp()


def test_a_knob_the_rtl_lacks_is_refused_on_every_way_to_verilog(monkeypatch):
    """The RTL builds the path (the rtl tier runs it: tests/sim/test_rtl_store_to_inp.py); a
    knob listed as unbuilt (`RTL_UNBUILT`, what a new unit starts as) is refused by every way
    to Verilog, naming it, where the RTL would ignore its field: silently wrong."""
    from tilecraft.boards.flows.verilog import export_verilog
    from tilecraft.hw import config

    check_rtl(_cfg())
    monkeypatch.setattr(config, "RTL_UNBUILT", {"store_to_inp": "STORE's path into INP"})
    with pytest.raises(ConfigError, match=r"store_to_inp \(STORE's path into INP\)"):
        check_rtl(_cfg())
    with pytest.raises(ConfigError, match="which the RTL does not build yet"):
        export_verilog(_cfg(), "never-made")
    check_rtl(preset("default").replace(requant_lanes=8))
    assert _cfg().tag.endswith("_rq8_si")
    assert "store_to_inp" not in preset("default").to_dict()  # older configs' digests stay
