"""The direct convolution: float32 within 1e-5 of a float64 reference, int8 bit-exact with
`ops.reference.conv2d` (epilogues, residuals, zero-point padding, more terms than one exact
float chunk holds), over random shapes, strides and kernels."""

from dataclasses import replace

import numpy as np
import pytest
from tiers import slow

from tilecraft.compiler.llvm.kernels.conv import EXACT_TERMS, Conv2d
from tilecraft.compiler.llvm.kernels.dot_conv import DotConv2d, dot_form, for_target
from tilecraft.compiler.llvm.targets import AARCH64, ARMV7, NVPTX, X86_64, host
from tilecraft.errors import KernelError
from tilecraft.ops import reference as R
from tilecraft.ops.operators import Conv2d as ConvOp
from tilecraft.ops.operators import Epilogue, Multiplier


def float_conv(x, w, stride, pads, bias=None):
    t, left, b, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, b), (left, r)))
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))
    y = np.einsum("nchwij,ocij->nohw", win[:, :, :: stride[0], :: stride[1]], w)
    return y if bias is None else y + bias[None, :, None, None]


def _geometry(rng):
    k = int(rng.choice([1, 3, 5, 7]))
    s = int(rng.integers(1, 3))
    p = int(rng.integers(0, k // 2 + 1))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 24)), *map(int, rng.integers(k, 30, 2)))
    return shape, int(rng.integers(1, 30)), (k, k), (s, s), (p, p, p, p)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_float32_conv_matches_float64_reference(jit, seed):
    rng = np.random.default_rng(seed)
    shape, oc, kernel, stride, pads = _geometry(rng)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((oc, shape[1], *kernel)).astype(np.float32)
    bias = rng.standard_normal(oc).astype(np.float32)
    got = jit.kernel(Conv2d(shape, oc, kernel, stride, pads, bias=True, relu=True))(x, w, bias)
    want = np.maximum(float_conv(x, w, stride, pads, bias), 0)
    np.testing.assert_allclose(
        got,
        want,
        rtol=1e-5,
        atol=1e-5 * np.abs(want).max(),
        err_msg=f"seed {seed}: {shape} -> {oc}, {kernel} {stride}",
    )


EPILOGUES = [
    Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=12, relu=True, offset=2),
    Epilogue(acc_bounds=True, bias=True, multiplier=Multiplier.CHANNEL, shift=8),
    Epilogue(bias=True, multiplier=Multiplier.CHANNEL, pre_shift=6, shift=9, residual=True),
    Epilogue(multiplier=Multiplier.TENSOR, shift=14, residual=True, relu=True, offset=-7),
]


def _dot_products(*args, **kwargs):
    """The dot-product record in this CPU's form and tile."""
    return DotConv2d(*args, **kwargs, form=dot_form(host()) or "vnni", rows=host().tile_rows)


def _int8_records(jit):
    """The int8 conv records this machine builds: the float datapath's, and the integer dot
    products' where the CPU has them (skipped, with the reason, where it has none)."""
    return [
        Conv2d,
        pytest.param(
            _dot_products,
            marks=pytest.mark.skipif(
                not dot_form(host()), reason="this CPU has no integer dot products (VNNI, NEON)"
            ),
        ),
    ]


@pytest.mark.parametrize("record", _int8_records(None), ids=["float-datapath", "dot-products"])
@pytest.mark.parametrize("seed", [0, 1, *(slow(s) for s in range(2, 8))])
def test_int8_conv_is_bit_exact(jit, seed, record):
    rng = np.random.default_rng(seed)
    shape, oc, kernel, stride, pads = _geometry(rng)
    ep = EPILOGUES[seed % len(EPILOGUES)]
    pad_value = int(rng.integers(-128, 128)) if seed % 2 else 0
    spec = record(shape, oc, kernel, stride, pads, "int8", epilogue=ep, pad_value=pad_value)
    tensors = {
        "x": rng.integers(-128, 128, shape).astype(np.int8),
        "weight": rng.integers(-128, 128, (oc, shape[1], *kernel)).astype(np.int8),
        "bias": rng.integers(-5000, 5000, oc).astype(np.int32),
        "multiplier": rng.integers(1, 200, 1 if ep.multiplier == Multiplier.TENSOR else oc).astype(
            np.int32
        ),
        "multiplier2": rng.integers(1, 50, oc).astype(np.int32),
        "acc_lo": rng.integers(-40000, -100, oc).astype(np.int32),
        "acc_hi": rng.integers(100, 40000, oc).astype(np.int32),
        "residual": rng.integers(-128, 128, spec.out_shape).astype(np.int8),
    }
    names = [b.name for b in spec.buffers() if b.role == "in"]
    got = jit.kernel(spec)(*[tensors[n] for n in names])
    op = ConvOp(
        n=shape[0],
        ic=shape[1],
        h=shape[2],
        w=shape[3],
        oc=oc,
        kernel=kernel,
        stride=stride,
        pad=pads[:2],
        pad_value=pad_value,
    )
    params = {n: tensors[n] for n in names[2:]}
    want = R.conv2d(op, ep, tensors["x"], tensors["weight"], **params)
    assert np.array_equal(got, want), f"seed {seed}: {spec}"


@pytest.mark.parametrize("record", _int8_records(None), ids=["float-datapath", "dot-products"])
def test_int8_sums_past_one_exact_float_chunk(jit, record):
    """3x3 x 300 channels: 2,700 products of -128 * -128, far past 2**24 in one float sum;
    on dot products, -128 biased to 0 and the whole sum in the weight-sum correction."""
    shape, oc = (1, 300, 5, 6), 7
    spec = record(shape, oc, (3, 3), (1, 1), (1, 1, 1, 1), "int8", epilogue=Epilogue(shift=20))
    assert spec.chunk * 9 <= EXACT_TERMS < 300 * 9
    x = np.full(shape, -128, np.int8)
    w = np.full((oc, 300, 3, 3), -128, np.int8)
    op = ConvOp(n=1, ic=300, h=5, w=6, oc=oc, kernel=(3, 3), stride=(1, 1), pad=(1, 1))
    assert np.array_equal(jit.kernel(spec)(x, w), R.conv2d(op, Epilogue(shift=20), x, w))


def test_the_int32_sums_wrap_as_the_reference_does(jit):
    """A sum past 2**31 wraps in the reference's int32 accumulator; both records wrap alike
    (the dot products' biased sum and its correction wrap too)."""
    shape, oc = (1, 15000, 3, 3), 2
    x = np.full(shape, 127, np.int8)
    w = np.full((oc, 15000, 3, 3), 127, np.int8)
    op = ConvOp(n=1, ic=15000, h=3, w=3, oc=oc, kernel=(3, 3), stride=(1, 1), pad=(1, 1))
    want = R.conv2d(op, Epilogue(shift=24), x, w)
    assert 9 * 15000 * 127 * 127 > 2**31 and want.min() < 0  # the centre's sum wrapped
    for record in (Conv2d, _dot_products) if dot_form(host()) else (Conv2d,):
        spec = record(shape, oc, (3, 3), (1, 1), (1, 1, 1, 1), "int8", epilogue=Epilogue(shift=24))
        assert np.array_equal(jit.kernel(spec)(x, w), want), spec


def test_the_dot_product_record_is_chosen_where_the_target_has_them():
    spec = Conv2d((1, 8, 6, 6), 4, (3, 3), dtype="int8")
    for t in (X86_64, NVPTX):  # x86-64-v3 (AVX2 only), a GPU: none
        assert for_target(spec, t) is spec and dot_form(t) is None
    for t, paired in ((ARMV7, True), (AARCH64, False)):  # the boards' A9 and A53: NEON's
        want = DotConv2d(**spec.__dict__, form="neon", rows=t.tile_rows, paired=paired)
        assert for_target(spec, t) == want  # widening products, the A9's taps in pairs
    wide = replace(
        X86_64, cpu="icelake-server", features="+avx512f,+avx512vnni", vector_width=16, tile_rows=8
    )
    assert for_target(spec, wide) == DotConv2d(**spec.__dict__, form="vnni", rows=8)
    assert dot_form(replace(X86_64, features="+avxvnni")) == "vnni"
    float_spec = Conv2d((1, 8, 6, 6), 4, (3, 3))
    assert for_target(float_spec, wide) is float_spec  # float32 stays on the float datapath


def test_the_dot_product_record_refuses_a_target_without_its_form():
    from tilecraft.compiler.llvm.build import module_ir

    with pytest.raises(KernelError, match="vnni dot-product conv2d needs VNNI .* target x86_64"):
        module_ir([DotConv2d((1, 8, 6, 6), 4, (3, 3))], X86_64)
    with pytest.raises(
        KernelError,
        match="neon dot-product conv2d needs ARM NEON; target x86_64 .* has no dot products",
    ):
        module_ir([DotConv2d((1, 8, 6, 6), 4, (3, 3), form="neon")], X86_64)
    with pytest.raises(KernelError, match="dot-product conv2d is int8, not float32"):
        DotConv2d((1, 8, 6, 6), 4, (3, 3), dtype="float32")
    with pytest.raises(KernelError, match="form 'sve'; valid: vnni, neon"):
        DotConv2d((1, 8, 6, 6), 4, (3, 3), form="sve")
    with pytest.raises(KernelError, match="tile has 1-16 rows, not 0"):
        DotConv2d((1, 8, 6, 6), 4, (3, 3), rows=0)
    with pytest.raises(KernelError, match="paired taps add 16-bit products .* vnni form has"):
        DotConv2d((1, 8, 6, 6), 4, (3, 3), paired=True)
    with pytest.raises(KernelError, match="offset input replaces .* not int8 offset 3"):
        Conv2d(
            (1, 8, 6, 6), 4, (3, 3), dtype="int8", epilogue=Epilogue(offset=3), offset_input=True
        )
    with pytest.raises(KernelError, match="offset input replaces .* not float32 offset 0"):
        Conv2d((1, 8, 6, 6), 4, (3, 3), offset_input=True)


@pytest.mark.parametrize(
    "cpu, features, width, register",
    [
        ("icelake-server", "+avx512f,+avx512bw,+avx512vl,+avx512vnni", 16, "%zmm"),
        ("alderlake", "+avxvnni", 8, "%ymm"),  # AVX-VNNI: the VEX form, no AVX-512
    ],
)
def test_the_dot_products_are_vnni_instructions(cpu, features, width, register):
    """What a VNNI CPU would run, read from the assembly (no such CPU needed): every tap's
    multiply-adds are vpdpbusd on full registers, none on the float unit."""
    from tilecraft.compiler.llvm.build import assembly

    t = replace(X86_64, cpu=cpu, features=features, vector_width=width)
    lines = assembly([DotConv2d((1, 16, 8, 8), 8, (3, 3))], t).splitlines()
    dots = [line for line in lines if "vpdpbusd" in line]
    assert dots and all(register in line for line in dots), dots[:3]
    assert ("{vex}" in dots[0]) == (width == 8)
    assert not [line for line in lines if "vfmadd" in line]


@pytest.mark.parametrize(
    "t, multiply, accumulate",
    [(ARMV7, "vmull.s8", "vpadal.s16"), (AARCH64, "smull", "sadalp")],
    ids=["armv7", "aarch64"],
)
def test_the_dot_products_are_neon_widening_instructions(t, multiply, accumulate):
    """The boards' kernels, from the assembly: 8 products of bytes in 16 bits, added pairwise
    into the int32 lanes, as many of each; no float multiply-add, no conversion."""
    from tilecraft.compiler.llvm.build import assembly

    spec = DotConv2d((1, 16, 8, 8), 8, (3, 3), form="neon")
    ops = [line.split()[0] for line in assembly([spec], t).splitlines() if line.startswith("\t")]
    assert ops.count(multiply) == ops.count(accumulate) >= 9 * 4 * 2  # taps x rows x vectors
    assert not {"vmla.f32", "fmla", "vcvt.f32.s32", "scvtf"} & set(ops)
    # paired: the single words' loop, and the pairs', whose second products accumulate in
    # 16 bits (vmlal.s8 / smlal) before the one widening add
    paired = replace(spec, paired=True, rows=t.tile_rows)
    ops = [line.split()[0] for line in assembly([paired], t).splitlines() if line.startswith("\t")]
    pairs = ops.count(multiply.replace("mull", "mlal"))
    assert pairs >= 9 * t.tile_rows * 2 and ops.count(multiply) == ops.count(accumulate)
    assert ops.count(accumulate) == 2 * pairs  # as many single taps as pairs: one loop each


def test_the_a9s_scheduling_option_is_its_own():
    """The source-order scheduling the A9's kernels are emitted with changes its code (fewer
    spills) and is set for that emission alone: the same core without the option gets the
    same code before and after one (LLVM's options are the process's)."""
    from tilecraft.compiler.llvm.build import assembly

    spec = DotConv2d((1, 16, 8, 8), 8, (3, 3), form="neon")
    latency = replace(ARMV7, source_order=False)  # LLVM's default scheduling for the A9
    before = assembly([spec], latency)
    assert assembly([spec], ARMV7) != before
    assert assembly([spec], latency) == before


@pytest.mark.parametrize("record", _int8_records(None), ids=["float-datapath", "dot-products"])
@pytest.mark.parametrize("channels, stride", [(3, 2), (7, 1), (6, 3)])
def test_rows_of_several_vectors_with_a_last_partial_word(jit, record, channels, stride):
    """Rows wide enough for the word copy's vectors, channels that leave a last word partly
    empty (its lanes the padding, under zero weights): the first conv of a network's shape."""
    shape, oc, kernel = (1, channels, 11, 70), 9, (5, 5)
    rng = np.random.default_rng(channels)
    ep = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=10, offset=-5)
    spec = record(shape, oc, kernel, (stride, stride), (2, 2, 2, 2), "int8", epilogue=ep,
                  pad_value=-100)  # fmt: skip
    x = rng.integers(-128, 128, shape).astype(np.int8)
    w = rng.integers(-128, 128, (oc, channels, *kernel)).astype(np.int8)
    bias = rng.integers(-3000, 3000, oc).astype(np.int32)
    mult = rng.integers(1, 90, oc).astype(np.int32)
    op = ConvOp(n=1, ic=channels, h=11, w=70, oc=oc, kernel=kernel, stride=(stride, stride),
                pad=(2, 2), pad_value=-100)  # fmt: skip
    want = R.conv2d(op, ep, x, w, bias=bias, multiplier=mult)
    assert np.array_equal(jit.kernel(spec)(x, w, bias, mult), want)


@pytest.mark.parametrize("form", ["vnni", "neon"])
@pytest.mark.parametrize("shape, rows", [((13, 7, 3, 3), 4), ((8, 8, 1, 1), 8), ((5, 3, 7, 7), 6)])
def test_weights_packed_in_numpy_as_the_kernel_packs_them(jit, form, shape, rows):
    """DotWeights.pack (the cpu device's: no kernel to compile) gives the packing kernel's
    words, weight sums that wrap and wpair, for weights with and without -128, channels and
    rows that leave padding."""
    from tilecraft.compiler.llvm.kernels.dot_conv import DotWeights

    record = DotWeights(shape, form, rows)
    kernel = jit.kernel(record)
    rng = np.random.default_rng(rows)
    for low in (-128, -127):
        w = rng.integers(low, 128, shape).astype(np.int8)
        w.flat[-1] = low
        if form == "vnni":
            w[0] = 127  # 128 x 127 x 63 taps: a first channel's sum past 2**20
        want, got = kernel(w), record.pack(w)
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
        assert form == "vnni" or got[1].tolist() == [int(low > -128)]
    with pytest.raises(KernelError, match=r"dot weights take int8 \(13, 7, 3, 3\), not int16"):
        DotWeights((13, 7, 3, 3), form).pack(np.zeros((13, 7, 3, 3), np.int16))
