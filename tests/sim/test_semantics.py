"""Each instruction of the behavioral simulator against a naive numpy reference, per config (a
STORE through the requantization unit: tests/sim/test_semantics_requant.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft.hw.config import preset
from tilecraft.hw.isa import Alu, AluOp, Gemm, Load, MemId, Store, Uop, decode, encode, isa_for
from tilecraft.sim import semantics
from tilecraft.sim.machine import Machine

from harness import naive_alu, naive_loop, run, wrap

CONFIGS = ["default", "1x8x8", "2x16x16", "1x32x32"]


@pytest.fixture(params=CONFIGS)
def cfg(request):
    return preset(request.param)


def _elems(cfg, kind, count, rng):
    shape = {
        "inp": (count, cfg.batch, cfg.block_in),
        "wgt": (count, cfg.block_out, cfg.block_in),
        "acc": (count, cfg.batch, cfg.block_out),
    }[kind]
    dtype = np.int32 if kind == "acc" else np.int8
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape, dtype=dtype)


PADS = [
    (0, 0, 0, 0),
    (1, 0, 0, 0),
    (0, 1, 0, 0),
    (0, 0, 1, 0),
    (0, 0, 0, 1),
    (2, 3, 1, 2),
    (15, 15, 15, 15),
]


@pytest.mark.parametrize("pads", PADS)
@pytest.mark.parametrize("kind", ["inp", "wgt", "acc"])
def test_load_2d_strided_with_padding(cfg, kind, pads):
    rng = np.random.default_rng(hash((kind, pads)) % 2**32)
    y0, y1, x0, x1 = pads
    ys, xs, stride = 3, 2, 5
    if cfg.depth(kind) < (ys + y0 + y1) * (xs + x0 + x1) + 3:
        ys, y0, y1, x0, x1 = 1, min(y0, 2), min(y1, 2), min(x0, 2), min(x1, 2)
    src = _elems(cfg, kind, ys * stride, rng)
    eb = cfg.elem_bytes(kind)
    mem = {"inp": MemId.INP, "wgt": MemId.WGT, "acc": MemId.ACC}[kind]
    insn = Load(
        mem=mem,
        sram_base=3,
        dram_base=4096 // eb,
        y_size=ys,
        x_size=xs,
        x_stride=stride,
        y_pad0=y0,
        y_pad1=y1,
        x_pad0=x0,
        x_pad1=x1,
    )
    _, m, _ = run(cfg, [insn], {4096: src})
    rows = src.reshape((ys, stride) + src.shape[1:])[:, :xs]
    expected = np.pad(rows, [(y0, y1), (x0, x1)] + [(0, 0)] * (src.ndim - 1))
    n = expected.shape[0] * expected.shape[1]
    got = m.sram(kind)[3 : 3 + n]
    np.testing.assert_array_equal(got, expected.reshape((n,) + src.shape[1:]))
    assert not m.sram(kind)[:3].any() and not m.sram(kind)[3 + n :].any()


def _decoded(cfg, insn) -> dict:
    table = decode(isa_for(cfg), encode(isa_for(cfg), [insn]))
    return dict(zip(table.dtype.names, table.tolist()[0]))


@pytest.mark.parametrize("stride", [1, 3, 5])  # rows that overlap, abut, leave gaps
@pytest.mark.parametrize("kind", ["inp", "acc"])
def test_load_rows_up_to_the_end_of_dram(cfg, kind, stride):
    """A LOAD whose last row ends at DRAM's last byte (no stride's worth of bytes after it)
    reads each row as the per-row loop does, whether its rows overlap or not."""
    rng = np.random.default_rng(stride)
    ys, xs, lead = 3, 3, 7
    elems = _elems(cfg, kind, (ys - 1) * stride + xs, rng)
    eb = cfg.elem_bytes(kind)
    dram = np.zeros(lead * eb + elems.nbytes, np.uint8)
    dram[lead * eb :] = elems.view(np.uint8).reshape(-1)
    m = Machine(cfg, dram)
    mem = {"inp": MemId.INP, "acc": MemId.ACC}[kind]
    load = Load(mem=mem, sram_base=2, dram_base=lead, y_size=ys, x_size=xs, x_stride=stride)
    semantics.load(m, _decoded(cfg, load))
    expected = np.concatenate([elems[k * stride : k * stride + xs] for k in range(ys)])
    np.testing.assert_array_equal(m.sram(kind)[2 : 2 + ys * xs], expected)
    assert not m.sram(kind)[:2].any() and not m.sram(kind)[2 + ys * xs :].any()


@pytest.mark.parametrize("stride", [3, 5])
def test_store_rows_up_to_the_end_of_dram(cfg, stride):
    """A STORE whose last row ends at DRAM's last byte writes each row and leaves the bytes
    between rows as they were."""
    ys, xs, eb = 3, 3, cfg.elem_bytes("out")
    acc = np.arange(ys * xs * cfg.batch * cfg.block_out, dtype=np.int32) % 251 - 125
    dram = np.full(((ys - 1) * stride + xs) * eb, 0x5A, np.uint8)
    m = Machine(cfg, dram)
    m.acc[4 : 4 + ys * xs] = acc.reshape((ys * xs,) + m.acc.shape[1:])
    store = Store(sram_base=4, dram_base=0, y_size=ys, x_size=xs, x_stride=stride)
    semantics.store(m, _decoded(cfg, store))
    rows = acc.astype(np.int8).view(np.uint8).reshape(ys, xs * eb)
    expected = np.full_like(dram, 0x5A)
    for k in range(ys):
        expected[k * stride * eb : (k * stride + xs) * eb] = rows[k]
    np.testing.assert_array_equal(dram, expected)


def test_sync_only_load_moves_nothing(cfg):
    insn = Load(
        mem=MemId.INP, sram_base=0, dram_base=0, y_size=4, x_size=0, x_stride=4, y_pad0=2, x_pad0=2
    )
    rng = np.random.default_rng(1)
    report, m, _ = run(cfg, [insn], {0: _elems(cfg, "inp", 16, rng)})
    assert not m.inp.any()
    assert report.dram_bytes["inp"] == 0


def test_uop_load_decodes(cfg):
    uops = [Uop(dst=5, src=7, wgt=3), Uop(dst=cfg.depth("acc") - 1, src=0, wgt=1)]
    insn = Load(
        mem=MemId.UOP, sram_base=10, dram_base=1024 // cfg.uop_bytes, y_size=1, x_size=2, x_stride=2
    )
    _, m, _ = run(cfg, [insn], uops=uops, uop_offset=1024)
    assert m.uop_dst[10:12].tolist() == [5, cfg.depth("acc") - 1]
    assert m.uop_src[10:12].tolist() == [7, 0]
    assert m.uop_wgt[10:12].tolist() == [3, 1]


def _setup_gemm(cfg, rng, n_inp=24, n_wgt=12, n_acc=24):
    """Loads random inp/wgt/acc tiles and returns (insns, data, arrays)."""
    inp, wgt, acc = (
        _elems(cfg, "inp", n_inp, rng),
        _elems(cfg, "wgt", n_wgt, rng),
        _elems(cfg, "acc", n_acc, rng),
    )
    offs = {"inp": 0, "wgt": 8192, "acc": 8192 + 16 * 1024}
    insns = [
        Load(mem=MemId.INP, sram_base=0, dram_base=0, y_size=1, x_size=n_inp, x_stride=n_inp),
        Load(
            mem=MemId.WGT,
            sram_base=0,
            dram_base=offs["wgt"] // cfg.elem_bytes("wgt"),
            y_size=1,
            x_size=n_wgt,
            x_stride=n_wgt,
            push_next=True,
        ),
        Load(
            mem=MemId.ACC,
            sram_base=0,
            dram_base=offs["acc"] // cfg.elem_bytes("acc"),
            y_size=1,
            x_size=n_acc,
            x_stride=n_acc,
        ),
    ]
    data = {offs["inp"]: inp, offs["wgt"]: wgt, offs["acc"]: acc}
    return insns, data, (inp, wgt, acc)


def _uop_load(n):
    return Load(mem=MemId.UOP, sram_base=0, dram_base=60000 // 4, y_size=1, x_size=n, x_stride=n)


LOOPS = [
    # (iter_out, iter_in, dst_out, dst_in, src_out, src_in, wgt_out, wgt_in)
    (1, 1, 0, 0, 0, 0, 0, 0),
    (3, 2, 4, 1, 6, 1, 0, 0),  # distinct dst per step
    (3, 4, 2, 0, 3, 1, 0, 0),  # reduction: the inner loop hits the same dst
    (2, 3, 1, 2, 2, 1, 1, 2),  # weights move with the loop
    (4, 2, 0, 0, 1, 1, 2, 1),  # everything accumulates into the micro-ops' dst
    (2, 2, 1, 2, 2, 1, 0, 0),  # the steps' dst rows one range, not in order (0, 2, 1, 3)
]


def _check_gemm(cfg, rng, uops, row, extreme=False):
    """Run one GEMM over random tiles and compare with the naive per-step loop; `extreme`:
    operands near 127, so the sums grow with every product."""
    assert cfg.uop_bytes == 4  # _uop_load addresses 4-byte micro-ops
    insns, data, (inp, wgt, acc) = _setup_gemm(cfg, rng)
    if extreme:
        inp[...] = np.where(rng.random(inp.shape) < 0.9, 127, 125)
        wgt[...] = np.where(rng.random(wgt.shape) < 0.9, 127, -128)
    program = [_uop_load(len(uops)), *insns, Gemm(pop_prev=True, **row)]
    _, m, _ = run(cfg, program, data, uops=uops, uop_offset=60000)
    expected = acc.astype(np.int64).copy()
    for d, s, w in naive_loop(row, uops):
        expected[d] += inp[s].astype(np.int64) @ wgt[w].astype(np.int64).T
    np.testing.assert_array_equal(m.acc[: len(acc)], wrap(expected, cfg.acc_bits))


@pytest.mark.parametrize("loop", LOOPS)
def test_gemm_loop_matches_naive(cfg, loop):
    rng = np.random.default_rng(sum(loop))
    io, ii, do, di, so, si, wo, wi = loop
    uops = [
        Uop(dst=int(rng.integers(0, 4)), src=int(rng.integers(0, 4)), wgt=int(rng.integers(0, 3)))
        for _ in range(3)
    ]
    row = dict(
        uop_bgn=0,
        uop_end=3,
        iter_out=io,
        iter_in=ii,
        dst_out=do,
        dst_in=di,
        src_out=so,
        src_in=si,
        wgt_out=wo,
        wgt_in=wi,
    )
    _check_gemm(cfg, rng, uops, row)


@pytest.mark.parametrize("seed", range(8))
def test_gemm_micro_ops_sharing_a_dst_match_naive(cfg, seed):
    """Micro-ops whose weights stay put are summed in one matmul per dst they share: groups of
    one, of several, and in any order of first appearance give the per-step loop's sums."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 7))
    heads = rng.integers(0, 3, size=n)
    uops = [Uop(int(d), int(rng.integers(0, 4)), int(rng.integers(0, 3))) for d in heads]
    io, ii = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    row = dict(
        uop_bgn=0,
        uop_end=n,
        iter_out=io,
        iter_in=ii,
        dst_out=int(rng.integers(0, 3)),
        dst_in=int(rng.integers(0, 2)),
        src_out=int(rng.integers(0, 3)),
        src_in=int(rng.integers(0, 2)),
        wgt_out=0,
        wgt_in=0,
    )
    _check_gemm(cfg, rng, uops, row)


def test_gemm_many_micro_ops_into_one_dst_stay_exact(cfg):
    """Past `exact_uops` micro-ops summed in one matmul, a float32 sum of int8 products would
    round: large products of one sign over eight times that many still give the exact sums."""
    n = 8 * Machine(cfg, np.zeros(1, np.uint8)).exact_uops
    rng = np.random.default_rng(11)
    uops = [Uop(dst=0, src=int(rng.integers(0, 4)), wgt=int(rng.integers(0, 3))) for _ in range(n)]
    row = dict(uop_bgn=0, uop_end=n, iter_out=2, iter_in=1, dst_out=1, dst_in=0, src_out=1)
    row.update(src_in=0, wgt_out=0, wgt_in=0)
    _check_gemm(cfg, rng, uops, row, extreme=True)


def test_gemm_little_weight_reuse_path(cfg):
    """Every step with its own weight tile takes the batched path; still exact."""
    uops = [Uop(dst=0, src=0, wgt=0), Uop(dst=0, src=1, wgt=1)]
    row = dict(
        uop_bgn=0,
        uop_end=2,
        iter_out=4,
        iter_in=1,
        dst_out=1,
        dst_in=0,
        src_out=2,
        src_in=0,
        wgt_out=2,
        wgt_in=0,
    )
    _check_gemm(cfg, np.random.default_rng(7), uops, row)


def test_gemm_accumulator_wraps(cfg):
    """Many max-magnitude products overflow int32 and wrap, as the hardware adder does."""
    b, bi, bo = cfg.batch, cfg.block_in, cfg.block_out
    inp = np.full((1, b, bi), -128, np.int8)
    wgt = np.full((1, bo, bi), -128, np.int8)
    acc = np.full((1, b, bo), 2**31 - 1000, np.int32)
    data = {0: inp, 8192: wgt, 24576: acc}
    insns = [
        Load(mem=MemId.INP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1),
        Load(
            mem=MemId.WGT,
            sram_base=0,
            dram_base=8192 // cfg.elem_bytes("wgt"),
            y_size=1,
            x_size=1,
            x_stride=1,
            push_next=True,
        ),
        Load(
            mem=MemId.ACC,
            sram_base=0,
            dram_base=24576 // cfg.elem_bytes("acc"),
            y_size=1,
            x_size=1,
            x_stride=1,
        ),
        _uop_load(1),
        Gemm(uop_bgn=0, uop_end=1, iter_out=5, pop_prev=True),
    ]
    _, m, _ = run(cfg, insns, data, uops=[Uop(0, 0, 0)], uop_offset=60000)
    expected = wrap(np.int64(2**31 - 1000) + 5 * bi * 128 * 128, 32)
    assert (m.acc[0] == expected).all() and expected < 0


def test_gemm_reset(cfg):
    rng = np.random.default_rng(3)
    insns, data, (_, _, acc) = _setup_gemm(cfg, rng)
    program = [
        _uop_load(2),
        *insns,
        Gemm(reset=True, uop_bgn=0, uop_end=2, iter_out=3, dst_out=5, pop_prev=True),
    ]
    _, m, _ = run(cfg, program, data, uops=[Uop(1, 0, 0), Uop(2, 0, 0)], uop_offset=60000)
    cleared = sorted({1 + 5 * i for i in range(3)} | {2 + 5 * i for i in range(3)})
    assert not m.acc[cleared].any()
    keep = [i for i in range(len(acc)) if i not in cleared]
    np.testing.assert_array_equal(m.acc[keep], acc[keep])


ALU_VALUES = np.array([0, 1, -1, 7, -8, 127, -128, 2**31 - 1, -(2**31), 65537, -40000, 33, -33])


@pytest.mark.parametrize("op", list(AluOp))
@pytest.mark.parametrize("use_imm", [True, False])
def test_alu_ops_match_naive(cfg, op, use_imm):
    rng = np.random.default_rng(int(op) * 2 + use_imm)
    b, bo = cfg.batch, cfg.block_out
    acc = rng.choice(ALU_VALUES, size=(16, b, bo)).astype(np.int32)
    if op == AluOp.SHR:  # operands as shift amounts too: in range, and out of range (wrapping)
        acc[8:] = rng.integers(-40, 40, size=(8, b, bo))
    imm = {AluOp.SHR: -3, AluOp.MUL: -300, AluOp.ADD: 32767}.get(op, -5)
    insns = [
        Load(mem=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=16, x_stride=16),
        _uop_load(2),
        Alu(
            op=op, use_imm=use_imm, imm=imm, uop_bgn=0, uop_end=2, iter_out=4, dst_out=1, src_out=1
        ),
    ]
    uops = [Uop(dst=0, src=8), Uop(dst=4, src=12)]
    _, m, _ = run(cfg, insns, {0: acc}, uops=uops, uop_offset=60000)
    expected = acc.astype(np.int64).copy()
    row = dict(
        uop_bgn=0, uop_end=2, iter_out=4, iter_in=1, dst_out=1, dst_in=0, src_out=1, src_in=0
    )
    for d, s, _ in naive_loop(row, uops):
        for idx in np.ndindex(expected.shape[1:]):
            operand = imm if use_imm else int(expected[s][idx])
            expected[d][idx] = naive_alu(op.name, int(expected[d][idx]), operand, 32)
    np.testing.assert_array_equal(m.acc[:16], expected)


@pytest.mark.parametrize("amount", [0, 1, 5, 31, 32, 63, -3])
def test_shr_by_an_immediate_matches_naive(cfg, amount):
    """SHR by an immediate: right shifts within the lane (0..31), and the low bits' wrap (32
    reads as -32, 63 as -1: left shifts)."""
    rng = np.random.default_rng(amount + 64)
    acc = rng.choice(ALU_VALUES, size=(8, cfg.batch, cfg.block_out)).astype(np.int32)
    insns = [
        Load(mem=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=8, x_stride=8),
        _uop_load(2),
        Alu(op=AluOp.SHR, use_imm=True, imm=amount, uop_bgn=0, uop_end=2, iter_out=3, dst_out=2),
    ]
    uops = [Uop(dst=0, src=0), Uop(dst=1, src=0)]
    _, m, _ = run(cfg, insns, {0: acc}, uops=uops, uop_offset=60000)
    expected = acc.astype(np.int64).copy()
    for d in range(6):
        for idx in np.ndindex(acc.shape[1:]):
            expected[d][idx] = naive_alu("SHR", int(expected[d][idx]), amount, 32)
    np.testing.assert_array_equal(m.acc[:8], expected)


def test_alu_reads_earlier_micro_op_results(cfg):
    """A micro-op reading a row an earlier micro-op of the same instruction wrote sees the new
    value (running prefix sum), as sequential hardware would."""
    b, bo = cfg.batch, cfg.block_out
    acc = np.ones((4, b, bo), np.int32)
    uops = [Uop(dst=1, src=0), Uop(dst=2, src=1), Uop(dst=3, src=2)]
    insns = [
        Load(mem=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=4, x_stride=4),
        _uop_load(3),
        Alu(op=AluOp.ADD, uop_bgn=0, uop_end=3),
    ]
    _, m, _ = run(cfg, insns, {0: acc}, uops=uops, uop_offset=60000)
    assert [int(m.acc[i].flat[0]) for i in range(4)] == [1, 2, 3, 4]


@pytest.mark.parametrize("use_imm", [True, False])
def test_alu_rows_of_one_range_out_of_order(cfg, use_imm):
    """Steps writing rows that make one range, but not in order (2, 4, 3, 5), each get their
    own operand: no step may be paired with its neighbour's row."""
    b, bo = cfg.batch, cfg.block_out
    acc = np.arange(12 * b * bo, dtype=np.int32).reshape(12, b, bo) * 3 + 5
    uops = [Uop(dst=d, src=s) for d, s in ((2, 8), (4, 9), (3, 10), (5, 11))]
    insns = [
        Load(mem=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=12, x_stride=12),
        _uop_load(4),
        Alu(op=AluOp.SHR, use_imm=use_imm, imm=1, uop_bgn=0, uop_end=4),
        Alu(op=AluOp.ADD, use_imm=use_imm, imm=7, uop_bgn=0, uop_end=4),
    ]
    _, m, _ = run(cfg, insns, {0: acc}, uops=uops, uop_offset=60000)
    expected = acc.astype(np.int64).copy()
    for name, imm in (("SHR", 1), ("ADD", 7)):
        for u in uops:
            for idx in np.ndindex(acc.shape[1:]):
                operand = imm if use_imm else int(expected[u.src][idx])
                expected[u.dst][idx] = naive_alu(name, int(expected[u.dst][idx]), operand, 32)
    np.testing.assert_array_equal(m.acc[:12], expected)


@pytest.mark.parametrize("seed", range(8))
def test_alu_steps_in_any_order_match_the_sequential_loop(cfg, seed):
    """Rows written in increasing order or not, written twice or not, read before or after
    another step writes them: every step sees the rows as the steps before it left them."""
    rng = np.random.default_rng(200 + seed)
    b, bo = cfg.batch, cfg.block_out
    acc = rng.integers(-1000, 1000, size=(12, b, bo)).astype(np.int32)
    n, step = int(rng.integers(1, 5)), 1
    uops = [Uop(dst=int(rng.integers(0, 6)), src=int(rng.integers(0, 11))) for _ in range(n)]
    if seed % 2:  # every step a row of its own, in increasing order: the binary-search path
        n = min(n, 3)
        uops, step = [Uop(dst=2 * u, src=int(rng.integers(0, 11))) for u in range(n)], 2 * n
    row = dict(
        uop_bgn=0, uop_end=n, iter_out=2, iter_in=1, dst_out=step, dst_in=0, src_out=1, src_in=0
    )
    insns = [
        Load(mem=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=12, x_stride=12),
        _uop_load(n),
        Alu(op=AluOp.ADD, uop_bgn=0, uop_end=n, iter_out=2, dst_out=step, src_out=1),
    ]
    _, m, _ = run(cfg, insns, {0: acc}, uops=uops, uop_offset=60000)
    expected = acc.astype(np.int64).copy()
    for d, s, _ in naive_loop(row, uops):
        expected[d] = wrap(expected[d] + expected[s], 32)
    np.testing.assert_array_equal(m.acc[:12], expected)


@pytest.mark.parametrize(
    "value, amount, expected",
    [
        (-17, 3, -3),
        (1, -4, 16),
        (5, -32, 0),
        (-1, 31, -1),
        (2**30, -1, -(2**31)),
        (9, 64, 9),
        (9, 33, -(2**31)),
    ],  # 33 reads as -31: a left shift by 31
)
def test_shr_rules(value, amount, expected):
    """SHR: arithmetic right, negative = left, amount from the low 6 bits read as signed."""
    assert naive_alu("SHR", value, amount, 32) == expected
    cfg = preset("default")
    acc = np.full((1, 1, 16), value, np.int32)
    insns = [
        Load(mem=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1),
        _uop_load(1),
        Alu(op=AluOp.SHR, use_imm=True, imm=amount, uop_bgn=0, uop_end=1),
    ]
    _, m, _ = run(cfg, insns, {0: acc}, uops=[Uop(0, 0)], uop_offset=60000)
    assert (m.acc[0] == expected).all()


def test_store_truncates_to_out_width(cfg):
    b, bo = cfg.batch, cfg.block_out
    values = np.array([300, -129, 127, -128, 256, -1, 2**31 - 1, -(2**31)])
    acc = np.resize(values, (6, b, bo)).astype(np.int32)
    out_off = 40960
    insns = [
        Load(mem=MemId.ACC, sram_base=0, dram_base=0, y_size=1, x_size=6, x_stride=6),
        Store(
            sram_base=0,
            dram_base=out_off // cfg.elem_bytes("out"),
            y_size=2,
            x_size=3,
            x_stride=5,
            pop_prev=True,
            push_prev=True,
        ),
    ]
    # the ACC load is on compute; hand its result to the store with a token
    insns[0] = insns[0].with_flags(push_next=True)
    insns.append(
        Load(mem=MemId.UOP, sram_base=0, dram_base=0, y_size=0, x_size=0, x_stride=0, pop_next=True)
    )
    _, _, dram = run(cfg, insns, {0: acc})
    eb = cfg.elem_bytes("out")
    out = dram[out_off : out_off + 10 * eb].view(np.int8).reshape(2, 5, b, bo)
    expected = acc.astype(np.int8).reshape(2, 3, b, bo)  # numpy int casts truncate
    np.testing.assert_array_equal(out[:, :3], expected)
    assert not out[:, 3:].any()
    assert int(np.int32(300).astype(np.int8)) == 44


@pytest.mark.parametrize("iters", [(0, 1), (1, 0), (0, 0)])
@pytest.mark.parametrize("wgt_out", [0, 1])
def test_a_gemm_with_a_loop_extent_of_zero_does_nothing(cfg, iters, wgt_out):
    """No step, as a reset's or an ALU's zero extent (it was an IndexError in the semantics
    when the weights stayed put)."""
    rng = np.random.default_rng(7)
    uops = [Uop(dst=1, src=2, wgt=0), Uop(dst=1, src=3, wgt=1)]
    row = dict(uop_bgn=0, uop_end=2, iter_out=iters[0], iter_in=iters[1], dst_out=1, dst_in=0)
    row.update(src_out=1, src_in=0, wgt_out=wgt_out, wgt_in=0)
    _check_gemm(cfg, rng, uops, row)  # the naive loop takes no step either
