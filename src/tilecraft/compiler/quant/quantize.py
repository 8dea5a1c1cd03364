"""Post-training int8 quantization of a normalised graph.

Symmetric scales everywhere (zero padding stays exact): activations `scale = T / 127` from the
calibration thresholds, weights per output channel (`max|w| / 127`, values in [-127, 127]),
biases int32 at `s_in * s_w`. Requantization is the accelerator's epilogue: per-channel
multiplier and one rounding shift from `ops.reference.requant_params`, with the accumulator
bound taken from the weights themselves (128 * sum|w| + |bias| per channel), so no input can
make the 32-bit multiply wrap; or, exact (a model's own scales, `--requant exact`), per-channel
accumulator bounds and a two-stage multiply from `ops.reference.requant_bounds`, which rounds
as onnxruntime's float32 requantization does on all but a few elements in 10**4.

Tensors that must share a scale are grouped first (a residual and the output it is added to,
the two sides of a max pool or a flatten); a group takes the largest threshold of its
members, which is how residual branches meet at a common scale. A model's own scales are kept
as stated (an Add that the model rounds on both sides stays an Add: `ops.ScaledAdd` on the
accelerator, each side's ratio to the output's scale in up to 22 bits, or on the host as
onnxruntime's QLinearAdd). Zero points, where the model brings them, are kept (see `_conv_layer`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tilecraft.compiler.frontend.ir import Graph, Node, OpType
from tilecraft.compiler.partition import Place, Reason, partition, place
from tilecraft.compiler.quant.calibrate import Ranges
from tilecraft.compiler.quant.observers import Observer
from tilecraft.compiler.quant.requantization import (
    REQUANT_ONNXRUNTIME,
    add_requant,
    conv_requant,
    gap_requant,
)
from tilecraft.errors import ModelError, UnsupportedOperatorError
from tilecraft.hw.isa.requant import param_rows
from tilecraft.ops import (
    Conv2d,
    Dense,
    DepthwiseConv2d,
    Epilogue,
    GlobalAvgPool2d,
    MaxPool2d,
    ScaledAdd,
)
from tilecraft.ops import host as host_ops
from tilecraft.ops.operators import INT8
from tilecraft.ops.reference import requant_params
from tilecraft.ops.requant import add_fields, gap_scale
from tilecraft.runtime.model import TensorSpec

QMAX = 127


@dataclass(frozen=True)
class AccelLayer:
    """A conv, depthwise conv or dense on the accelerator, with its integer parameters."""

    name: str
    op: Conv2d | DepthwiseConv2d | Dense
    epilogue: Epilogue
    weight: np.ndarray
    bias: np.ndarray
    multiplier: np.ndarray
    input: str
    residual: str | None
    output: str
    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # acc_lo, acc_hi, multiplier2
    pool: MaxPool2d | None = None  # a conv's max pool, taken on its accumulators (graph)


@dataclass(frozen=True)
class PoolLayer:
    """A pooling layer on the accelerator: max pool (one scale in and out) or global average
    pool (requantized to its output's scale)."""

    name: str
    op: MaxPool2d | GlobalAvgPool2d
    input: str
    output: str


@dataclass(frozen=True)
class AddLayer:
    """An Add of two int8 tensors at their own scales on the accelerator (`ops.ScaledAdd`)."""

    name: str
    op: ScaledAdd
    input: str
    residual: str
    output: str


@dataclass(frozen=True)
class HostLayer:
    name: str
    op: host_ops.HostOp
    inputs: tuple[str, ...]
    output: str
    constants: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class QuantizedNetwork:
    name: str
    layers: list[AccelLayer | PoolLayer | AddLayer | HostLayer]
    tensors: dict[str, TensorSpec]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    float_names: dict[str, str]  # int8 tensor -> the float graph's tensor it stands for


# int8 support on the host, beyond the accelerator's conv/dense
_HOST_INT8 = {OpType.MAXPOOL, OpType.GLOBALAVGPOOL, OpType.FLATTEN, OpType.ADD}


def check_supported(graph: Graph) -> None:
    """Every node the int8 flow cannot take, reported at once before any work."""
    bad = []
    for node in graph.nodes:
        where, _ = place(graph, node)
        ok = where is Place.ACCELERATOR or node.op in _HOST_INT8 or (
            node.op is OpType.CONV and node.attrs.groups > 1
            and node.attrs.groups == graph.shape(node.inputs[0])[1]
            == graph.shape(node.inputs[1])[0]  # depthwise, one output channel per input
            and node.attrs.dilation == (1, 1) and node.attrs.residual is False
        )  # fmt: skip
        if node.op is OpType.ADD and any(i in graph.constants for i in node.inputs):
            ok = False
        if not ok:
            bad.append((node.op.value, node.name, False))
    if bad:
        lines = "\n".join(
            f"  {op} (node {name}): no int8 accelerator or host kernel yet" for op, name, _ in bad
        )
        raise UnsupportedOperatorError(
            f"{len(bad)} node(s) cannot be quantized to int8:\n{lines}", bad
        )


class _Groups:
    """Union-find over tensor names."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def _shared(graph: Graph) -> list[tuple[str, str]]:
    """Pairs of tensors the int8 operators need at one scale: a fused residual and the
    output it is added to, the two sides of a max pool and of a flatten."""
    pairs = []
    for node in graph.nodes:
        if node.op is OpType.CONV and node.attrs.residual:
            pairs.append((node.inputs[3], node.output))
        if node.op in (OpType.MAXPOOL, OpType.FLATTEN):
            pairs.append((node.inputs[0], node.output))
    return pairs


def activation_scales(graph: Graph, ranges: Ranges) -> dict[str, float]:
    """Each activation's scale. Calibrated ranges: tensors that must share a scale take the
    largest threshold of their group. A model's own scales (QDQ) are kept as they are, and a
    pair that must share one but does not is an error naming both."""
    tensors = [*graph.inputs, *(o for n in graph.nodes for o in n.outputs)]
    if ranges.observer is Observer.MODEL:
        scales = {t: ranges.thresholds[t] / QMAX for t in tensors}
        for a, b in _shared(graph):
            if not np.isclose(scales[a], scales[b], rtol=1e-6, atol=0):
                raise ModelError(
                    f"tensors {a!r} (scale {scales[a]:.6g}) and {b!r} (scale "
                    f"{scales[b]:.6g}) must share a scale here; quantize the model "
                    "with equal scales or give calibration data"
                )
        return scales
    groups = _Groups()
    for a, b in _shared(graph):
        groups.union(a, b)
    top: dict[str, float] = {}
    for t in tensors:
        if t not in ranges.thresholds:
            raise ModelError(f"calibration recorded no range for tensor {t!r}")
        root = groups.find(t)
        top[root] = max(top.get(root, 0.0), ranges.thresholds[t])
    return {t: (top[groups.find(t)] or 1.0) / QMAX for t in tensors}


def _weights(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8 weights along `axis` and their scales."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    top = np.abs(w).max(axis=other)
    scale = np.where(top > 0, top / QMAX, 1.0)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -QMAX, QMAX).astype(np.int8)
    return q, scale


def _model_weights(graph: Graph, name: str, w: np.ndarray, axis: int):
    """A quantized model's weights at its own scale (its integers, -128 included), when the
    constant still is those integers times that scale; else None."""
    scale = graph.weight_scales.get(name)
    if scale is None or scale.size not in (1, w.shape[axis]) or np.any(scale <= 0):
        return None
    scale = np.broadcast_to(scale.astype(np.float64), (w.shape[axis],))
    shape = [1] * w.ndim
    shape[axis] = -1
    ratio = w / scale.reshape(shape)
    q = np.rint(ratio)
    if np.abs(ratio - q).max(initial=0) > 1e-3 or q.min(initial=0) < -128 or q.max(initial=0) > 127:
        return None  # a pass changed the weights (BatchNorm folded): quantize them afresh
    return q.astype(np.int8), scale


def _clip(bounds, s_y: float, zero: int = 0) -> tuple[int, int]:
    """Float clip bounds (a fused ReLU/Clip) as stored int8 at scale s_y, zero point `zero`."""
    if bounds is None:
        return (-128, 127)
    lo, hi = (
        int(np.clip(zero + np.rint(b / s_y), -128, 127)) if np.isfinite(b) else d
        for b, d in zip(bounds, (-128, 127))
    )
    return lo, max(lo, hi)


def _conv_layer(
    graph: Graph,
    node: Node,
    scales,
    zeros,
    name_of,
    exact: bool,
    accelerator: bool = True,
    absorbed: str | None = None,
    unit: bool = False,
    unit_residual: bool = False,
):
    """A conv or dense node's int8 layer. `absorbed`: the (N, C, H, W) map a dense layer reads
    through a Flatten (its x), which it reads as an H x W convolution with one output pixel,
    its (C*H*W, N) weights as (N, C, H, W): the Flatten's NCHW order is the weights' order."""
    x, w_name, b_name = node.inputs[:3]
    a = node.attrs
    s_x, s_y = scales[x], scales[node.output]
    w = graph.constants[w_name].astype(np.float64)
    b = graph.constants[b_name].astype(np.float64)
    conv = node.op is OpType.CONV
    axis = 0 if conv else 1
    qw, s_w = _model_weights(graph, w_name, w, axis) or _weights(w, axis)
    qb = np.rint(b / (s_x * s_w)).astype(np.int64)
    z_x, z_y = zeros.get(x, 0), zeros.get(node.output, 0)
    if z_x:  # sum w * (x - z_x): the zero point's part folded into the bias (padding holds z_x)
        qb = qb - z_x * qw.astype(np.int64).sum(axis=tuple(i for i in range(qw.ndim) if i != axis))
    if np.abs(qb).max(initial=0) >= 1 << 31:
        raise ModelError(f"node {node.name}: a bias does not fit int32 at scale {s_x:.3g}")
    # the scale as onnxruntime's QLinearConv computes it, in float32
    scale = (np.float32(s_x) * s_w.astype(np.float32) / np.float32(s_y)).astype(np.float64)
    residual = bool(conv and a.residual)
    offset = z_y - (zeros.get(node.inputs[3], 0) if residual else 0)
    ep, vectors = conv_requant(
        node,
        qw,
        qb,
        scale,
        axis,
        _clip(a.clip, s_y, z_y),
        residual,
        exact,
        offset,
        unit,
        unit_residual,
    )
    out = name_of(node.output)
    if conv and a.groups > 1 and not accelerator:
        op = host_ops.DepthwiseConv(a.kernel, a.stride, a.pads, ep, z_x)
        consts = {"weight": qw, "bias": qb.astype(np.int32), **vectors}
        return HostLayer(node.name, op, (name_of(x),), out, consts)
    if conv and a.groups > 1:
        n, c, h, wd = graph.shape(x)
        op = DepthwiseConv2d(n, c, h, wd, a.kernel, a.stride, a.symmetric_pad, z_x)
    elif conv:
        n, ic, h, wd = graph.shape(x)
        op = Conv2d(n, ic, h, wd, qw.shape[0], a.kernel, a.stride, a.symmetric_pad, z_x)
    elif absorbed is not None:
        n, c, h, wd = graph.shape(absorbed)
        qw = np.ascontiguousarray(qw.T.reshape(qw.shape[1], c, h, wd))
        op = Conv2d(n, c, h, wd, qw.shape[0], (h, wd), 1, 0, z_x)
    else:
        (mm, k), nn = graph.shape(x), qw.shape[1]
        op = Dense(mm, k, nn)
    res = name_of(node.inputs[3]) if residual else None
    return AccelLayer(
        node.name,
        op,
        ep,
        qw,
        qb.astype(np.int32),
        vectors.pop("multiplier"),
        name_of(x),
        res,
        out,
        vectors,
    )


def _gap_layer(
    graph: Graph, node: Node, scales, zeros, name_of, unit: bool = False
) -> PoolLayer | HostLayer:
    """The global average pool on the accelerator: with the requantization `unit`, with
    onnxruntime's float32 scale x_scale / (y_scale * H*W) and its arithmetic; else when its
    requantization fits the ALU's immediates (shift <= 15); else on the host."""
    n, c, h, w = graph.shape(node.inputs[0])
    scale = scales[node.inputs[0]] / (h * w * scales[node.output])
    z_x, z_y = zeros.get(node.inputs[0], 0), zeros.get(node.output, 0)
    if unit:
        exact = float(gap_scale(scales[node.inputs[0]], scales[node.output], h * w))
        op = GlobalAvgPool2d(n, c, h, w, 1, 0, z_x, z_y, scale=exact)
        return PoolLayer(node.name, op, name_of(node.inputs[0]), name_of(node.output))
    found = gap_requant(scale, h * w, z_x)
    if found is None:
        return _host_layer(graph, node, scales, zeros, name_of)
    weight, m, s = found  # past a shift of 15 (the rounding constant's immediate), the rest is
    # a floor shift before the rounding one: within 2**-15 of a step
    op = GlobalAvgPool2d(n, c, h, w, m, min(s, 15), z_x, z_y, max(s - 15, 0), weight)
    return PoolLayer(node.name, op, name_of(node.inputs[0]), name_of(node.output))


def _add_layer(graph: Graph, node: Node, scales, zeros, name_of) -> AddLayer | HostLayer:
    """The Add on the accelerator (its ratios as onnxruntime computes them, float32), or on
    the host when they cannot be requantized there."""
    s_o = np.float32(scales[node.output])
    ratio_a, ratio_b = (float(np.float32(scales[i]) / s_o) for i in node.inputs)
    found = add_requant(ratio_a, ratio_b)
    if found is None:
        return _host_layer(graph, node, scales, zeros, name_of)
    wa, ma, wb, mb, s = found
    z_a, z_b, z_y = (zeros.get(t, 0) for t in (*node.inputs, node.output))
    clip = _clip(getattr(node.attrs, "clip", None), scales[node.output], z_y)
    n, c, h, w = graph.shape(node.output)
    op = ScaledAdd(n, c, h, w, ma, mb, min(s, 15), wa, wb, max(s - 15, 0), z_a, z_b, z_y, clip)
    a, b = (name_of(i) for i in node.inputs)
    return AddLayer(node.name, op, a, b, name_of(node.output))


def _host_layer(
    graph: Graph, node: Node, scales, zeros, name_of, onnxruntime: bool = False
) -> HostLayer:
    ins = tuple(name_of(i) for i in node.inputs)
    out = name_of(node.output)
    if node.op is OpType.MAXPOOL:
        a = node.attrs
        return HostLayer(node.name, host_ops.MaxPool(a.kernel, a.stride, a.pads), ins, out)
    if node.op is OpType.FLATTEN:
        return HostLayer(node.name, host_ops.Flatten(), ins, out)
    if node.op is OpType.GLOBALAVGPOOL:
        n, c, h, w = graph.shape(node.inputs[0])
        m, s = requant_params(scales[node.inputs[0]] / (h * w * scales[node.output]), h * w * 256)
        zx, zy = zeros.get(node.inputs[0], 0), zeros.get(node.output, 0)
        return HostLayer(node.name, host_ops.GlobalAvgPool(int(m), s, zx, zy), ins, out)
    # ADD: each side at its own scale, to the output's (float32 ratios, as onnxruntime)
    s_o = np.float32(scales[node.output])
    ratio_a, ratio_b = (float(np.float32(scales[i]) / s_o) for i in node.inputs)
    z_a, z_b, z_y = (zeros.get(t, 0) for t in (*node.inputs, node.output))
    clip = _clip(getattr(node.attrs, "clip", None), scales[node.output], z_y)
    fixed = None
    if onnxruntime:  # QLinearAdd's constant, from the uint8 zero points x86 reads
        s_a, s_b = (scales[i] for i in node.inputs)
        fields = add_fields(s_a, z_a + 128, s_b, z_b + 128, scales[node.output], z_y + 128)
        fixed = float(fields.fixed)
    add = host_ops.Add(ratio_a, ratio_b, clip, z_a, z_b, z_y, fixed)
    return HostLayer(node.name, add, ins, out)


def model_zero_points(graph: Graph, ranges: Ranges) -> dict[str, int]:
    """A quantized model's zero points (calibrated scales are symmetric: none). A max pool's or
    a flatten's two sides must share one, as they share a scale: else an error naming both."""
    if ranges.observer is not Observer.MODEL:
        return {}
    zeros = dict(graph.zero_points)
    for node in graph.nodes:
        if node.op in (OpType.MAXPOOL, OpType.FLATTEN):
            a, b = node.inputs[0], node.output
            if zeros.get(a, 0) != zeros.get(b, 0):
                raise ModelError(
                    f"tensors {a!r} (zero point {zeros.get(a, 0)}) and {b!r} (zero "
                    f"point {zeros.get(b, 0)}) must share a zero point here",
                )
    return zeros


def quantize(
    graph: Graph, ranges: Ranges, exact: bool | str | None = None, cfg=None
) -> QuantizedNetwork:
    """The int8 network of `graph` with activation ranges `ranges`. `exact` requantization
    (the default for a model that brings its own scales) reproduces the float32 rounding of
    the runtime that quantized the model (onnxruntime) on all but a few elements in 10**4, at
    four more ALU passes per accumulator tile (see `_requant`); on a config with a
    requantization unit the convs and the global average pool round exactly as onnxruntime.
    `exact` "onnxruntime" also puts the Adds on the host in QLinearAdd's x86 form, so every
    rounding is onnxruntime's (a config with the unit only). Each node goes where
    `partition(graph, cfg)` places it (`cfg` None: what does not depend on the config)."""
    onnxruntime = exact == REQUANT_ONNXRUNTIME
    if onnxruntime and not (cfg is not None and cfg.requant_lanes):
        tag = cfg.tag if cfg is not None else "(none)"
        raise ModelError(
            f"requantization {REQUANT_ONNXRUNTIME!r} runs the convs on the requantization unit: "
            f"config {tag} has none; use a config with requant_lanes > 0"
        )
    if exact is not None and not isinstance(exact, bool) and not onnxruntime:
        raise ModelError(
            f"exact requantization must be True, False, None or {REQUANT_ONNXRUNTIME!r}, "
            f"not {exact!r}"
        )
    exact = ranges.observer is Observer.MODEL if exact is None else bool(exact)
    check_supported(graph)
    scales = activation_scales(graph, ranges)
    zeros = model_zero_points(graph, ranges)

    placed = {p.node: p for p in partition(graph, cfg)}  # the one placement: what is built
    views = {
        n.output: n.inputs[0]
        for n in graph.nodes
        if placed[n.name].reason in (Reason.FLATTEN_VIEW, Reason.FLATTEN_ABSORBED)
    }
    absorbed = {
        n.output: n.inputs[0]
        for n in graph.nodes
        if placed[n.name].reason is Reason.FLATTEN_ABSORBED
    }  # read as an HxW conv

    def name_of(t: str) -> str:
        t = views.get(t, t)
        return f"{t}:q" if t in graph.inputs or t in graph.outputs else t

    def on_accelerator(node: Node) -> bool:
        return placed[node.name].place is Place.ACCELERATOR

    layers: list = []
    for x in graph.inputs:
        quant = host_ops.Quantize(scales[x], zeros.get(x, 0))
        layers.append(HostLayer(f"quantize:{x}", quant, (x,), name_of(x)))
    has_unit = bool(cfg is not None and cfg.requant_lanes)
    for node in graph.nodes:
        if node.op in (OpType.CONV, OpType.DENSE):
            through = absorbed.get(node.inputs[0]) if node.op is OpType.DENSE else None
            # the unit's parameter rows stay in a tile's bank: where they leave it none (a 1,000-
            # class classifier, a small accumulator) the ALU requantizes, but not onnxruntime's way
            out = graph.shape(node.output)[-1 if node.op is OpType.DENSE else 1]
            unit = has_unit and (onnxruntime or param_rows(out, cfg.block_out) < cfg.acc_bank_rows)
            layers.append(
                _conv_layer(
                    graph,
                    node,
                    scales,
                    zeros,
                    name_of,
                    exact,
                    on_accelerator(node),
                    through,
                    unit,
                    unit and bool(cfg.requant_residual),
                )
            )
        elif node.op is OpType.MAXPOOL and on_accelerator(node):
            n, c, h, w = graph.shape(node.inputs[0])
            a = node.attrs
            op = MaxPool2d(n, c, h, w, a.kernel, a.stride, a.pads, pad_value=INT8[0])  # -inf
            layers.append(PoolLayer(node.name, op, name_of(node.inputs[0]), name_of(node.output)))
        elif node.op is OpType.GLOBALAVGPOOL:
            layers.append(_gap_layer(graph, node, scales, zeros, name_of, has_unit))
        elif node.op is OpType.ADD and on_accelerator(node) and not onnxruntime:
            layers.append(_add_layer(graph, node, scales, zeros, name_of))
        elif node.op is OpType.ADD:
            layers.append(_host_layer(graph, node, scales, zeros, name_of, onnxruntime))
        elif node.output in views:
            continue
        else:
            layers.append(_host_layer(graph, node, scales, zeros, name_of))
    for y in graph.outputs:
        dequantize = host_ops.Dequantize(scales[y], zeros.get(y, 0))
        layers.append(HostLayer(f"dequantize:{y}", dequantize, (name_of(y),), y))
    tensors = {}
    for t, s in scales.items():
        if t not in views:
            tensors[name_of(t)] = TensorSpec(
                name_of(t), graph.shape(t), "int8", float(s), zeros.get(t, 0)
            )
    for t in (*graph.inputs, *graph.outputs):
        tensors[t] = TensorSpec(t, graph.shape(t), "float32", 1.0)
    float_names = {name_of(t): t for t in scales if t not in views}
    return QuantizedNetwork(graph.name, layers, tensors, graph.inputs, graph.outputs, float_names)
