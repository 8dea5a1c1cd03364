"""The `cpu` device: what the accelerator computes, on generated host kernels, bit-exact with
the integer reference: one program through the Device API, and whole networks (every tensor)
through the graph executor, JIT-compiled here or from a prebuilt library."""

import numpy as np
import pytest
from network_models import tiny_resnet
from tiers import slow

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.llvm.compute import JitCompute
from tilecraft.compiler.llvm.host import LlvmKernels
from tilecraft.compiler.llvm.kernels.dot_conv import dot_form
from tilecraft.compiler.operator.pipeline import compile_operator
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d, Epilogue, Multiplier
from tilecraft.runtime import get_device
from tilecraft.runtime.check import check_outputs
from tilecraft.runtime.cpu import CpuDevice
from tilecraft.runtime.executor import run_model
from tilecraft.runtime.layout import pack_inputs, random_inputs, unpack_outputs


@pytest.fixture(scope="module")
def cpu(jit):
    return CpuDevice(JitCompute(jit))


def test_get_device_cpu_is_the_kernel_device():
    assert get_device("cpu").name == "cpu"


def test_one_program_through_the_device_api(cpu):
    op = Conv2d(n=1, ic=20, h=11, w=13, oc=24, kernel=(3, 3), stride=(2, 1), pad=(1, 1))
    ep = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=9, relu=True, residual=True)
    rng = np.random.default_rng(0)
    program = compile_operator(
        preset("default"),
        op,
        ep,
        weight=rng.integers(-128, 128, op.weight_shape, np.int8),
        bias=rng.integers(-999, 999, 24).astype(np.int32),
        multiplier=rng.integers(1, 99, 24).astype(np.int32),
        fold=False,
    ).program
    x = random_inputs(program, rng)
    result = cpu.run(program, pack_inputs(program, x))
    ok, message = check_outputs(program, x, unpack_outputs(program, result.outputs))
    assert ok, message
    assert result.report.seconds > 0
    # the weights are unpacked once and kept read-only; a second input runs on them exactly
    _, held = cpu._constants[id(program)]
    assert not held["weight"].flags.writeable
    x = random_inputs(program, rng)
    again = cpu.run(program, pack_inputs(program, x))
    ok, message = check_outputs(program, x, unpack_outputs(program, again.outputs))
    assert ok, message
    folded = compile_operator(preset("default"), op, ep, fold=True).program
    with pytest.raises(Exception, match="cannot take input 'input' .* packed as im2col"):
        cpu.run(folded, pack_inputs(folded, random_inputs(folded, rng)))


def _network(config: str, depthwise: bool):
    graph = import_model(tiny_resnet(seed=5, depthwise=depthwise))
    model = compile_network(graph, preset(config), random_calibration(graph, 1)).model
    x = {"input": np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    return model, x


@pytest.mark.parametrize(
    "config, depthwise", [("default", True), slow("1x16x8", False, id="1x16x8-False")]
)
def test_a_whole_network_on_the_cpu_device(cpu, jit, config, depthwise):
    model, x = _network(config, depthwise)
    ours = run_model(model, x, cpu, host=LlvmKernels(jit), keep=True)
    ref = run_model(model, x, keep=True)
    for name, value in ref.tensors.items():
        np.testing.assert_array_equal(ours.tensors[name], value, err_msg=name)
    assert {s.place for s in ours.steps} <= {"cpu", "host"} and ours.host_seconds > 0


@pytest.mark.slow
def test_a_prebuilt_library_runs_the_same_network(tmp_path):
    pytest.importorskip("ziglang", reason="linking needs ziglang (the cross extra)")
    from tilecraft.compiler.llvm.library import build_model_library
    from tilecraft.compiler.llvm.targets import target
    from tilecraft.runtime.cpu import LibraryKernels, cpu_device, load_library, this_machine
    from tilecraft.runtime.kernels import layout_key, layout_record

    if this_machine() != "x86_64":
        pytest.skip("builds and loads an x86-64 library")
    model, x = _network("default", True)
    lib = build_model_library(model, target("x86_64"), tmp_path, "model")
    device = cpu_device(library=lib.manifest)
    host = LibraryKernels(load_library(lib.manifest))
    ours = run_model(model, x, device, host=host)
    ref = run_model(model, x)
    for name in model.outputs:
        np.testing.assert_array_equal(ours.outputs[name], ref.outputs[name])
    # on the simulator, the library packs and unpacks the programs' buffers (`layouts`)
    sim = run_model(model, x, get_device("sim"), host=host)
    for name in model.outputs:
        np.testing.assert_array_equal(sim.outputs[name], ref.outputs[name])
    buffers = [
        (direction, program.config, b)
        for program in model.programs
        for direction, group in (("pack", program.inputs), ("unpack", program.outputs))
        for b in group
        if b.layout is not None and b.layout.kind in ("im2col", "activation")
    ]
    assert buffers and host.library.layouts
    for direction, config, b in buffers:
        entry = host.library.layouts[layout_key(layout_record(direction, config, b))]
        assert getattr(host, f"{direction}er")(config, b) is host.library[entry["symbol"]]


def test_dot_product_weights_are_packed_once_while_they_cannot_change(jit):
    """On a VNNI CPU a conv's weights are packed for the dot products once and kept while the
    array is read-only (the cpu device's constants); a writable array is packed again each
    call, so a caller that changes it gets the new weights' result, never a stale one."""
    from tilecraft.compiler.llvm.kernels.dot_conv import dot_form
    from tilecraft.ops import Computation
    from tilecraft.ops import reference as R

    if not dot_form(jit.target):
        pytest.skip("this CPU has no integer dot products (VNNI, NEON)")
    op = Conv2d(n=1, ic=12, h=9, w=9, oc=8, kernel=(3, 3), stride=(1, 1), pad=(1, 1))
    ep = Epilogue(shift=6)
    comp = Computation(op, ep)
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, op.input_shape).astype(np.int8)
    weight = rng.integers(-128, 128, op.weight_shape).astype(np.int8)
    compute = JitCompute(jit)

    def result(w):
        return compute.outputs(comp, {"input": x, "weight": w})["output"]

    frozen = weight.copy()
    frozen.setflags(write=False)
    assert np.array_equal(result(frozen), R.conv2d(op, ep, x, frozen))
    assert np.array_equal(result(frozen), R.conv2d(op, ep, x, frozen))
    assert len(compute._packed) == 1
    assert np.array_equal(result(weight), R.conv2d(op, ep, x, weight))
    weight[:] = -weight  # changed in place: packed again
    assert np.array_equal(result(weight), R.conv2d(op, ep, x, weight))
    view = weight.view()  # read-only, but over memory that can change: packed each call too
    view.setflags(write=False)
    assert np.array_equal(result(view), R.conv2d(op, ep, x, weight))
    weight[:] = weight[::-1]
    assert np.array_equal(result(view), R.conv2d(op, ep, x, weight))
    assert len(compute._packed) == 1
    del frozen  # the packed copy goes with the weights
    assert len(compute._packed) == 0


def test_convs_that_differ_in_their_offset_share_one_kernel(jit):
    """Layers of one shape whose epilogues differ only in the offset (uint8 models' output
    zero points) compile one kernel, the offset an input, and each gives its own reference
    result; an epilogue on the requantization unit keeps its offset in its code."""
    from tilecraft.compiler.llvm.compute import computation_kernel
    from tilecraft.ops import Computation
    from tilecraft.ops import reference as R

    op = Conv2d(n=1, ic=8, h=7, w=7, oc=8, kernel=(3, 3), stride=(1, 1), pad=(1, 1))
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, op.input_shape).astype(np.int8)
    w = rng.integers(-127, 128, op.weight_shape).astype(np.int8)
    bias = rng.integers(-900, 900, 8).astype(np.int32)
    compute, symbols = JitCompute(jit), set()
    for offset in (0, -128, 7, 100):
        ep = Epilogue(bias=True, shift=6, offset=offset, clip=(-128, 127))
        comp = Computation(op, ep)
        spec, names = computation_kernel(comp, target=jit.target)
        assert ("offset" in names) == bool(offset) and spec.offset_input == bool(offset)
        symbols.add(spec.symbol)
        got = compute.outputs(comp, {"input": x, "weight": w, "bias": bias})["output"]
        assert np.array_equal(got, R.conv2d(op, ep, x, w, bias=bias)), offset
    assert len(symbols) == 2  # offset 0 (no add), and every other offset's
    unit = Epilogue(bias=True, multiplier=Multiplier.FLOAT32, offset=7)
    spec, names = computation_kernel(Computation(op, unit), target=jit.target)
    assert not spec.offset_input and "offset" not in names


def test_the_devices_weights_are_packed_once_for_its_dot_products(jit):
    """Weights unpacked from whole blocks (channels a multiple of the array's) come out as a
    view of the unpacking's scratch: the device keeps its own read-only copy, so the packed
    weights are kept and a second run packs nothing."""
    if not dot_form(jit.target):
        pytest.skip("this CPU has no integer dot products (VNNI, NEON)")
    op = Conv2d(n=1, ic=32, h=6, w=6, oc=32, kernel=(3, 3), stride=(1, 1), pad=(1, 1))
    rng = np.random.default_rng(1)
    weight = rng.integers(-128, 128, op.weight_shape, np.int8)
    program = compile_operator(preset("default"), op, Epilogue(shift=9), weight=weight).program
    cpu = CpuDevice(JitCompute(jit))
    for _ in range(2):
        x = random_inputs(program, rng)
        ok, message = check_outputs(
            program, x, unpack_outputs(program, cpu.run(program, pack_inputs(program, x)).outputs)
        )
        assert ok, message
        assert len(cpu.compute.inner._packed) == 1  # (the device stages a conv's pool)


def test_a_float32_requantization_on_the_cpu_device(cpu):
    """A program compiled for the requantization unit runs on the cpu device's kernels with
    onnxruntime's float32 arithmetic, bit-exact with the reference (ops.requant)."""
    from tilecraft.compiler.operator.params import random_scales

    cfg = preset("default").replace(requant_lanes=8)
    op = Conv2d(n=1, ic=20, h=11, w=13, oc=40, kernel=(3, 3), stride=(2, 1), pad=(1, 1))
    ep = Epilogue(bias=True, multiplier=Multiplier.FLOAT32, offset=-9, clip=(-120, 100))
    rng = np.random.default_rng(1)
    program = compile_operator(
        cfg,
        op,
        ep,
        weight=rng.integers(-128, 128, op.weight_shape, np.int8),
        bias=rng.integers(-(2**16), 2**16, 40).astype(np.int32),
        multiplier=random_scales(rng, 40),
        fold=False,
    ).program
    x = random_inputs(program, rng)
    result = cpu.run(program, pack_inputs(program, x))
    out = unpack_outputs(program, result.outputs)
    ok, message = check_outputs(program, x, out)
    assert ok, message
    assert len(np.unique(out["output"])) > 100


def test_a_chain_binds_its_layers_once_and_runs_as_the_reference(jit):
    """The device makes each chained program's layers ready once (`JitCompute.bind`: kernels
    found, constants converted and packed) and runs every later input on that plan, bit-exact
    with the reference; a tensor a layer needs and nobody gave is named."""
    from tilecraft.errors import KernelError

    model, x = _network("default", True)
    compute = JitCompute(jit)
    bound = []
    real = compute.bind
    compute.bind = lambda comp, fixed: (bound.append(comp), real(comp, fixed))[1]
    cpu = CpuDevice(compute)
    rng = np.random.default_rng(2)
    for _ in range(2):
        ours = run_model(model, x, cpu, host=LlvmKernels(jit))
        ref = run_model(model, x)
        for name in model.outputs:
            np.testing.assert_array_equal(ours.outputs[name], ref.outputs[name])
        x = {"input": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
    chained = [s for s in model.steps if getattr(s, "layers", ())]
    stages = [c for s in chained for layer in s.layers for c in layer.computation.stages()]
    assert chained and len(bound) == len(stages)  # the first run's (a conv and its pool: 2)
    step = chained[0]
    first = step.layers[0].buffers[0].tensor
    with pytest.raises(KernelError, match=f"needs tensor '{first}'"):
        cpu.run_layers(model.programs[step.program], step.layers, {})


def test_bind_takes_each_run_what_the_constants_do_not_give(jit):
    """A bound conv whose weights are not among the constants takes them, and packs them, at
    each run: the same result as `outputs`, and the reference's."""
    from tilecraft.ops import Computation
    from tilecraft.ops import reference as R

    op = Conv2d(n=1, ic=8, h=7, w=9, oc=16, kernel=(3, 3), stride=(1, 1), pad=(1, 1))
    ep = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=9, relu=True)
    comp = Computation(op, ep)
    compute = JitCompute(jit)
    rng = np.random.default_rng(3)
    bias = rng.integers(-999, 999, 16).astype(np.int32)
    multiplier = rng.integers(1, 99, 16).astype(np.int32)
    given, call = compute.bind(comp, {"bias": bias, "multiplier": multiplier})
    assert given == ["input", "weight"]
    for _ in range(2):
        x = rng.integers(-128, 128, op.input_shape, np.int8)
        w = rng.integers(-128, 128, op.weight_shape, np.int8)
        want = R.conv2d(op, ep, x, w, bias=bias, multiplier=multiplier)
        tensors = {"input": x, "weight": w, "bias": bias, "multiplier": multiplier}
        assert np.array_equal(compute.outputs(comp, tensors)["output"], want)
        assert np.array_equal(call(x, w), want)
