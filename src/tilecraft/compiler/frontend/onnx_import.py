"""ONNX in: a file (or a ModelProto) becomes a `Graph` with every tensor's static shape.

onnxruntime's QOperator nodes and QONNX's Quant nodes are first rewritten in their QDQ form
(`qoperator`, `qonnx`). Checks come
before anything is built, each a `ModelError` naming the thing: a file that is not
ONNX (or is truncated), an opset below 13, a dynamic dimension with no `input_shapes` entry, and
every unsupported operator at once (`UnsupportedOperatorError`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tilecraft.compiler.frontend.ir import (
    AxisAttrs,
    BatchNormAttrs,
    ClipAttrs,
    ConvAttrs,
    GemmAttrs,
    Graph,
    NoAttrs,
    Node,
    OpType,
    PoolAttrs,
    ReshapeAttrs,
    TensorType,
)
from tilecraft.compiler.frontend.qonnx import expand_quant, has_quant_nodes
from tilecraft.compiler.frontend.qoperator import expand_qoperators, has_qoperators
from tilecraft.errors import ModelError, UnsupportedOperatorError

MIN_OPSET = 13
KNOWN = {op.value: op for op in OpType if op is not OpType.DENSE}
_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 10: "float16",
           11: "float64"}  # fmt: skip


def _onnx():
    try:
        import onnx
    except ImportError as e:  # pragma: no cover - the onnx extra is part of dev
        raise ModelError("reading ONNX needs onnx: pip install 'tilecraft[onnx]'") from e
    return onnx


def load_onnx(source, input_shapes: dict[str, tuple[int, ...]] | None = None) -> Graph:
    """The graph of an ONNX model (a path or a ModelProto); `input_shapes` fixes dynamic
    dimensions by input name."""
    onnx = _onnx()
    model = _read(onnx, source)
    where = str(source) if isinstance(source, (str, Path)) else "the model"
    if has_qoperators(model):  # onnxruntime's QOperator form, read as its QDQ form
        model = expand_qoperators(model)
    if has_quant_nodes(model):  # QONNX's Quant nodes, read as QDQ
        model = expand_quant(model)
    _check_opset(model, where)
    _check_operators(model, where)
    _fix_input_shapes(onnx, model, input_shapes or {}, where)
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as e:
        raise ModelError(f"{where}: shape inference failed: {str(e).splitlines()[0]}") from e
    return _graph(onnx, model, where)


def _read(onnx, source):
    if not isinstance(source, (str, Path)):
        model = source
    else:
        path = Path(source)
        if not path.is_file():
            raise ModelError(f"{str(path)!r} is not a file")
        try:
            model = onnx.load(str(path))
        except Exception as e:
            raise ModelError(f"{str(path)!r} is not a readable ONNX model (truncated?): {e}") from e
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(
            f"{source if isinstance(source, (str, Path)) else 'model'} "
            f"is not a valid ONNX model: {first}"
        ) from e
    if not model.graph.node:
        raise ModelError("the ONNX model has no nodes")
    return model


def _check_opset(model, where: str) -> None:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version < MIN_OPSET:
            raise ModelError(
                f"{where} uses ONNX opset {opset.version}; tilecraft reads opset {MIN_OPSET} and "
                f"later (convert with onnx.version_converter.convert_version(model, {MIN_OPSET}))"
            )


def _check_operators(model, where: str) -> None:
    bad = [
        (
            n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}",
            n.name or f"#{i}",
            False,
        )
        for i, n in enumerate(model.graph.node)
        if n.domain not in ("", "ai.onnx") or n.op_type not in KNOWN
    ]
    if bad:
        lines = "\n".join(
            f"  {op} (node {name}): no accelerator mapping, no CPU kernel" for op, name, _ in bad
        )
        raise UnsupportedOperatorError(
            f"{where} has {len(bad)} unsupported operator(s); supported: "
            f"{', '.join(sorted(KNOWN))}\n{lines}",
            bad,
        )


def _fix_input_shapes(onnx, model, given: dict, where: str) -> None:
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    unknown = set(given) - {i.name for i in inputs}
    if unknown:
        raise ModelError(
            f"--input-shape names {sorted(unknown)}, not inputs of {where} "
            f"(its inputs: {[i.name for i in inputs]})"
        )
    for inp in inputs:
        dims = inp.type.tensor_type.shape.dim
        if inp.name in given:
            shape = tuple(int(d) for d in given[inp.name])
            if len(shape) != len(dims) or min(shape, default=1) < 1:
                raise ModelError(
                    f"input shape {shape} for {inp.name!r} must have {len(dims)} positive dims"
                )
            declared = _shape_text(dims)
            for axis, (dim, value) in enumerate(zip(dims, shape)):
                if dim.HasField("dim_value") and dim.dim_value != value:
                    raise ModelError(
                        f"input {inp.name!r} has a fixed dimension {dim.dim_value} at axis "
                        f"{axis}, not {value} (its shape: {declared})"
                    )
                dim.Clear()
                dim.dim_value = value
            continue
        for axis, dim in enumerate(dims):
            if not dim.HasField("dim_value") or dim.dim_value < 1:
                label = dim.dim_param or "?"
                raise ModelError(
                    f"input {inp.name!r} has a dynamic dimension {label!r} (axis {axis}; its "
                    f"shape: {_shape_text(dims)}); give its shape: --input-shape "
                    f"{inp.name}={_shape_text(dims, batch=1)}"
                )


def _shape_text(dims, batch: int | None = None) -> str:
    """An input's shape as --input-shape takes it: fixed dimensions as numbers, dynamic ones
    by name (`batch` for a dynamic first axis, where given)."""
    out = []
    for axis, dim in enumerate(dims):
        if dim.HasField("dim_value") and dim.dim_value >= 1:
            out.append(str(dim.dim_value))
        elif axis == 0 and batch is not None:
            out.append(str(batch))
        else:
            out.append(dim.dim_param or f"D{axis}")
    return ",".join(out)


def _type(value_info) -> TensorType | None:
    t = value_info.type.tensor_type
    if not t.HasField("shape") or any(not d.HasField("dim_value") for d in t.shape.dim):
        return None
    return TensorType(tuple(int(d.dim_value) for d in t.shape.dim), _DTYPES.get(t.elem_type, "?"))


def _graph(onnx, model, where: str) -> Graph:
    from onnx import numpy_helper

    g = model.graph
    constants = {t.name: numpy_helper.to_array(t).copy() for t in g.initializer}
    types = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.name not in constants and (t := _type(vi)) is not None:
            types[vi.name] = t
    nodes, seen = [], set()
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        if name in seen:  # the checker allows duplicates; the passes key on names
            name = f"{name}_{i}"
        seen.add(name)
        if n.op_type == "Constant":  # folded into the constants here
            constants[n.output[0]] = _constant_value(onnx, n)
            continue
        op = KNOWN[n.op_type]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        inputs = tuple(n.input)
        node_attrs = _attrs(op, attrs, name, inputs, constants, types)
        node = Node(name, op, inputs, tuple(n.output), node_attrs)
        nodes.append(node)
    for node in nodes:
        for out in node.outputs:
            if out and out not in types and out not in constants:
                raise ModelError(
                    f"{where}: tensor {out!r} (from node {node.name}) has no static "
                    "shape after shape inference"
                )
    inputs = tuple(i.name for i in g.input if i.name not in constants)
    name = g.name or "model"
    return Graph(tuple(nodes), inputs, tuple(o.name for o in g.output), types, constants, name)


def _constant_value(onnx, node) -> np.ndarray:
    from onnx import numpy_helper

    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t).copy()
        if a.name in ("value_float", "value_int"):
            return np.array(onnx.helper.get_attribute_value(a))
        if a.name in ("value_floats", "value_ints"):
            return np.array(list(onnx.helper.get_attribute_value(a)))
    raise ModelError(f"Constant node {node.name!r} has no value tensor")


def _pair(values, default: int) -> tuple[int, int]:
    values = tuple(int(v) for v in values) if values is not None else (default, default)
    return values if len(values) == 2 else (values[0], values[0])


def _pads(values) -> tuple[int, int, int, int]:
    if values is None:
        return (0, 0, 0, 0)
    p = tuple(int(v) for v in values)
    return (p[0], p[1], p[2], p[3]) if len(p) == 4 else (p[0], p[0], p[0], p[0])


def _attrs(op: OpType, a: dict, name: str, inputs: tuple[str, ...], constants: dict, types: dict):
    if "auto_pad" in a and a["auto_pad"] not in (b"NOTSET", "NOTSET"):
        raise ModelError(
            f"node {name}: auto_pad {a['auto_pad']!r} is not supported; export with explicit pads"
        )
    if op is OpType.CONV:
        kernel = a.get("kernel_shape")
        if kernel is None:  # optional in ONNX: the weight's (a constant, or a DequantizeLinear's)
            weight = constants.get(inputs[1])
            shape = (
                weight.shape if weight is not None else getattr(types.get(inputs[1]), "shape", None)
            )
            if shape is None or len(shape) != 4:
                raise ModelError(
                    f"node {name}: no kernel_shape, and its weight {inputs[1]!r} "
                    f"has no static 4-D shape to take it from"
                )
            kernel = shape[2:]
        return ConvAttrs(
            kernel=_pair(kernel, 1),
            stride=_pair(a.get("strides"), 1),
            pads=_pads(a.get("pads")),
            groups=int(a.get("group", 1)),
            dilation=_pair(a.get("dilations"), 1),
        )
    if op in (OpType.MAXPOOL, OpType.AVGPOOL):
        if a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations", (1, 1))):
            raise ModelError(f"node {name}: ceil_mode and dilated pooling are not supported")
        return PoolAttrs(
            kernel=_pair(a.get("kernel_shape"), 1),
            stride=_pair(a.get("strides"), 1),
            pads=_pads(a.get("pads")),
            count_include_pad=bool(a.get("count_include_pad", 0)),
        )
    if op is OpType.CLIP:
        bounds = [float("-inf"), float("inf")]
        for k, tensor in enumerate(inputs[1:3]):
            if tensor:
                if tensor not in constants:
                    raise ModelError(f"node {name}: Clip bound {tensor!r} must be a constant")
                value = np.asarray(constants[tensor])
                if value.size != 1:
                    raise ModelError(f"node {name}: Clip bound {tensor!r} must be a scalar")
                bounds[k] = float(value.reshape(()))
        return ClipAttrs(*bounds)
    if op in (OpType.FLATTEN, OpType.SOFTMAX):
        return AxisAttrs(int(a.get("axis", 1 if op is OpType.FLATTEN else -1)))
    if op in (OpType.QUANTIZE, OpType.DEQUANTIZE):
        return AxisAttrs(int(a.get("axis", 1)))
    if op is OpType.RESHAPE:
        if inputs[1] not in constants:
            raise ModelError(f"node {name}: Reshape's shape {inputs[1]!r} must be a constant")
        return ReshapeAttrs(tuple(int(v) for v in constants[inputs[1]]))
    if op is OpType.GEMM:
        return GemmAttrs(
            float(a.get("alpha", 1.0)),
            float(a.get("beta", 1.0)),
            bool(a.get("transA", 0)),
            bool(a.get("transB", 0)),
        )
    if op is OpType.BATCHNORM:
        return BatchNormAttrs(float(a.get("epsilon", 1e-5)))
    return NoAttrs()
