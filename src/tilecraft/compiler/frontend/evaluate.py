"""A float evaluator of the graph IR in numpy: the semantics of each operator (imported or
normalised), used to check that the passes keep the network's meaning (tests compare it with
onnxruntime on the original model) and to read every tensor of a normalised graph.

A quantized model's QuantizeLinear/DequantizeLinear pairs leave the graph as the scales and
zero points of the tensors they rounded (`Graph.scales`, `Graph.zero_points`): the evaluator
rounds each of those tensors to its grid where it is made (`fake_quantize`), as the pairs did.
Without that, a model whose quantizer dropped a ReLU (the int8 range implies it) would run
without it."""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.frontend.ir import Graph, Node, OpType
from tilecraft.errors import ModelError


def conv2d_float(x, w, b, stride, pads, groups=1, dilation=(1, 1)) -> np.ndarray:
    """NCHW conv with OIHW weights, as ONNX defines it (pads top, left, bottom, right)."""
    t, left, bot, r = pads
    x = np.pad(x, ((0, 0), (0, 0), (t, bot), (left, r)))
    oc, icg, kh, kw = w.shape
    dh, dw = dilation
    win = np.lib.stride_tricks.sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1),
                                                   axis=(2, 3))  # fmt: skip
    win = win[:, :, :: stride[0], :: stride[1], ::dh, ::dw]  # (N, C, OH, OW, KH, KW)
    outs = []
    for g in range(groups):
        xs = win[:, g * icg : (g + 1) * icg]
        ws = w[g * (oc // groups) : (g + 1) * (oc // groups)]
        outs.append(np.einsum("nchwij,ocij->nohw", xs, ws, optimize=True))
    y = np.concatenate(outs, axis=1)
    return y + b.reshape(1, -1, 1, 1)


def pool(x, kernel, stride, pads, kind: str, count_include_pad: bool = False) -> np.ndarray:
    t, left, bot, r = pads
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (t, bot), (left, r)), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, kernel, axis=(2, 3))
    win = win[:, :, :: stride[0], :: stride[1]]
    if kind == "max":
        return win.max(axis=(4, 5))
    if count_include_pad:
        return win.mean(axis=(4, 5))
    ones = np.pad(np.ones(x.shape[2:]), ((t, bot), (left, r)))
    counts = np.lib.stride_tricks.sliding_window_view(ones, kernel)[:: stride[0], :: stride[1]]
    return win.sum(axis=(4, 5)) / counts.sum(axis=(2, 3))


def fake_quantize(x: np.ndarray, scale: float, zero: int = 0) -> np.ndarray:
    """`x` through ONNX's QuantizeLinear and DequantizeLinear at `scale`, in x's dtype: divided
    by the float32 scale, rounded half to even, plus the zero point, saturated to the stored
    int8 range, then back. `zero` is the zero point as stored (a uint8 one less 128, so the
    range is -128..127 either way)."""
    s = x.dtype.type(np.float32(scale))
    q = np.clip(np.rint(x / s) + zero, -128, 127)
    return ((q - zero) * s).astype(x.dtype, copy=False)


def quantization_points(graph: Graph) -> dict[str, tuple[float, int]]:
    """The tensors a quantized model rounds, with their scale and stored zero point."""
    return {t: (s, graph.zero_points.get(t, 0)) for t, s in graph.scales.items()}


def _clip(y, clip):
    return y if clip is None else np.clip(y, clip[0], clip[1])


def run_node(node: Node, args: list) -> np.ndarray:
    op, a = node.op, node.attrs
    if op is OpType.CONV:
        b = args[2] if len(args) > 2 and args[2] is not None else np.zeros(args[1].shape[0])
        y = conv2d_float(args[0], args[1], b, a.stride, a.pads, a.groups, a.dilation)
        if a.residual:
            y = y + args[3]
        return _clip(y, a.clip)
    if op is OpType.DENSE:
        return _clip(args[0] @ args[1] + args[2], a.clip)
    if op is OpType.GEMM:
        x, w = (args[0].T if a.trans_a else args[0]), (args[1].T if a.trans_b else args[1])
        y = a.alpha * (x @ w)
        return y + a.beta * args[2] if len(args) > 2 and args[2] is not None else y
    if op is OpType.MATMUL:
        return args[0] @ args[1]
    if op is OpType.BATCHNORM:
        x, g, b, m, v = args
        s = (1, -1) + (1,) * (x.ndim - 2)
        return (x - m.reshape(s)) / np.sqrt(v.reshape(s) + a.epsilon) * g.reshape(s) + b.reshape(s)
    if op is OpType.RELU:
        return np.maximum(args[0], 0)
    if op is OpType.CLIP:
        return np.clip(args[0], a.low, a.high)
    if op is OpType.ADD:
        return _clip(args[0] + args[1], getattr(a, "clip", None))
    if op is OpType.MUL:
        return args[0] * args[1]
    if op in (OpType.MAXPOOL, OpType.AVGPOOL):
        kind = "max" if op is OpType.MAXPOOL else "avg"
        return pool(args[0], a.kernel, a.stride, a.pads, kind, a.count_include_pad)
    if op is OpType.GLOBALAVGPOOL:
        return args[0].mean(axis=(2, 3), keepdims=True)
    if op is OpType.FLATTEN:
        return args[0].reshape(int(np.prod(args[0].shape[: a.axis])), -1)
    if op is OpType.RESHAPE:
        return args[0].reshape(a.shape)
    if op is OpType.SOFTMAX:
        e = np.exp(args[0] - args[0].max(axis=a.axis, keepdims=True))
        return e / e.sum(axis=a.axis, keepdims=True)
    if op is OpType.IDENTITY:
        return args[0]
    raise ModelError(f"the float evaluator has no kernel for {op.value} (node {node.name})")


def evaluate(graph: Graph, inputs: dict[str, np.ndarray], keep_all: bool = False) -> dict:
    """The graph's outputs (every tensor with `keep_all`) for float `inputs`, in float64; a
    quantized model's tensors rounded where it rounds them (`fake_quantize`)."""
    points = quantization_points(graph)
    values = {k: np.asarray(v, np.float64) for k, v in graph.constants.items()}
    for name in graph.inputs:
        if name not in inputs:
            raise ModelError(f"input {name!r} is missing (inputs: {list(graph.inputs)})")
        x = np.asarray(inputs[name], np.float64)
        if x.shape != graph.shape(name):
            raise ModelError(f"input {name!r} has shape {x.shape}; expected {graph.shape(name)}")
        values[name] = fake_quantize(x, *points[name]) if name in points else x
    for node in graph.nodes:
        args = [values[i] if i else None for i in node.inputs]
        y = run_node(node, args)
        values[node.output] = fake_quantize(y, *points[node.output]) if node.output in points else y
    keys = [k for k in values if k not in graph.constants] if keep_all else graph.outputs
    return {k: values[k] for k in keys}
