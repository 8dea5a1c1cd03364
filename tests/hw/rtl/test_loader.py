"""The LOAD engine against the simulator's LOAD semantics: padding, strides, sub-beat
micro-ops, range errors."""

import numpy as np
import pytest
from amaranth.sim import Simulator
from axi_model import ReadSlave

from tilecraft.hw import regs
from tilecraft.hw.config import preset
from tilecraft.hw.isa import BUFFER_NAMES, Load, MemId, insn_table, isa_for
from tilecraft.hw.rtl.dsp import ECP5_DSP_MODEL
from tilecraft.hw.rtl.loader import LoadEngine
from tilecraft.sim import semantics
from tilecraft.sim.machine import Machine


def run_loads(cfg, targets, loads, dram, seed=0, dsp=None):
    dut = LoadEngine(cfg, targets, dsp)
    srams = {BUFFER_NAMES[t]: {} for t in targets}
    results = []
    base = 0

    async def bench(ctx):
        ctx.set(dut.dram_base, base)
        ctx.set(dut.dram_size, dram.size)
        for insn in loads:
            word = insn_table([insn])[0]
            spec = isa_for(cfg)
            value = 0
            for f in spec.formats[0]:
                value |= (int(word[f.name]) & ((1 << f.width) - 1)) << f.offset
            ctx.set(dut.insn.as_value(), value)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            for _ in range(5000):
                if ctx.get(dut.write.en):
                    name = BUFFER_NAMES[MemId(ctx.get(dut.mem))]
                    bits = dut.elem_bits[MemId(ctx.get(dut.mem))]
                    data = ctx.get(dut.write.data) & ((1 << bits) - 1)
                    srams[name][ctx.get(dut.write.addr)] = data
                done, err = ctx.get(dut.done), ctx.get(dut.error)
                await ctx.tick()
                if done:
                    results.append(err)
                    break
            else:
                raise AssertionError("load never finished")

    slave = ReadSlave(dram, cfg.axi_bytes, latency=5, seed=seed, stall=0.3)

    async def memory(ctx):
        ar, r = dut.read.ar, dut.read.r
        await slave.run(
            ctx,
            {"addr": ar.payload.addr, "len": ar.payload.len, "valid": ar.valid, "ready": ar.ready},
            {"data": r.payload, "valid": r.valid, "ready": r.ready},
            100000,
        )

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_testbench(memory, background=True)
    sim.run()
    return srams, results


def expected(cfg, loads, dram):
    m = Machine(cfg, dram.copy())
    for insn in loads:
        semantics.load(m, insn_table([insn])[0])
    return m


def sram_words(m, name):
    arr = m.sram(name)
    raw = arr.reshape(arr.shape[0], -1)
    return arr, raw


@pytest.mark.parametrize("config", ["default", "1x8x8"])
def test_loads_with_padding_and_strides(config):
    cfg = preset(config)
    rng = np.random.default_rng(3)
    dram = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
    loads = [
        Load(
            mem=MemId.INP,
            sram_base=5,
            dram_base=7,
            y_size=3,
            x_size=4,
            x_stride=9,
            y_pad0=1,
            y_pad1=2,
            x_pad0=2,
            x_pad1=1,
            pad_value=-7,  # an input's zero point, in every lane of the padding
        ),
        Load(
            mem=MemId.WGT,
            sram_base=2,
            dram_base=3,
            y_size=2,
            x_size=2,
            x_stride=5,
            x_pad0=1,
            pad_value=5,
        ),  # weights pad with zeros whatever pad_value says
        Load(
            mem=MemId.INP,
            sram_base=60,
            dram_base=2,
            y_size=2,
            x_size=3,
            x_stride=3,
            y_pad0=1,
            pad_value=127,
        ),
        Load(mem=MemId.INP, sram_base=100, dram_base=0, y_size=1, x_size=40, x_stride=40),
    ]
    srams, errors = run_loads(cfg, (MemId.INP, MemId.WGT), loads, dram)
    assert errors == [0, 0, 0, 0]
    want = expected(cfg, loads, dram)
    assert np.all(want.inp[5 : 5 + 9] == -7) and np.all(want.wgt[2] == 0)  # the padding
    for name in ("inp", "wgt"):
        arr = want.sram(name)
        eb = cfg.elem_bytes(name)
        for addr, value in srams[name].items():
            row = (
                arr[addr].reshape(-1).view(np.uint8)[:eb]
                if arr.dtype.itemsize == 1
                else arr[addr].reshape(-1).astype(np.uint8)
            )
            assert value == int.from_bytes(row.tobytes(), "little"), (name, addr)
        assert len(srams[name]) > 0


def test_micro_ops_narrower_than_a_beat():
    cfg = preset("default")  # 4-byte micro-ops, 8-byte beats
    rng = np.random.default_rng(4)
    dram = rng.integers(0, 256, 1 << 14, dtype=np.uint8)
    loads = [
        Load(mem=MemId.UOP, sram_base=0, dram_base=3, y_size=3, x_size=5, x_stride=7, x_pad0=1),
        Load(mem=MemId.UOP, sram_base=40, dram_base=8, y_size=1, x_size=4, x_stride=4),
    ]
    srams, errors = run_loads(cfg, (MemId.UOP, MemId.ACC), loads, dram)
    assert errors == [0, 0]
    want = expected(cfg, loads, dram)
    for addr, value in srams["uop"].items():
        assert value == int(want.uop_words[addr]), addr


def test_range_errors():
    cfg = preset("default")
    dram = np.zeros(4096, np.uint8)
    loads = [
        Load(
            mem=MemId.INP,
            sram_base=cfg.depth("inp") - 2,
            dram_base=0,
            y_size=1,
            x_size=4,
            x_stride=4,
        ),
        Load(mem=MemId.INP, sram_base=0, dram_base=250, y_size=2, x_size=4, x_stride=4),
        Load(mem=MemId.INP, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0),
    ]
    _, errors = run_loads(cfg, (MemId.INP,), loads, dram)
    assert errors == [regs.ErrorCode.SRAM_RANGE, regs.ErrorCode.DRAM_RANGE, 0]


@pytest.mark.parametrize(
    ("mem", "dram_base", "y_size", "want"),
    [
        (MemId.INP, 248, 2, 0),  # rows 248-251 and 252-255 of 256: up to DRAM's last byte
        (MemId.INP, 249, 2, regs.ErrorCode.DRAM_RANGE),  # one element past it
        (MemId.INP, 244, 3, 0),  # three rows, the last ending at the last byte
        (MemId.INP, 248, 3, regs.ErrorCode.DRAM_RANGE),  # a row past it
        (MemId.INP, (1 << 32) - 4, 1, regs.ErrorCode.DRAM_RANGE),  # past 4 GiB
        (MemId.WGT, 0, 16, 0),  # 256-byte weights: 16 of them fill the 4 KiB
        (MemId.WGT, 1, 16, regs.ErrorCode.DRAM_RANGE),
    ],
)
@pytest.mark.parametrize("dsp", [None, ECP5_DSP_MODEL])  # PLAN's products: `*` or MULT18X18D
def test_dram_range_at_the_boundary(mem, dram_base, y_size, want, dsp):
    """The DRAM check, (dram_base + span) x element bytes > DRAM size, worked out as the span's
    rows part against what the rest leaves, at and one element or row past the end; per
    target, as each has its own element size."""
    cfg = preset("default")
    dram = np.zeros(4096, np.uint8)  # 256 INP elements (16 bytes), 16 WGT ones (256)
    x = 4 if mem == MemId.INP else 1
    load = Load(mem=mem, sram_base=0, dram_base=dram_base, y_size=y_size, x_size=x, x_stride=x)
    _, errors = run_loads(cfg, (MemId.INP, MemId.WGT), [load], dram, dsp=dsp)
    assert errors == [want]


@pytest.mark.parametrize("dsp", [None, ECP5_DSP_MODEL])
def test_random_padded_boxes_match_the_spec(dsp):
    """Padding on every side, rows without data (y_size 0), one-column rows: the data box's
    edges, which the engine tracks in registers as its counters cross them."""
    cfg = preset("1x8x8")
    rng = np.random.default_rng(11)
    dram = rng.integers(0, 256, 1 << 14, dtype=np.uint8)
    loads, base, boxes = [], 0, []
    for _ in range(14):
        y_size, x_size = int(rng.integers(0, 4)), int(rng.integers(1, 6))
        pads = {k: int(rng.integers(0, 4)) for k in ("y_pad0", "y_pad1", "x_pad0", "x_pad1")}
        height = pads["y_pad0"] + y_size + pads["y_pad1"]
        width = pads["x_pad0"] + x_size + pads["x_pad1"]
        loads.append(
            Load(
                mem=MemId.INP,
                sram_base=base,
                dram_base=int(rng.integers(0, 999)),
                y_size=y_size,
                x_size=x_size,
                x_stride=x_size + 3,
                pad_value=-3,
                **pads,
            )
        )
        boxes.append((base, height * width))
        base += height * width
    srams, errors = run_loads(cfg, (MemId.INP,), loads, dram, seed=4, dsp=dsp)
    assert errors == [0] * len(loads)
    want = expected(cfg, loads, dram).inp
    got = srams["inp"]
    assert sorted(got) == [a for b, n in boxes for a in range(b, b + n)]  # every row, once
    for addr, value in got.items():
        assert value == int.from_bytes(want[addr].reshape(-1).view(np.uint8).tobytes(), "little"), (
            addr
        )


@pytest.mark.parametrize(("rows_from_end", "want"), [(4, 0), (3, regs.ErrorCode.SRAM_RANGE)])
@pytest.mark.parametrize("dsp", [None, ECP5_DSP_MODEL])
def test_sram_range_at_the_boundary(rows_from_end, want, dsp):
    """The SRAM check, sram_base + rows written (pads included) > depth, worked out as the rows
    against what the scratchpad leaves: four rows ending at its last one, and one past it."""
    cfg = preset("default")
    load = Load(
        mem=MemId.INP,
        sram_base=cfg.depth("inp") - rows_from_end,
        dram_base=0,
        y_size=1,
        x_size=3,
        x_stride=3,
        x_pad0=1,
    )
    _, errors = run_loads(cfg, (MemId.INP,), [load], np.zeros(4096, np.uint8), dsp=dsp)
    assert errors == [want]
