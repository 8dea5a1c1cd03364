"""Kernels built ahead of time: a shared object + manifest per target, loaded with ctypes on
the machine it is for (x86-64 here), refused with both triples named on any other, and the
ARM builds run under the unicorn emulator, bit-exact with the reference."""

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest

from tilecraft.compiler.llvm.host import host_entries
from tilecraft.compiler.llvm.kernels.conv import Conv2d
from tilecraft.compiler.llvm.kernels.dot_conv import DotConv2d
from tilecraft.compiler.llvm.kernels.elementwise import Quantize
from tilecraft.compiler.llvm.kernels.layout import PackActivation, PackIm2col, UnpackActivation
from tilecraft.compiler.llvm.kernels.window import DepthwiseConv
from tilecraft.compiler.llvm.library import build_library
from tilecraft.compiler.llvm.targets import target
from tilecraft.errors import KernelError
from tilecraft.ops import host as H
from tilecraft.ops import reference as R
from tilecraft.ops.operators import Conv2d as ConvOp
from tilecraft.ops.operators import Epilogue, Multiplier
from tilecraft.runtime.cpu import LibraryKernels, load_library, this_machine
from tilecraft.runtime.layout import pack_activation, pack_im2col

pytest.importorskip("ziglang", reason="linking shared objects needs ziglang (the cross extra)")

EP = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=12, relu=True, offset=-2)
CONV = Conv2d((1, 8, 9, 11), 13, (3, 3), (2, 2), (1, 1, 1, 1), "int8", epilogue=EP,
              pad_value=-4)  # fmt: skip
NEON_CONV = DotConv2d(**CONV.__dict__, form="neon")  # the boards' int8 conv (for_target's)
# the A9's paired taps: three words (a pair and one alone), and a 7x7 first conv (its rows
# a loop) of 3 channels (one pair: a real word and one half padding)
PAIRED = [
    DotConv2d((1, 6, 9, 11), 5, (3, 3), (2, 1), (1, 1, 1, 1), "int8", epilogue=EP, pad_value=-128,
              form="neon", paired=True),
    DotConv2d((1, 3, 13, 12), 6, (7, 7), (2, 2), (3, 3, 3, 3), "int8", epilogue=EP, pad_value=5,
              form="neon", paired=True),
]  # fmt: skip
FLOAT_CONV = Conv2d((1, 5, 8, 8), 6, (3, 3), (1, 1), (1, 1, 1, 1), bias=True)
QUANT = H.Quantize(0.25, 1)
DW_EP = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=9, relu=True, offset=3)
DEPTHWISE = DepthwiseConv(
    (1, 5, 9, 25), (3, 3), (2, 2), (1, 1, 1, 1), DW_EP, -6
)  # 13 outputs a row
# a first conv's input packing (7x7 taps, stride 2: 147 lanes of 160), its 8-byte moves
# unaligned; and a uint8 one whose runs are 9 bytes (two moves each) with an image past N
IM2COL = [
    PackIm2col((1, 3, 13, 12), (7, 7), (2, 2), (3, 3), 5, 1, 16),
    PackIm2col((1, 2, 10, 11), (3, 9), (1, 2), (1, 4), 200, 2, 16, "uint8"),
]
# int8 activations through 16 x 16 transposes (NEON's vzip): a partial channel block, 16-pixel
# chunks and a tail of 2
ACTIVATION = [PackActivation((1, 21, 3, 6), 1, 16), UnpackActivation((1, 21, 3, 6), 1, 16)]


def _conv_case(rng):
    x = rng.integers(-128, 128, CONV.shape).astype(np.int8)
    w = rng.integers(-128, 128, (13, 8, 3, 3)).astype(np.int8)
    bias, mult = rng.integers(-3000, 3000, 13).astype(np.int32), rng.integers(1, 99, 13)
    op = ConvOp(n=1, ic=8, h=9, w=11, oc=13, kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                pad_value=-4)  # fmt: skip
    want = R.conv2d(op, EP, x, w, bias=bias, multiplier=mult)
    return [x, w, bias, mult.astype(np.int32)], want


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    folder = tmp_path_factory.mktemp("libraries")
    host = [entry for _, entry in host_entries([(QUANT, [(3, 5)])])]
    specs = [CONV, FLOAT_CONV, Quantize((3, 5), 0.25, 1), DEPTHWISE, *IM2COL, *ACTIVATION]
    arm = [NEON_CONV]  # the ARM cores' own
    arm += [r for p in PAIRED for r in (p, p.weights, replace(p, packed=True))]
    return folder, {
        t: build_library(specs + (arm if t != "x86_64" else []), target(t), folder, t, host)
        for t in ("x86_64", "armv7", "aarch64")
    }


@pytest.mark.slow
@pytest.mark.skipif(this_machine() != "x86_64", reason="loads an x86-64 object with ctypes")
def test_the_x86_library_loads_and_runs_with_ctypes(libraries):
    folder, built = libraries
    lib = load_library(built["x86_64"].manifest)
    args, want = _conv_case(np.random.default_rng(0))
    assert np.array_equal(lib[CONV.symbol](*args), want)
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    got = LibraryKernels(lib).run(QUANT, [x], {})  # a host step, found by op and shapes
    assert np.array_equal(got, H.run(QUANT, [x], {}))
    with pytest.raises(KernelError, match=r"no kernel for Quantize on inputs \[\[4, 5\]\]"):
        LibraryKernels(lib).run(QUANT, [np.zeros((4, 5), np.float32)], {})


def test_another_targets_library_is_refused_naming_both(libraries):
    folder, built = libraries
    with pytest.raises(
        KernelError,
        match=r"built for armv7a-unknown-linux-gnueabihf \(armv7\) "
        r"cannot run on this x86_64 machine",
    ):
        from tilecraft.runtime.cpu import KernelLibrary

        KernelLibrary(built["armv7"].manifest, machine="x86_64")


def test_a_manifest_that_lies_about_its_object_is_refused(libraries, tmp_path):
    folder, built = libraries
    shutil.copy(built["aarch64"].shared_object, tmp_path / "k.so")
    meta = json.loads(built["armv7"].manifest.read_text())
    meta["shared_object"] = "k.so"
    (tmp_path / "k.json").write_text(json.dumps(meta))
    from tilecraft.runtime.cpu import KernelLibrary

    with pytest.raises(KernelError, match="k.so is a aarch64 object; its manifest says armv7"):
        KernelLibrary(tmp_path / "k.json", machine="armv7")


def test_the_arm_objects_are_libc_free_and_hard_float(libraries):
    from elftools.elf.elffile import ELFFile

    _, built = libraries
    with open(built["armv7"].shared_object, "rb") as f:
        elf = ELFFile(f)
        assert elf["e_machine"] == "EM_ARM" and elf["e_flags"] & 0x400  # hard-float ABI
        dynsym = elf.get_section_by_name(".dynsym")
        undefined = [
            s.name for s in dynsym.iter_symbols() if s.name and s["st_shndx"] == "SHN_UNDEF"
        ]
        assert undefined == []
        assert CONV.symbol in {s.name for s in dynsym.iter_symbols()}


@pytest.mark.parametrize("arch", ["armv7", "aarch64"])
def test_arm_kernels_run_bit_exact_under_emulation(libraries, arch):
    from tilecraft.compiler.llvm.emulate import Emulator, available

    if available():
        pytest.skip(available())
    _, built = libraries
    emu = Emulator(built[arch].shared_object.read_bytes())
    args, want = _conv_case(np.random.default_rng(2))
    run = emu.call(CONV.signature(), args)
    assert np.array_equal(run.outputs[0], want) and run.instructions > 10_000
    dot = emu.call(NEON_CONV.signature(), args)  # NEON's widening products
    assert np.array_equal(dot.outputs[0], want)
    if arch == "armv7":  # no int8 -> float conversions, 8 products in two instructions
        assert dot.instructions < run.instructions
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1, 5, 8, 8)), rng.standard_normal((6, 5, 3, 3))
    bias = rng.standard_normal(6)
    f32 = [a.astype(np.float32) for a in (x, w, bias)]
    got = emu.call(FLOAT_CONV.signature(), f32).outputs[0]
    win = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))),
                                                   (3, 3), axis=(2, 3))  # fmt: skip
    want = np.einsum("nchwij,ocij->nohw", win, w) + bias[None, :, None, None]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    q = rng.standard_normal((3, 5)).astype(np.float32) * 9
    got = emu.call(Quantize((3, 5), 0.25, 1).signature(), [q]).outputs[0]
    assert np.array_equal(got, H.run(QUANT, [q], {}))
    x = rng.integers(-128, 128, DEPTHWISE.shape).astype(np.int8)  # vectors of outputs, NEON's
    consts = {
        "weight": rng.integers(-128, 128, (5, 1, 3, 3)).astype(np.int8),
        "bias": rng.integers(-2000, 2000, 5).astype(np.int32),
        "multiplier": rng.integers(1, 300, 5).astype(np.int32),
    }
    got = emu.call(DEPTHWISE.signature(), [x, *consts.values()]).outputs[0]
    op = H.DepthwiseConv((3, 3), (2, 2), (1, 1, 1, 1), DW_EP, -6)
    assert np.array_equal(got, H.run(op, [x], consts))
    for spec in IM2COL:  # the packing a board does for an im2col input
        low, high = (-128, 128) if spec.dtype == "int8" else (0, 256)
        x = rng.integers(low, high, spec.shape).astype(spec.dtype)
        got = emu.call(spec.signature(), [x]).outputs[0]
        want = pack_im2col(x, spec.kernel, spec.stride, spec.pad, spec.pad_value, spec.batch,
                           spec.lanes)  # fmt: skip
        assert np.array_equal(got, want), spec
    x = rng.integers(-128, 128, (1, 21, 3, 6)).astype(np.int8)
    packed = emu.call(ACTIVATION[0].signature(), [x]).outputs[0]
    assert np.array_equal(packed, pack_activation(x, 1, 16))
    assert np.array_equal(emu.call(ACTIVATION[1].signature(), [packed]).outputs[0], x)


@pytest.mark.parametrize("arch", ["armv7", "aarch64"])
@pytest.mark.parametrize("spec", PAIRED, ids=["3x3-odd-words", "7x7-first-conv"])
def test_paired_taps_are_exact_for_any_weights(libraries, arch, spec):
    """Two words' products added in 16 bits: exact for weights in [-127, 127] (a pair's sum
    lies within +-32512), at the extremes too (every input -128 against every weight -127 or
    127); a weight of -128 makes DotWeights' wpair 0 and the kernel take the single words,
    still exact. Unpacked (the conv packs) and packed (DotWeights first) alike."""
    from tilecraft.compiler.llvm.emulate import Emulator, available

    if available():
        pytest.skip(available())
    emu = Emulator(libraries[1][arch].shared_object.read_bytes())
    rng = np.random.default_rng(7)
    c, oc = spec.shape[1], spec.out_channels
    op = ConvOp(n=1, ic=c, h=spec.shape[2], w=spec.shape[3], oc=oc, kernel=spec.kernel,
                stride=spec.stride, pad=spec.pads[:2], pad_value=spec.pad_value)  # fmt: skip
    bias, mult = rng.integers(-3000, 3000, oc).astype(np.int32), rng.integers(1, 99, oc)
    mult = mult.astype(np.int32)
    shape = (oc, c, *spec.kernel)
    with_min = rng.integers(-127, 128, shape).astype(np.int8)
    with_min[oc // 2, c - 1, 0, 0] = -128
    cases = [
        (rng.integers(-128, 128, spec.shape), rng.integers(-127, 128, shape), 1),
        (np.full(spec.shape, -128), np.full(shape, -127), 1),
        (np.full(spec.shape, -128), np.full(shape, 127), 1),
        (rng.integers(-128, 128, spec.shape), with_min, 0),
        (np.full(spec.shape, -128), np.full(shape, -128), 0),  # every pair would overflow
    ]
    for x, w, pairs in cases:
        x, w = x.astype(np.int8), w.astype(np.int8)
        want = R.conv2d(op, EP, x, w, bias=bias, multiplier=mult)
        got = emu.call(spec.signature(), [x, w, bias, mult]).outputs[0]
        assert np.array_equal(got, want)
        packed = emu.call(spec.weights.signature(), [w]).outputs
        assert packed[1].tolist() == [pairs]  # wpair
        got = emu.call(replace(spec, packed=True).signature(), [x, *packed, bias, mult])
        assert np.array_equal(got.outputs[0], want)


def test_unknown_targets_are_named():
    with pytest.raises(KernelError, match="unknown kernel target 'mips'; valid: host, armv7"):
        target("mips")
    assert target("pynq-z1").name == "armv7" and target("kv260").name == "aarch64"


@pytest.mark.slow
def test_the_cpu_devices_packing_on_a_neon_core(tmp_path):
    """JitCompute as it runs on an ARM board's own CPU, under emulation: a conv on NEON's
    dot products takes its weights packed once (DotWeights, one output: wq) and gives the
    reference's result, call after call."""
    from tilecraft.compiler.llvm.compute import JitCompute
    from tilecraft.compiler.llvm.emulate import Emulator, available
    from tilecraft.ops import Computation

    if available():
        pytest.skip(available())

    class EmulatedJit:  # a Jit for the Cortex-A9: each kernel built, linked, emulated
        target = target("armv7")

        def build(self, specs):
            pass

        def kernel(self, spec):
            lib = build_library([spec], self.target, tmp_path, spec.symbol)
            emu = Emulator(lib.shared_object.read_bytes())

            class Kernel:  # called as runtime.kernels.NativeKernel is
                symbol = spec.symbol

                def __call__(self, *inputs):
                    outputs = emu.call(spec.signature(), list(inputs)).outputs
                    return outputs[0] if len(outputs) == 1 else tuple(outputs)

            return Kernel()

    op = ConvOp(n=1, ic=6, h=7, w=9, oc=5, kernel=(3, 3), stride=(1, 2), pad=(1, 1), pad_value=3)
    ep = Epilogue(bias=True, shift=7, relu=True)
    rng = np.random.default_rng(4)
    weight = rng.integers(-128, 128, op.weight_shape).astype(np.int8)
    weight.setflags(write=False)
    bias = rng.integers(-900, 900, 5).astype(np.int32)
    compute = JitCompute(EmulatedJit())
    for _ in range(2):
        x = rng.integers(-128, 128, op.input_shape).astype(np.int8)
        got = compute.outputs(Computation(op, ep), {"input": x, "weight": weight, "bias": bias})
        assert np.array_equal(got["output"], R.conv2d(op, ep, x, weight, bias=bias))
    assert len(compute._packed) == 1


@pytest.mark.parametrize("arch", ["armv7", "aarch64"])
def test_a_float32_requantization_under_emulation(tmp_path, arch):
    """The board's own kernels of a FLOAT32 epilogue (onnxruntime's float32 arithmetic: NEON's
    and VFP's int-to-float, product and rounding), bit-exact with the reference, with
    accumulators past 2**24 where the conversion to float32 rounds."""
    from tilecraft.compiler.llvm.compute import computation_kernel
    from tilecraft.compiler.llvm.emulate import Emulator, available
    from tilecraft.ops import Computation, Multiplier

    if available():
        pytest.skip(available())
    op = ConvOp(n=1, ic=200, h=4, w=5, oc=6, kernel=(3, 3), pad=(1, 1))
    ep = Epilogue(bias=True, multiplier=Multiplier.FLOAT32, offset=5, clip=(-100, 120))
    rng = np.random.default_rng(7)
    x = rng.integers(100, 128, op.input_shape).astype(np.int8)
    w = rng.integers(-128, 128, op.weight_shape).astype(np.int8)
    w[:3] = rng.integers(100, 128, w[:3].shape)  # three channels of large sums
    bias = rng.integers(-900, 900, 6).astype(np.int32)
    acc = R.conv2d_acc(op, x, w)
    assert np.abs(acc).max() > 2**24
    scale = (120 / np.abs(acc).max(axis=(0, 2, 3)) * rng.uniform(0.5, 2, 6)).astype(np.float32)
    spec, names = computation_kernel(Computation(op, ep), target=target(arch))
    lib = build_library([spec], target(arch), tmp_path, spec.symbol)
    tensors = {"input": x, "weight": w, "bias": bias, "multiplier": scale}
    got = Emulator(lib.shared_object.read_bytes()).call(
        spec.signature(), [tensors[n] for n in names]
    )
    want = R.conv2d(op, ep, x, w, bias=bias, multiplier=scale)
    assert np.array_equal(got.outputs[0], want)
    assert len(np.unique(want)) > 20


@pytest.mark.parametrize("arch", ["armv7", "aarch64"])
def test_onnxruntimes_add_under_emulation(tmp_path, arch):
    """The host Add in onnxruntime's x86 form as the board builds it, equal to numpy's on
    every pair of inputs: its exact FMAs double-precision IR on the Cortex-A9 (no FMA unit,
    no libcall), AArch64's FMA instruction on the A53."""
    from tilecraft.compiler.llvm.emulate import Emulator, available
    from tilecraft.compiler.llvm.host import host_entries
    from tilecraft.ops.requant import add_fields

    if available():
        pytest.skip(available())
    fields = add_fields(0.031, 140, 0.047, 99, 0.052, 131)
    op = H.Add(float(fields.ratio_a), float(fields.ratio_b), (-128, 127), 12, -29, 3,
               fixed=float(fields.fixed))  # fmt: skip
    grid_a, grid_b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128))
    a = grid_a.reshape(1, 256, 16, 16).astype(np.int8)
    b = grid_b.reshape(1, 256, 16, 16).astype(np.int8)
    ((spec, _),) = host_entries([(op, [a.shape, b.shape])])
    lib = build_library([spec], target(arch), tmp_path, spec.symbol)
    got = Emulator(lib.shared_object.read_bytes()).call(spec.signature(), [a, b]).outputs[0]
    assert np.array_equal(got, H.run(op, [a, b], {}))
