"""Models quantized by others, in ONNX's QDQ form (onnxruntime's `quantize_static` with
`QuantFormat.QDQ`): QuantizeLinear/DequantizeLinear pairs around each tensor, int8 weights and
int32 biases behind a DequantizeLinear.

`absorb_qdq` turns such a graph into the float graph the passes expect plus what the quantizer
needs from the model: each activation's scale (`Graph.scales`), carried through float Relu,
MaxPool and Flatten nodes the model leaves between quantized tensors. Weights and biases become
float constants equal to their dequantized values, and each keeps its own scale
(`Graph.weight_scales`), so the quantizer gives back the model's own integers. Activations may
be asymmetric, int8 or uint8 (onnxruntime's default): each keeps its zero point
(`Graph.zero_points`), a uint8 one less 128, as the accelerator stores uint8 values (q - 128,
in int8). Per-channel activation scales are an error naming the tensor.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.frontend.ir import Graph, Node, OpType
from tilecraft.errors import ModelError


def _scale_and_zero(graph: Graph, node: Node, stored: bool = False):
    """The node's scale and zero point; `stored`: the zero point as the accelerator stores it
    (a uint8 one, and an omitted one, which ONNX makes uint8 0, less 128)."""
    scale_name = node.inputs[1]
    if scale_name not in graph.constants:
        raise ModelError(f"node {node.name}: its scale {scale_name!r} must be a constant")
    scale = np.asarray(graph.constants[scale_name], np.float64)
    zero = np.zeros_like(scale, dtype=np.int64)
    unsigned = True  # ONNX: an omitted zero point is uint8 0
    if len(node.inputs) > 2 and node.inputs[2]:
        if node.inputs[2] not in graph.constants:
            raise ModelError(f"node {node.name}: its zero point must be a constant")
        const = np.asarray(graph.constants[node.inputs[2]])
        if stored and const.dtype not in (np.int8, np.uint8):
            raise ModelError(
                f"node {node.name}: zero point of type {const.dtype} is not read; "
                "tilecraft reads int8 and uint8 tensors"
            )
        zero, unsigned = const.astype(np.int64), const.dtype == np.uint8
    return scale, (zero - 128 if stored and unsigned else zero)


def _dequantized(graph: Graph, node: Node) -> np.ndarray:
    q = np.asarray(graph.constants[node.inputs[0]], np.float64)
    scale, zero = _scale_and_zero(graph, node)
    if scale.ndim:  # per channel along the node's axis
        shape = [1] * q.ndim
        shape[node.attrs.axis % q.ndim] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((q - zero) * scale).astype(np.float32)


# float operators whose output is exact at their input's scale (and the input at the output's)
_SAME_SCALE = (OpType.RELU, OpType.MAXPOOL, OpType.FLATTEN, OpType.RESHAPE, OpType.IDENTITY)


def _carry_scales(nodes: list[Node], scales: dict[str, float], zeros: dict[str, int]) -> None:
    """A tensor the model leaves unquantized between two that it quantizes (onnxruntime's
    QOperator form runs Relu, MaxPool and Flatten in float) takes the scale it is exact at:
    through a scale-preserving operator, forward from its input, or back from its output
    when it has no other use."""
    uses: dict[str, int] = {}
    for n in nodes:
        for x in n.inputs:
            uses[x] = uses.get(x, 0) + 1
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if n.op not in _SAME_SCALE or not n.inputs:
                continue
            x, y = n.inputs[0], n.output
            if y not in scales and x in scales:
                scales[y], changed = scales[x], True
                if x in zeros:
                    zeros[y] = zeros[x]
            elif x not in scales and y in scales and uses.get(x) == 1:
                scales[x], changed = scales[y], True
                if y in zeros:
                    zeros[x] = zeros[y]


def absorb_qdq(graph: Graph) -> Graph:
    """Constant DequantizeLinear folded; each Q -> DQ pair removed, its scale recorded."""
    if not any(n.op in (OpType.QUANTIZE, OpType.DEQUANTIZE) for n in graph.nodes):
        return graph
    constants, scales = dict(graph.constants), dict(graph.scales)
    weight_scales, zeros = dict(graph.weight_scales), dict(graph.zero_points)
    rename: dict[str, str] = {}
    consumers = graph.consumers()
    drop = set()
    for node in graph.nodes:
        if node.op is OpType.DEQUANTIZE and node.inputs[0] in graph.constants:
            constants[node.output] = _dequantized(graph, node)
            scale, zero = _scale_and_zero(graph, node)
            if not np.any(zero):
                weight_scales[node.output] = scale.reshape(-1)
            drop.add(node.name)
    for q in graph.nodes:
        if q.op is not OpType.QUANTIZE:
            continue
        scale, zero = _scale_and_zero(graph, q, stored=True)
        if scale.size != 1:
            raise ModelError(
                f"tensor {q.inputs[0]!r} is quantized with {scale.size} scales: "
                "tilecraft reads one scale per activation tensor"
            )
        users = consumers.get(q.output, [])
        if not users or any(u.op is not OpType.DEQUANTIZE for u in users):
            raise ModelError(f"QuantizeLinear {q.name}: only DequantizeLinear may read its output")
        src = q.inputs[0]
        scales[src] = float(scale.reshape(()))
        if int(zero.reshape(())):
            zeros[src] = int(zero.reshape(()))
        drop.add(q.name)
        for dq in users:
            drop.add(dq.name)
            rename[dq.output] = src
    nodes = [n for n in graph.nodes if n.name not in drop]
    outputs = list(graph.outputs)
    for out in outputs:  # a graph output keeps its name: rename its producer
        if out in rename:
            src = rename.pop(out)
            nodes = [
                n.with_(
                    outputs=tuple(out if o == src else o for o in n.outputs),
                    inputs=tuple(out if x == src else x for x in n.inputs),
                )
                for n in nodes
            ]
            rename = {k: (out if v == src else v) for k, v in rename.items()}
            scales[out] = scales.pop(src)
            if src in zeros:
                zeros[out] = zeros.pop(src)

    def root(t: str) -> str:  # Q -> DQ -> Q -> DQ: follow every pair back to its source
        while t in rename:
            t = rename[t]
        return t

    nodes = [n.with_(inputs=tuple(root(x) for x in n.inputs)) for n in nodes]
    _carry_scales(nodes, scales, zeros)
    inputs = tuple(graph.inputs)
    types = dict(graph.types)
    used = {x for n in nodes for x in n.inputs}
    constants = {k: v for k, v in constants.items() if k in used}
    weight_scales = {k: v for k, v in weight_scales.items() if k in constants}
    return graph.replace(
        nodes=tuple(nodes),
        inputs=inputs,
        outputs=tuple(outputs),
        constants=constants,
        scales=scales,
        types=types,
        weight_scales=weight_scales,
        zero_points=zeros,
    )
