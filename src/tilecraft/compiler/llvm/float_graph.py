"""A float network (the front end's graph IR, as imported and normalised) on the host's
float32 kernels: the CPU baseline a user compares the accelerator with, and the float
fallback. Each node gets its kernel when it is built (convs, depthwise convs, dense layers,
adds, clips, pooling, softmax); a node with none (a grouped or dilated conv, a transposed
Gemm operand, BatchNorm left unfolded, ...) runs in numpy, and `numpy_nodes` names them.

A quantized model (QDQ, QOperator, QONNX) runs as its quantization nodes say: each tensor it
rounds is rounded to its int8 grid where it is made (`evaluate.fake_quantize`, in float32),
which is what onnxruntime computes with its graph optimizations off."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tilecraft.compiler.frontend.evaluate import fake_quantize, quantization_points, run_node
from tilecraft.compiler.frontend.ir import Graph, Node, OpType
from tilecraft.compiler.llvm.kernels import conv, dense, window
from tilecraft.compiler.llvm.kernels import elementwise as EW
from tilecraft.errors import ModelError

RELU = (0.0, float("inf"))
VIEWS = (OpType.FLATTEN, OpType.RESHAPE, OpType.IDENTITY)


class FloatGraph:
    """`graph` compiled node by node for this machine; `run(inputs)` gives its outputs."""

    def __init__(self, graph: Graph, jit=None):
        from tilecraft.compiler.llvm.jit import Jit

        self.graph, self.jit = graph, jit or Jit()
        self.consts = {k: np.asarray(v, np.float32) for k, v in graph.constants.items()}
        self.points = quantization_points(graph)
        self.steps: list[tuple[Node, Callable | None]] = []
        for node in graph.nodes:
            self.steps.append((node, None if node.op in VIEWS else self._kernel(node)))

    @property
    def numpy_nodes(self) -> list[str]:
        """The nodes with no kernel (views excluded), run by the numpy evaluator."""
        return [n.name for n, k in self.steps if k is None and n.op not in VIEWS]

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = dict(self.consts)
        for name in self.graph.inputs:
            if name not in inputs:
                raise ModelError(f"input {name!r} is missing (inputs: {list(self.graph.inputs)})")
            x = np.asarray(inputs[name], np.float32)
            if x.shape != self.graph.shape(name):
                raise ModelError(
                    f"input {name!r} has shape {x.shape}; expected {self.graph.shape(name)}"
                )
            values[name] = self._rounded(name, x)
        for node, kernel in self.steps:
            args = [values[i] if i else None for i in node.inputs]
            y = kernel(args) if kernel else run_node(node, args)
            values[node.output] = self._rounded(node.output, np.asarray(y, np.float32))
        return {k: values[k] for k in self.graph.outputs}

    @property
    def fake_quantized(self) -> int:
        """How many tensors the model rounds to int8 (0: a float model)."""
        return len(self.points)

    def _rounded(self, name: str, x: np.ndarray) -> np.ndarray:
        return fake_quantize(x, *self.points[name]) if name in self.points else x

    # ---- a kernel per node ---------------------------------------------------------------
    def _kernel(self, node: Node) -> Callable | None:
        op, a = node.op, node.attrs
        shape = self.graph.shape(node.inputs[0])
        if op is OpType.CONV:
            return self._conv(node, shape)
        if op is OpType.DENSE:
            m, k = shape
            n = self.graph.shape(node.inputs[1])[1]
            relu = a.clip == RELU
            fn = self.jit.kernel(dense.Dense(m, k, n, bias=True, relu=relu))
            return self._clipped(
                lambda args: fn(args[0], args[1], args[2]), None if relu else a.clip, (m, n)
            )
        if (
            op is OpType.GEMM
            and not a.trans_a
            and a.alpha == 1.0
            and a.beta == 1.0
            and len(node.inputs) > 2
            and node.inputs[1] in self.consts
        ):
            w = self.consts[node.inputs[1]]
            w = np.ascontiguousarray(w.T) if a.trans_b else w
            m, k, n = shape[0], shape[1], w.shape[1]
            fn = self.jit.kernel(dense.Dense(m, k, n, bias=True))
            bias = np.broadcast_to(
                self.consts.get(node.inputs[2], np.zeros(n, np.float32)), (n,)
            ).astype(np.float32)
            return lambda args: fn(args[0], w, bias)
        if op is OpType.ADD and self.graph.shape(node.inputs[1]) == shape:
            lo, hi = getattr(a, "clip", None) or (float("-inf"), float("inf"))
            fn = self.jit.kernel(EW.FloatAdd(shape, lo, hi))
            return lambda args: fn(args[0], args[1])
        if op is OpType.RELU:
            fn = self.jit.kernel(EW.Clip(shape))
            return lambda args: fn(args[0])
        if op is OpType.CLIP:
            fn = self.jit.kernel(EW.Clip(shape, a.low, a.high))
            return lambda args: fn(args[0])
        if op is OpType.MAXPOOL:
            fn = self.jit.kernel(window.MaxPool(shape, a.kernel, a.stride, a.pads, "float32"))
            return lambda args: fn(args[0])
        if op is OpType.AVGPOOL and not a.count_include_pad:
            fn = self.jit.kernel(window.AvgPool(shape, a.kernel, a.stride, a.pads))
            return lambda args: fn(args[0])
        if op is OpType.GLOBALAVGPOOL:
            fn = self.jit.kernel(window.GlobalAvgPool(shape, "float32"))
            return lambda args: fn(args[0])
        if op is OpType.SOFTMAX and a.axis in (-1, len(shape) - 1):
            cols = shape[-1]
            fn = self.jit.kernel(EW.Softmax(int(np.prod(shape)) // cols, cols))
            return lambda args: fn(args[0].reshape(-1, cols)).reshape(shape)
        return None

    def _conv(self, node: Node, shape) -> Callable | None:
        a = node.attrs
        w = self.graph.shape(node.inputs[1])
        oc, c = w[0], shape[1]
        if a.dilation != (1, 1) or a.groups not in (1, c) or (a.groups == c and oc != c):
            return None
        if a.groups == 1:
            clipped = a.clip == RELU and not a.residual  # the kernel's own ReLU
            spec = conv.Conv2d(shape, oc, a.kernel, a.stride, a.pads, bias=True, relu=clipped)
        else:  # depthwise: any clip (ReLU6 too) is the kernel's
            clipped = not a.residual
            spec = window.DepthwiseConv(
                shape,
                a.kernel,
                a.stride,
                a.pads,
                dtype="float32",
                clip=None if a.residual else a.clip,
            )
        fn = self.jit.kernel(spec)
        zeros = np.zeros(oc, np.float32)

        def run(args):
            bias = args[2] if len(args) > 2 and args[2] is not None else zeros
            return fn(args[0], args[1], bias)

        out = spec.out_shape
        if a.residual:  # the add, then the clip, as one kernel
            lo, hi = a.clip or (float("-inf"), float("inf"))
            add = self.jit.kernel(EW.FloatAdd(out, lo, hi))
            return lambda args: add(run(args), args[3])
        return self._clipped(run, None if clipped else a.clip, out)

    def _clipped(self, fn: Callable, clip, shape) -> Callable:
        if clip is None:
            return fn
        bound = self.jit.kernel(EW.Clip(shape, *clip))
        return lambda args: bound(fn(args))
