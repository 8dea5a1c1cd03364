"""The generated kernels as the graph executor's host backend (`LlvmKernels`): every host
operator bit-exact with `ops.host.run`, a whole network (its input quantization, depthwise
convs on the host, output dequantization) equal tensor for tensor, and an accelerator step's
im2col input packed by its kernel into numpy's bytes."""

import re

import numpy as np
import pytest
from network_models import tiny_resnet

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.llvm.host import KERNEL_BYTES, LlvmKernels, host_entries, layout_entries
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.errors import KernelError
from tilecraft.hw.config import preset
from tilecraft.ops import host as H
from tilecraft.ops.operators import Epilogue, Multiplier
from tilecraft.runtime import get_device
from tilecraft.runtime.executor import run_model
from tilecraft.runtime.kernels import NativeKernel, layout_key, layout_record
from tilecraft.runtime.layout import logical_shape, pack_inputs, unpack_outputs
from tilecraft.runtime.model import AcceleratorStep, HostStep


@pytest.fixture(scope="module")
def kernels(jit):
    return LlvmKernels(jit)


def _ops(rng):
    ep = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=10, relu=True, clip=(-128, 90))
    c = 6
    dw = {
        "weight": rng.integers(-128, 128, (c, 1, 3, 3)).astype(np.int8),
        "bias": rng.integers(-999, 999, c).astype(np.int32),
        "multiplier": rng.integers(1, 500, c).astype(np.int32),
    }
    x8 = rng.integers(-128, 128, (1, c, 9, 7)).astype(np.int8)
    xf = (rng.standard_normal((1, c, 9, 7)) * 4).astype(np.float32)
    return [
        (H.Quantize(0.05, -3), [xf], {}),
        (H.Dequantize(0.05, 17), [x8], {}),
        (H.MaxPool((3, 3), (2, 2), (1, 1, 1, 1)), [x8], {}),
        (H.GlobalAvgPool(4321, 17, -5, 9), [x8], {}),
        (H.GlobalAvgPool(4321, 7, -5, 9, pre_shift=10), [x8], {}),
        (H.GlobalAvgPool(1, 0, 3, -6, scale=0.0123), [x8], {}),
        (H.Add(0.7, 1.3, (0, 127), 1, -2, 3), [x8, x8[:, ::-1].copy()], {}),
        (H.Add(0.7, 1.3, (0, 127), 1, -2, 3, fixed=-41.3), [x8, x8[:, ::-1].copy()], {}),
        (H.Flatten(), [x8], {}),
        (H.DepthwiseConv((3, 3), (1, 2), (1, 1, 1, 1), ep, -7), [x8], dw),
    ]


def test_every_host_operator_matches_numpy(kernels):
    for op, inputs, consts in _ops(np.random.default_rng(0)):
        got = kernels.run(op, inputs, consts)
        assert np.array_equal(got, H.run(op, inputs, consts)), op


def test_a_broadcasting_add_is_refused_by_name(kernels):
    a = np.zeros((1, 4, 2, 2), np.int8)
    with pytest.raises(KernelError, match=r"equal shapes, not \(1, 4, 2, 2\) and \(1, 4, 1, 1\)"):
        kernels.run(H.Add(1.0, 1.0), [a, a[:, :, :1, :1]], {})


def test_a_network_runs_its_host_steps_on_generated_kernels(kernels):
    graph = import_model(tiny_resnet(seed=3, depthwise=True))
    model = compile_network(graph, preset("1x16x8"), random_calibration(graph, 1)).model
    kinds = {type(s.op).__name__ for s in model.steps if isinstance(s, HostStep)}
    assert {"Quantize", "Dequantize", "DepthwiseConv"} <= kinds
    x = {"input": np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    ours = run_model(model, x, host=kernels, keep=True)
    ref = run_model(model, x, keep=True)
    for name, value in ref.tensors.items():
        np.testing.assert_array_equal(ours.tensors[name], value, err_msg=name)
    steps = [
        (s.op, [ref.tensors[i].shape for i in s.inputs])
        for s in model.steps
        if isinstance(s, HostStep)
    ]
    entries = host_entries(steps)
    assert len(entries) == sum(not isinstance(op, H.Flatten) for op, _ in steps)


def test_onnxruntimes_add_on_the_host_kernel_over_every_input_pair(kernels):
    """The host Add in onnxruntime's x86 form (two FMAs, rounded once each: this CPU's FMA
    instruction) against numpy's (ops.requant.fma32), on all 65,536 pairs of int8 inputs.
    The form without an FMA unit (the Cortex-A9's) is checked the same way under emulation
    (test_library)."""
    from tilecraft.ops.requant import add_fields

    grid_a, grid_b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128))
    a = grid_a.reshape(1, 256, 16, 16).astype(np.int8)
    b = grid_b.reshape(1, 256, 16, 16).astype(np.int8)
    rng = np.random.default_rng(8)
    for _ in range(6):
        sa, sb, sc = (float(rng.uniform(0.005, 0.2)) for _ in range(3))
        za, zb, zc = (int(rng.integers(-128, 128)) for _ in range(3))
        fields = add_fields(sa, za + 128, sb, zb + 128, sc, zc + 128)
        op = H.Add(float(fields.ratio_a), float(fields.ratio_b), zero_y=zc,
                   fixed=float(fields.fixed))  # fmt: skip
        want = H.run(op, [a, b], {})
        assert np.array_equal(kernels.run(op, [a, b], {}), want)
        assert len(np.unique(want)) > 100


def test_the_accelerator_steps_buffers_are_packed_and_unpacked_by_their_kernels(kernels):
    """A network compiled a program a layer (`chain=False`), so its programs take and give
    int8 activations in blocks of 16 at every junction, and whose first conv's input is
    folded (im2col): on the simulator with the generated kernels every tensor is the
    reference's; each buffer with a layout kernel is packed (or unpacked) by it into numpy's
    bytes; `layout_entries` lists exactly those kernels."""
    graph = import_model(tiny_resnet(seed=5, size=64))  # activations both sides of 16 KB
    data = random_calibration(graph, 1)
    model = compile_network(graph, preset("default"), data, chain=False).model
    x = {"input": np.random.default_rng(6).standard_normal((1, 3, 64, 64)).astype(np.float32)}
    ours = run_model(model, x, get_device("sim"), host=kernels, keep=True)
    ref = run_model(model, x, keep=True)
    assert set(model.outputs) <= set(ours.tensors)
    for name, value in ours.tensors.items():
        np.testing.assert_array_equal(value, ref.tensors[name], err_msg=name)
    kinds, keys, small = set(), set(), 0
    for step in (s for s in model.steps if isinstance(s, AcceleratorStep)):
        program, config = model.programs[step.program], model.programs[step.program].config
        logical = {  # a dense layer's (N, C) input is its buffer's (N, C, 1, 1)
            b.buffer: ours.tensors[b.tensor].reshape(logical_shape(program.buffer(b.buffer)))
            for b in step.inputs
        }
        packed, numpy_packed = pack_inputs(program, logical, kernels), pack_inputs(program, logical)
        for name, value in numpy_packed.items():
            assert np.array_equal(packed[name], value) and packed[name].dtype == value.dtype
        for direction, buffers in (("pack", program.inputs), ("unpack", program.outputs)):
            for buf in (b for b in buffers if b.layout is not None):
                found = getattr(kernels, f"{direction}er")(config, buf)
                big = np.prod(buf.layout.logical) >= KERNEL_BYTES  # else numpy is faster
                assert isinstance(found, NativeKernel) == (
                    buf.layout.kind == "im2col" or (buf.layout.kind == "activation" and big)
                )
                small += buf.layout.kind == "activation" and not big
                if found is not None:
                    kinds.add((direction, buf.layout.kind))
                    keys.add(layout_key(layout_record(direction, config, buf)))
        for b in step.outputs:
            value = ours.tensors[b.tensor].reshape(logical_shape(program.buffer(b.buffer)))
            stored = {b.buffer: program.buffer(b.buffer).layout.pack(config, value)}
            got, want = unpack_outputs(program, stored, kernels), unpack_outputs(program, stored)
            assert np.array_equal(got[b.buffer], want[b.buffer])
    assert kinds == {("pack", "im2col"), ("pack", "activation"), ("unpack", "activation")}
    assert small  # and some activations small enough to stay numpy's
    assert {entry["key"] for _, entry in layout_entries(model)} == keys


def test_an_fma_is_one_instruction_where_the_target_has_one():
    """x86-64-v3 and AArch64 round a * b + c once in an instruction; the Cortex-A9 (VFPv3)
    has none, and its kernel must not call libm's fma (a libc-free library has no libm)."""
    from tilecraft.compiler.llvm.build import assembly
    from tilecraft.compiler.llvm.kernels.elementwise import ScaledAdd
    from tilecraft.compiler.llvm.targets import AARCH64, ARMV7, X86_64

    spec = ScaledAdd((1, 16, 4, 4), 0.7, 1.3, fixed=3.25)
    assert X86_64.fused_multiply_add and AARCH64.fused_multiply_add
    assert not ARMV7.fused_multiply_add
    assert "vfmadd" in assembly([spec], X86_64)
    assert "fmadd" in assembly([spec], AARCH64) or "fmla" in assembly([spec], AARCH64)
    arm = assembly([spec], ARMV7)
    assert "fma" not in arm and not re.search(r"^\s+blx?\s", arm, re.M)  # no call


def test_a_layout_given_lists_is_packed_by_its_kernel(kernels):
    """An im2col layout built by hand with lists (numpy's packing takes it) is found by its
    key, not refused as unhashable, and packs numpy's bytes."""
    from tilecraft.runtime.buffers import BufferSpec
    from tilecraft.runtime.layout import Im2col

    cfg = preset("default")
    layout = Im2col((1, 3, 8, 8), [3, 3], [1, 1], [1, 1], 0)
    buf = BufferSpec("x", "input", layout.stored_shape(cfg), "int8", 0, layout)
    x = np.random.default_rng(9).integers(-128, 128, (1, 3, 8, 8)).astype(np.int8)
    packer = kernels.packer(cfg, buf)
    assert isinstance(packer, NativeKernel) and kernels.packer(cfg, buf) is packer
    assert np.array_equal(packer(x), layout.pack(cfg, x))


def test_layout_kernels_are_built_only_for_a_device_that_packs():
    """`prepare` builds the layout kernels with the host steps' for the simulator (it takes
    packed arrays), not for the cpu device, which runs on logical tensors and never packs."""
    from tilecraft.compiler.llvm.jit import Jit

    graph = import_model(tiny_resnet(seed=5))
    model = compile_network(graph, preset("default"), random_calibration(graph, 1)).model
    steps = [(s.op, [model.tensor(i).shape for i in s.inputs]) for s in model.steps
             if isinstance(s, HostStep)]  # fmt: skip
    hosts, layouts = host_entries(steps), layout_entries(model)
    assert layouts  # the folded first conv's input
    kernels = LlvmKernels(Jit(cache=False))
    kernels.prepare(model, layouts=False)
    assert kernels.jit.built == len({spec.symbol for spec, _ in hosts})
    x = {"input": np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    run_model(model, x, get_device("sim"), host=kernels)  # prepares with the layouts
    assert kernels.jit.built == len({spec.symbol for spec, _ in hosts + layouts})
