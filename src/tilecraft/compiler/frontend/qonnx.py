"""QONNX models (Brevitas and FINN exports): a `Quant` node (`IntQuant` in newer QONNX) of the
qonnx/finn custom domains fake-quantizes a float tensor,
`y = (clip(round(x / scale + zeropt), lo, hi) - zeropt) * scale`, its integer range [lo, hi]
given by `bitwidth`, `signed` and `narrow`.

`expand_quant` rewrites each one, on the ONNX model before import, in the QDQ form the rest of
the front end reads:
- on a constant whose integers fit int8 (a weight): the integers, computed here as QONNX
  defines them, as an int8 initializer behind a DequantizeLinear at the model's scale (per
  tensor, or per channel along the one axis the scale varies on);
- on a wider constant (a bias on a 32-bit grid): its fake-quantized float value, folded;
- on an activation: QuantizeLinear -> DequantizeLinear at its scale and zero point, int8 (or
  uint8 for an unsigned range), after a Clip to [(lo - zeropt) * scale, (hi - zeropt) * scale]
  where the range is narrower than the container (fewer bits, narrow range).

Read: rounding ROUND (half to even; QuantizeLinear rounds x / scale before adding the zero point,
QONNX after: the two differ only on exact ties with an odd zero point), weights with zero point 0
and a range inside int8, activations with one scale and an integer zero point, signed up to 8
bits or unsigned up to 8. Anything else is an error naming the node and what would be read.
BipolarQuant, Trunc and FloatQuant are left as they are, for the unsupported-operator report.
"""

from __future__ import annotations

import numpy as np

from tilecraft.compiler.frontend.rewrite import copy_model, finish
from tilecraft.errors import ModelError

DOMAINS = ("qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas")
QUANT_OPS = ("Quant", "IntQuant")
INT8 = (-128, 127)
UINT8 = (0, 255)


def has_quant_nodes(model) -> bool:
    return any(_is_quant(n) for n in model.graph.node)


def _is_quant(node) -> bool:
    return node.domain in DOMAINS and node.op_type in QUANT_OPS


def int_range(bitwidth: int, signed: bool, narrow: bool) -> tuple[int, int]:
    """QONNX's integer range for the attributes."""
    if signed:
        return -(1 << (bitwidth - 1)) + int(narrow), (1 << (bitwidth - 1)) - 1
    return 0, (1 << bitwidth) - 1 - int(narrow)


def fake_quantize(x, scale, lo: int, hi: int) -> np.ndarray:
    """QONNX's Quant with ROUND and zero point 0, in float32: clip, then round half to even."""
    scale = np.asarray(scale, np.float32)
    y = np.clip(np.asarray(x, np.float32) / scale, lo, hi)
    return (np.rint(y) * scale).astype(np.float32)


def expand_quant(model):
    """A copy of `model` with every Quant/IntQuant node in its QDQ form (see the module)."""
    from onnx import helper, numpy_helper

    out, inits = copy_model(model)
    g = out.graph
    nodes = []
    for i, node in enumerate(g.node):
        if not _is_quant(node):
            nodes.append(node)
            continue
        name = node.name or f"{node.op_type}_{i}"
        x, scale, zeropt, lo, hi = _read(numpy_helper, node, name, inits)
        y = node.output[0]
        if x in inits:
            if zeropt:
                raise ModelError(
                    f"node {name}: weights with zero point {zeropt} are not read; "
                    f"tilecraft reads symmetric weights (zero point 0)"
                )
            value = numpy_helper.to_array(inits[x])
            if (lo, hi) == _within_int8(lo, hi):
                nodes.append(_weight(helper, numpy_helper, g, name, value, scale, lo, hi, y))
            else:  # wider than int8 (a bias): the fake-quantized value, folded
                folded = fake_quantize(value, scale, lo, hi)
                g.initializer.append(numpy_helper.from_array(folded, y))
            continue
        nodes += _activation(helper, numpy_helper, g, name, x, scale, zeropt, (lo, hi), y)
    return finish(out, nodes, DOMAINS)


def _within_int8(lo: int, hi: int) -> tuple[int, int]:
    return max(lo, INT8[0]), min(hi, INT8[1])


def _read(numpy_helper, node, name: str, inits: dict):
    """(input, scale, zero point, lo, hi) of a Quant node, or a ModelError saying what is not
    read."""
    from onnx import helper

    if len(node.input) != 4:
        raise ModelError(
            f"node {name}: {node.op_type} takes 4 inputs (x, scale, zeropt, "
            f"bitwidth); it has {len(node.input)}"
        )
    consts = []
    for role, tensor in zip(("scale", "zeropt", "bitwidth"), node.input[1:]):
        if tensor not in inits:
            raise ModelError(f"node {name}: its {role} {tensor!r} must be an initializer")
        consts.append(numpy_helper.to_array(inits[tensor]))
    scale, zeropt, bits = consts
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attrs.get("rounding_mode", b"ROUND")
    mode = (mode.decode() if isinstance(mode, bytes) else str(mode)).upper()
    if mode != "ROUND":
        raise ModelError(
            f"node {name}: rounding_mode {mode!r} is not read; tilecraft reads "
            f"'ROUND' (half to even, as QuantizeLinear rounds)"
        )
    zero = np.asarray(zeropt, np.float64)
    if zero.size != 1 or float(zero.reshape(())) != int(zero.reshape(())):
        raise ModelError(
            f"node {name}: zero point {zero.reshape(-1).tolist()} is not read; "
            f"tilecraft reads one whole-number zero point"
        )
    if np.any(scale <= 0) or not np.all(np.isfinite(scale)):
        raise ModelError(f"node {name}: scales must be positive and finite")
    b = float(np.asarray(bits).reshape(-1)[0]) if np.asarray(bits).size == 1 else -1.0
    if b != int(b) or not 2 <= b <= 32:
        raise ModelError(
            f"node {name}: bitwidth {np.asarray(bits).tolist()} must be one whole "
            f"number of bits, 2..32"
        )
    signed, narrow = bool(attrs.get("signed", 1)), bool(attrs.get("narrow", 0))
    lo, hi = int_range(int(b), signed, narrow)
    return node.input[0], np.asarray(scale, np.float32), int(zero.reshape(())), lo, hi


def _axis(scale: np.ndarray, value_shape: tuple[int, ...], name: str) -> int | None:
    """The one axis a per-channel scale varies on (None: per tensor)."""
    if scale.size == 1:
        return None
    varying = [k for k, d in enumerate(scale.shape) if d > 1]
    if len(varying) != 1 or scale.ndim != len(value_shape):
        raise ModelError(
            f"node {name}: a scale of shape {scale.shape} is not read; give one "
            f"scale, or one per channel along one axis"
        )
    return varying[0]


def _weight(helper, numpy_helper, g, name: str, value, scale, lo: int, hi: int, y: str):
    """A constant's QONNX integers as int8 behind a DequantizeLinear at the model's scale."""
    q = np.rint(np.clip(np.asarray(value, np.float32) / scale, lo, hi)).astype(np.int8)
    axis = _axis(scale, q.shape, name)
    q_name, s_name, z_name = f"{name}:int", f"{name}:scale", f"{name}:zero"
    s = scale.reshape(-1) if axis is not None else scale.reshape(())
    g.initializer.extend(
        [
            numpy_helper.from_array(q, q_name),
            numpy_helper.from_array(s, s_name),
            numpy_helper.from_array(np.zeros(s.shape, np.int8), z_name),
        ]
    )
    extra = {"axis": axis} if axis is not None else {}
    return helper.make_node("DequantizeLinear", [q_name, s_name, z_name], [y], name, **extra)


def _activation(
    helper, numpy_helper, g, name: str, x: str, scale, zero: int, bounds: tuple[int, int], y: str
):
    """Clip (where the range is narrower than its container), QuantizeLinear, DequantizeLinear,
    in int8, or uint8 for an unsigned range."""
    lo, hi = bounds
    if scale.size != 1:
        raise ModelError(
            f"node {name}: activation {x!r} has {scale.size} scales; tilecraft "
            f"reads one scale per activation tensor"
        )
    box, dtype = (UINT8, np.uint8) if lo >= 0 and hi > INT8[1] else (INT8, np.int8)
    if not (box[0] <= lo and hi <= box[1] and box[0] <= zero <= box[1]):
        raise ModelError(
            f"node {name}: activation {x!r} is quantized to [{lo}, {hi}] with zero "
            f"point {zero}, which neither int8 nor uint8 holds; tilecraft reads "
            f"activations of up to 8 bits"
        )
    s = scale.reshape(())
    s_name, z_name = f"{name}:scale", f"{name}:zero"
    g.initializer.extend(
        [
            numpy_helper.from_array(s, s_name),
            numpy_helper.from_array(np.asarray(zero, dtype), z_name),
        ]
    )
    nodes, src = [], x
    if (lo, hi) != box:
        lo_name, hi_name = f"{name}:lo", f"{name}:hi"
        g.initializer.extend(
            [
                numpy_helper.from_array(np.float32((lo - zero) * s), lo_name),
                numpy_helper.from_array(np.float32((hi - zero) * s), hi_name),
            ]
        )
        src = f"{name}:clipped"
        nodes.append(helper.make_node("Clip", [x, lo_name, hi_name], [src], f"{name}:clip"))
    q = f"{name}:q"
    nodes.append(helper.make_node("QuantizeLinear", [src, s_name, z_name], [q], f"{name}:quant"))
    nodes.append(helper.make_node("DequantizeLinear", [q, s_name, z_name], [y], name))
    return nodes
