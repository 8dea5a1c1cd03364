"""One compiled kernel for a family of dot-product convs (`DotConv2d.shared_code`, `Jit`): each
member, run on its family's code with its own sizes (`irgen.Dims`), is bit-exact with
`ops.reference.conv2d` and with its own kernel; a family is one symbol, and anything its code
depends on makes another; the JIT shares only a family of two or more."""

from dataclasses import replace

import numpy as np
import pytest
from tiers import slow

from tilecraft.compiler.llvm.jit import Jit
from tilecraft.compiler.llvm.kernels.dot_conv import DotConv2d, dot_form
from tilecraft.compiler.llvm.targets import host
from tilecraft.errors import KernelError
from tilecraft.ops import reference as R
from tilecraft.ops.operators import Conv2d as ConvOp
from tilecraft.ops.operators import Epilogue, Multiplier
from tilecraft.runtime.kernels import NativeKernel

pytestmark = pytest.mark.skipif(
    dot_form(host()) != "vnni", reason="the JIT's dot-product convs need VNNI on this CPU"
)

EPILOGUE = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=12, relu=True, offset=-5)
RESIDUAL = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, pre_shift=6, shift=9, residual=True)

# (kernel, stride, pad): ResNet-18's conv kinds; each family's members differ in batch,
# channels (whole words: the same C % 4), height, width (1 to 33 output columns: every path
# of the output's row copy) and output channels (whole register tiles)
FAMILIES = {
    "3x3 s1": ((3, 3), (1, 1), 1),
    "3x3 s2": ((3, 3), (2, 2), 1),
    "1x1 s2": ((1, 1), (2, 2), 0),
    "7x7 s2": ((7, 7), (2, 2), 3),
}
MEMBERS = [
    (1, 8, 7, 7, 16),
    (2, 4, 14, 9, 8),
    (1, 16, 5, 33, 24),
    (1, 12, 1, 3, 8),
    (1, 4, 20, 17, 16),
]


def _record(shape, oc, kernel, stride, pad, ep, residual=False):
    ep = replace(ep, offset=0)  # the offset an input: a uint8 network's convs share so
    return DotConv2d(
        shape, oc, kernel, stride, (pad,) * 4, "int8", epilogue=ep, pad_value=-3,
        offset_input=True, packed=True, form="vnni", rows=host().tile_rows,
    )  # fmt: skip


def _operands(rng, spec, ep):
    c, oc = spec.shape[1], spec.out_channels
    w = rng.integers(-128, 128, (oc, c, *spec.kernel)).astype(np.int8)
    given = {
        "x": rng.integers(-128, 128, spec.shape).astype(np.int8),
        "bias": rng.integers(-5000, 5000, oc).astype(np.int32),
        "multiplier": rng.integers(1, 200, oc).astype(np.int32),
        "multiplier2": rng.integers(1, 50, oc).astype(np.int32),
        "offset": np.array([ep.offset], np.int32),
        "residual": rng.integers(-128, 128, spec.out_shape).astype(np.int8),
    }
    wq, wsum = spec.weights.pack(w)
    names = [b.name for b in spec.buffers() if b.role == "in"]
    args = [{"wq": wq, "wsum": wsum}.get(n, given.get(n)) for n in names]
    op = ConvOp(
        n=spec.shape[0], ic=c, h=spec.shape[2], w=spec.shape[3], oc=oc, kernel=spec.kernel,
        stride=spec.stride, pad=spec.pads[:2], pad_value=spec.pad_value,
    )  # fmt: skip
    params = {n: given[n] for n in names if n in ("bias", "multiplier", "multiplier2")}
    if ep.residual:
        params["residual"] = given["residual"]
    return args, R.conv2d(op, ep, given["x"], w, **params)


@pytest.mark.parametrize(
    "family", [*FAMILIES][:2] + [slow(f) for f in [*FAMILIES][2:]], ids=lambda f: f
)
@pytest.mark.parametrize("ep", [EPILOGUE, RESIDUAL], ids=["relu", "residual"])
def test_each_member_runs_bit_exact_on_its_familys_code(family, ep):
    kernel, stride, pad = FAMILIES[family]
    rng = np.random.default_rng(len(family))
    jit = Jit(cache=False)
    taps = kernel[0] * kernel[1]  # at most 8 channels of 7x7: the tiles' epilogue inline
    members = [
        _record((n, min(c, 8) if taps > 9 else c, h, w), oc, kernel, stride, pad, ep)
        for n, c, h, w, oc in MEMBERS
    ]
    shared = [m.shared_code(jit.target) for m in members]
    assert len({code.symbol for code, _ in shared}) == 1  # one family, one symbol
    address = jit._address(shared[0][0])  # compiled once, from the first member
    assert jit.built == 1
    for spec, (_, dims) in zip(members, shared):
        args, want = _operands(rng, spec, ep)
        got = NativeKernel(spec.signature(), address, jit._engine, (dims,))(*args)
        assert np.array_equal(got, want), f"{family} {spec.shape} -> {spec.out_channels}"
        assert np.array_equal(jit.kernel(spec)(*args), want)  # its own code agrees


def test_what_the_code_depends_on_makes_another_family():
    t = host()
    base = _record((1, 8, 9, 9), 16, (3, 3), (1, 1), 1, EPILOGUE)
    symbol = base.shared_code(t)[0].symbol
    assert replace(base, shape=(2, 16, 30, 11), out_channels=64).shared_code(t)[0].symbol == symbol
    others = [
        replace(base, kernel=(1, 1), pads=(0, 0, 0, 0)),
        replace(base, stride=(2, 2)),
        replace(base, epilogue=replace(base.epilogue, relu=False)),
        replace(base, pad_value=0),
        replace(base, shape=(1, 9, 9, 9)),  # a last word of 1 channel, not whole words
        replace(base, shape=(1, 64, 9, 9)),  # the tiles' epilogue a loop (576 products)
        replace(base, out_channels=17),  # a last tile of 1 row
    ]
    assert all(o.shared_code(t)[0].symbol != symbol for o in others)
    assert base.symbol != replace(base, shape=(2, 16, 30, 11)).symbol  # its own code: its shape


def test_the_jit_shares_a_family_of_two_or_more():
    a = _record((1, 8, 9, 9), 16, (3, 3), (1, 1), 1, EPILOGUE)
    b = replace(a, shape=(1, 16, 12, 7), out_channels=8)
    alone = replace(a, stride=(2, 2))
    jit = Jit(cache=False)
    jit.build([a, b, alone])
    assert jit.built == 2  # the family's code, and the lone conv's own
    rng = np.random.default_rng(0)
    for spec in (a, b, alone):
        args, want = _operands(rng, spec, EPILOGUE)
        assert np.array_equal(jit.kernel(spec)(*args), want)
    assert jit.built == 2  # nothing compiled on the calls
    single = Jit(cache=False)
    single.kernel(a)  # not built with its family: its own code
    assert single.built == 1 and single._code(a) == (a, ())


def test_a_shared_conv_takes_packed_weights():
    spec = _record((1, 8, 9, 9), 16, (3, 3), (1, 1), 1, EPILOGUE)
    with pytest.raises(KernelError, match="shared dot-product conv2d takes its weights packed"):
        replace(spec, packed=False, shared=True)
    assert replace(spec, packed=False).shared_code(host()) is None
