"""Models in onnxruntime's QOperator form (`quantize_static` with `QuantFormat.QOperator`):
QLinearConv, QLinearMatMul, and the com.microsoft QGemm, QLinearAdd and
QLinearGlobalAveragePool, which read and write int8 tensors with their scales and zero points
as inputs.

`expand_qoperators` rewrites each such node, on the ONNX model before import, as the QDQ form
it stands for: DequantizeLinear on every quantized input, the float operator, QuantizeLinear
on the output (a QGemm without an output scale ends in float); a Flatten, Reshape or MaxPool
the model runs on an int8 tensor runs on its dequantized values, quantized again at the same
scale. The QDQ pass (`qdq.absorb_qdq`) then reads both forms alike. A bias of QLinearConv or
QGemm is int32 at the input scale times the weight scale (per channel), which becomes an
initializer of its own.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.frontend.rewrite import copy_model, finish
from tilecraft.errors import ModelError

MS = "com.microsoft"
# op (domain, type) -> (operator it stands for, positions of (x, scale, zero) triples, of the
# output (scale, zero), of the int32 bias)
_FORMS = {
    ("", "QLinearConv"): ("Conv", [(0, 1, 2), (3, 4, 5)], (6, 7), 8),
    ("", "QLinearMatMul"): ("MatMul", [(0, 1, 2), (3, 4, 5)], (6, 7), None),
    (MS, "QGemm"): ("Gemm", [(0, 1, 2), (3, 4, 5)], (7, 8), 6),
    (MS, "QLinearAdd"): ("Add", [(0, 1, 2), (3, 4, 5)], (6, 7), None),
    (MS, "QLinearGlobalAveragePool"): ("GlobalAveragePool", [(0, 1, 2)], (3, 4), None),
}


# operators a QOperator model may run on int8 tensors directly (values moved or compared)
_ON_INT8 = {"Flatten", "Reshape", "MaxPool", "Identity", "Squeeze", "Unsqueeze", "Transpose"}


def _key(node) -> tuple[str, str]:
    return ("" if node.domain in ("", "ai.onnx") else node.domain, node.op_type)


def has_qoperators(model) -> bool:
    return any(_key(n) in _FORMS for n in model.graph.node)


def expand_qoperators(model):
    """A copy of `model` with every QOperator node in its QDQ form (see the module)."""
    from onnx import helper, numpy_helper

    out, inits = copy_model(model)
    g = out.graph
    nodes = []
    quantized: dict[str, list[str]] = {}  # int8 tensor -> its [scale, zero point] names
    for i, node in enumerate(g.node):
        form = _FORMS.get(_key(node))
        if node.op_type == "QuantizeLinear":
            quantized[node.output[0]] = list(node.input[1:3])
        if form is None and node.op_type in _ON_INT8 and node.input[0] in quantized:
            nodes += _in_float(helper, node, quantized, i)
            continue
        if form is None:
            nodes.append(node)
            continue
        op, triples, (ys, yz), bias_at = form
        name = node.name or f"{node.op_type}_{i}"
        ins = list(node.input)
        at = _given(ins)

        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "QLinearGlobalAveragePool" and attrs.pop("channels_last", 0):
            raise ModelError(f"node {name}: a channels-last QLinearGlobalAveragePool is not read")
        floats = []
        for j, (x, s, z) in enumerate(triples):
            f = f"{name}:in{j}"
            dq_in = [ins[x], ins[s]] + ([ins[z]] if at(z) else [])
            axis = _weight_axis(node, j, attrs, inits, ins[s])
            extra = {"axis": axis} if axis is not None else {}
            nodes.append(helper.make_node("DequantizeLinear", dq_in, [f], f"{name}:dq{j}", **extra))
            floats.append(f)
        if bias_at is not None and at(bias_at):
            floats.append(_bias(helper, numpy_helper, g, nodes, inits, name, ins, bias_at))
        result = f"{name}:out" if at(ys) else node.output[0]
        nodes.append(helper.make_node(op, floats, [result], name, **attrs))
        if at(ys):
            q_in = [result, ins[ys]] + ([ins[yz]] if at(yz) else [])
            nodes.append(helper.make_node("QuantizeLinear", q_in, [node.output[0]], f"{name}:q"))
            quantized[node.output[0]] = q_in[1:]
    return finish(out, nodes, (MS,))


def _given(ins: list[str]):
    """A lookup of optional inputs: the name at position k, or None where it is left out."""
    return lambda k: ins[k] if k < len(ins) and ins[k] else None


def _in_float(helper, node, quantized: dict, i: int) -> list:
    """A shape or max operator the model runs on an int8 tensor, run on its dequantized values
    and quantized again at the same scale (exact: it moves or compares values only)."""
    name = node.name or f"{node.op_type}_{i}"
    params = quantized[node.input[0]]
    x, y = f"{name}:in", f"{name}:out"
    dq = helper.make_node("DequantizeLinear", [node.input[0], *params], [x], f"{name}:dq")
    op = type(node)()
    op.CopyFrom(node)
    op.input[0], op.output[0] = x, y
    q = helper.make_node("QuantizeLinear", [y, *params], [node.output[0]], f"{name}:q")
    quantized[node.output[0]] = params
    return [dq, op, q]


def _weight_axis(node, j: int, attrs: dict, inits: dict, scale: str) -> int | None:
    """The channel axis of a per-channel weight's scale (the output channels), else None."""
    if j != 1 or scale not in inits or int(np.prod(inits[scale].dims or [1])) == 1:
        return None
    if node.op_type == "QLinearConv":
        return 0
    if node.op_type == "QGemm":
        return 0 if attrs.get("transB", 0) else 1
    return 1  # MatMul: (K, N), one scale per column


def _bias(helper, numpy_helper, g, nodes, inits, name: str, ins, k: int) -> str:
    """DequantizeLinear of the int32 bias at (input scale x weight scale)."""
    for s in (ins[1], ins[4]):
        if s not in inits:
            raise ModelError(f"node {name}: its scale {s!r} must be an initializer")
    xs = numpy_helper.to_array(inits[ins[1]]).astype(np.float32)
    ws = numpy_helper.to_array(inits[ins[4]]).astype(np.float32)
    scale = (xs * ws).astype(np.float32).reshape(-1)
    scale_name = f"{name}:bias_scale"
    g.initializer.append(
        numpy_helper.from_array(scale if scale.size > 1 else scale[:1].reshape(()), scale_name)
    )
    f = f"{name}:bias"
    extra = {"axis": 0} if scale.size > 1 else {}
    nodes.append(
        helper.make_node("DequantizeLinear", [ins[k], scale_name], [f], f"{name}:dqb", **extra)
    )
    return f
