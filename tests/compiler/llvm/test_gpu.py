"""The GPU fallback: thread-per-output kernels (`kernels.direct`) whose arithmetic is checked
here by compiling the same records for the CPU (bit-exact with the reference, a whole network
included), their PTX, and the gpu device: a clear error without a GPU, a launch with one."""

import numpy as np
import pytest
from network_models import tiny_resnet

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.llvm.build import assembly
from tilecraft.compiler.llvm.compute import JitCompute
from tilecraft.compiler.llvm.kernels.conv import Conv2d
from tilecraft.compiler.llvm.kernels.direct import DirectConv2d, DirectDense, DirectMaxPool
from tilecraft.compiler.llvm.kernels.elementwise import Quantize, WrappedScaledAdd
from tilecraft.compiler.llvm.targets import NVPTX
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.errors import DeviceError, KernelError
from tilecraft.hw.config import preset
from tilecraft.ops import host as H
from tilecraft.ops import reference as R
from tilecraft.ops.operators import Conv2d as ConvOp
from tilecraft.ops.operators import DepthwiseConv2d, Epilogue, Multiplier
from tilecraft.runtime import get_device
from tilecraft.runtime.cpu import CpuDevice
from tilecraft.runtime.executor import run_model

EP = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=12, relu=True, residual=True)


@pytest.mark.parametrize("seed", range(4))
def test_direct_conv_dense_and_pool_are_bit_exact(jit, seed):
    rng = np.random.default_rng(seed)
    n, c, h, w = 2, int(rng.integers(1, 9)), int(rng.integers(3, 12)), int(rng.integers(3, 12))
    oc, s, p = int(rng.integers(1, 9)), int(rng.integers(1, 3)), int(rng.integers(0, 2))
    x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    wt = rng.integers(-128, 128, (oc, c, 3, 3)).astype(np.int8)
    bias, mult = rng.integers(-999, 999, 16).astype(np.int32), rng.integers(1, 99, 16)
    mult = mult.astype(np.int32)
    spec = DirectConv2d(x.shape, oc, (3, 3), (s, s), (p,) * 4, "int8", epilogue=EP, pad_value=-3)
    res = rng.integers(-128, 128, spec.out_shape).astype(np.int8)
    op = ConvOp(n=n, ic=c, h=h, w=w, oc=oc, kernel=(3, 3), stride=(s, s), pad=(p, p), pad_value=-3)
    want = R.conv2d(op, EP, x, wt, bias=bias[:oc], multiplier=mult[:oc], residual=res)
    assert np.array_equal(jit.kernel(spec)(x, wt, bias[:oc], mult[:oc], res), want), seed
    ep = Epilogue(bias=True, multiplier=Multiplier.CHANNEL, shift=9)
    dw = rng.integers(-128, 128, (c, 1, 3, 3)).astype(np.int8)
    spec = DirectConv2d(x.shape, c, (3, 3), (1, 1), (1,) * 4, "int8", epilogue=ep,
                        depthwise=True)  # fmt: skip
    dop = DepthwiseConv2d(n=n, c=c, h=h, w=w, kernel=(3, 3), stride=(1, 1), pad=(1, 1))
    want = R.epilogue(ep, R.depthwise_acc(dop, x, dw), bias=bias[:c], multiplier=mult[:c])
    assert np.array_equal(jit.kernel(spec)(x, dw, bias[:c], mult[:c]), want), seed
    xd, wd = rng.integers(-128, 128, (3, 40)).astype(np.int8), rng.integers(-128, 128, (40, 16))
    wd = wd.astype(np.int8)
    got = jit.kernel(DirectDense(3, 40, 16, "int8", epilogue=ep))(xd, wd, bias, mult)
    assert np.array_equal(got, R.dense(ep, xd, wd, bias=bias, multiplier=mult)), seed
    pool = H.MaxPool((3, 3), (2, 2), (1, 1, 1, 1))
    got = jit.kernel(DirectMaxPool(x.shape, (3, 3), (2, 2), (1, 1, 1, 1)))(x)
    assert np.array_equal(got, H.run(pool, [x], {})), seed
    xf, wf = rng.standard_normal((1, c, h, w)), rng.standard_normal((oc, c, 3, 3))
    spec = DirectConv2d(xf.shape, oc, (3, 3), (1, 1), (1,) * 4, bias=True, relu=True)
    got = jit.kernel(spec)(
        xf.astype(np.float32), wf.astype(np.float32), bias[:oc].astype(np.float32)
    )
    tiled = Conv2d(xf.shape, oc, (3, 3), (1, 1), (1,) * 4, bias=True, relu=True)
    want = jit.kernel(tiled)(
        xf.astype(np.float32), wf.astype(np.float32), bias[:oc].astype(np.float32)
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_a_network_on_the_gpu_kernels_compiled_for_the_cpu(jit):
    graph = import_model(tiny_resnet(seed=7, depthwise=True))
    model = compile_network(graph, preset("default"), random_calibration(graph, 1)).model
    x = {"input": np.random.default_rng(8).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    ours = run_model(model, x, CpuDevice(JitCompute(jit, direct=True)), keep=True)
    ref = run_model(model, x, keep=True)
    for name, value in ref.tensors.items():
        np.testing.assert_array_equal(ours.tensors[name], value, err_msg=name)


def test_ptx_has_one_entry_per_kernel_and_a_pointer_per_buffer():
    specs = [
        DirectConv2d((1, 4, 8, 8), 6, (3, 3), (1, 1), (1,) * 4, "int8", epilogue=EP),
        Quantize((100,), 0.5, 3),
        WrappedScaledAdd((7, 9), 2, 300, 1, 250, 3, 6),
    ]
    ptx = assembly(specs, NVPTX)
    assert ".target sm_80" in ptx
    for spec in specs:
        head = ptx[ptx.index(f".entry {spec.symbol}(") :]
        params = head[: head.index(")")].count(".param .u64")
        assert params == len(spec.buffers()), spec.kind
    assert "ld.global" in ptx and "st.global" in ptx and "%ctaid.x" in ptx


def test_a_kernel_with_shared_scratch_space_has_no_gpu_form():
    with pytest.raises(KernelError, match="no GPU kernel for conv2d"):
        assembly([Conv2d((1, 4, 8, 8), 6, (3, 3))], NVPTX)


def _gpu_here() -> bool:
    try:
        from tilecraft.runtime.gpu import cuda

        cuda()
        return True
    except DeviceError:
        return False


def test_no_gpu_is_a_clear_error_not_a_crash():
    if _gpu_here():
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceError, match="no CUDA GPU here|needs cuda.core"):
        get_device("gpu")


@pytest.mark.gpu
def test_a_network_on_the_gpu():
    if not _gpu_here():
        pytest.skip("no CUDA GPU here")
    graph = import_model(tiny_resnet(seed=7, depthwise=True))
    model = compile_network(graph, preset("default"), random_calibration(graph, 1)).model
    x = {"input": np.random.default_rng(8).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    ours = run_model(model, x, get_device("gpu"), keep=True)
    ref = run_model(model, x, keep=True)
    for name, value in ref.tensors.items():
        np.testing.assert_array_equal(ours.tensors[name], value, err_msg=name)


def test_ptx_reaches_the_driver_as_code_not_as_a_file_name(monkeypatch):
    """cuda.core's `ObjectCode.from_ptx` reads a str as a path (CUDA_ERROR_FILE_NOT_FOUND on a
    real GPU) and bytes as the PTX itself."""
    from tilecraft.runtime import gpu

    given = []

    class Module:
        def get_kernel(self, symbol):
            return symbol

    class ObjectCode:
        @staticmethod
        def from_ptx(code):
            given.append(code)
            return Module()

    monkeypatch.setattr(
        gpu, "cuda", lambda: (type("core", (), {"ObjectCode": ObjectCode}), None, None)
    )
    spec = Quantize((100,), 0.5, 3)
    ptx = assembly([spec], NVPTX)
    kernels = gpu.load_ptx(ptx, [spec.signature()])
    assert given == [ptx.encode()] and kernels[spec.symbol].threads == 100
