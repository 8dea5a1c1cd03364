"""Named graph passes in one explicit order (`PASSES`), each a pure function Graph -> Graph.

`normalise` runs them all: identities removed, BatchNorm folded into the convolution before it,
Gemm/MatMul(+Add) turned into `Dense` with a (K, N) weight, Reshape-to-2-D into Flatten, a
residual Add fused into a convolution (the epilogue adds it; of two, the larger), ReLU/Clip
fused into the producer's epilogue, dead nodes dropped. Every convolution leaves with a bias.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from tilecraft.compiler.frontend.ir import (
    AddAttrs,
    AxisAttrs,
    ConvAttrs,
    DenseAttrs,
    Graph,
    Node,
    OpType,
    TensorType,
)
from tilecraft.compiler.frontend.qdq import absorb_qdq
from tilecraft.errors import ModelError, ModelWarning


def _single_use(graph: Graph, tensor: str) -> bool:
    return len(graph.consumers().get(tensor, [])) == 1 and tensor not in graph.outputs


def remove_identities(graph: Graph) -> Graph:
    """Identity (and chains of them) dropped, readers reading the source (a graph output keeps
    its Identity, so its name stays)."""
    alias = {
        n.output: n.inputs[0]
        for n in graph.nodes
        if n.op is OpType.IDENTITY and n.output not in graph.outputs
    }

    def root(t: str) -> str:
        while t in alias:
            t = alias[t]
        return t

    nodes = [
        n.with_(inputs=tuple(root(i) for i in n.inputs))
        for n in graph.nodes
        if n.output not in alias
    ]
    return graph.replace(nodes=tuple(nodes))


def conv_biases(graph: Graph) -> Graph:
    """Give every convolution a bias input (zeros where the model has none)."""
    nodes, constants = [], dict(graph.constants)
    for node in graph.nodes:
        if node.op is OpType.CONV and (len(node.inputs) < 3 or not node.inputs[2]):
            name = f"{node.name}.bias"
            constants[name] = np.zeros(graph.shape(node.inputs[1])[0], np.float32)
            node = node.with_(inputs=(node.inputs[0], node.inputs[1], name))
        nodes.append(node)
    return graph.replace(nodes=tuple(nodes), constants=constants)


def fold_batchnorm(graph: Graph) -> Graph:
    """conv -> BatchNormalization becomes one conv with scaled weights and a shifted bias (a
    `ModelWarning` where a quantized model rounds the conv's output before the BatchNorm)."""
    producer, constants = graph.producer(), dict(graph.constants)
    drop, changed, rounded = set(), {}, []
    for bn in graph.nodes:
        if bn.op is not OpType.BATCHNORM:
            continue
        conv = producer.get(bn.inputs[0])
        params = bn.inputs[1:5]
        if (
            conv is None
            or conv.op is not OpType.CONV
            or conv.attrs.clip is not None
            or conv.attrs.residual
            or not _single_use(graph, conv.output)
            or not all(p in constants for p in params)
        ):
            continue
        gamma, beta, mean, var = (constants[p].astype(np.float64) for p in params)
        scale = gamma / np.sqrt(var + bn.attrs.epsilon)
        w_name, b_name = conv.inputs[1], conv.inputs[2]
        w, b = constants[w_name].astype(np.float64), constants[b_name].astype(np.float64)
        constants[f"{conv.name}.weight"] = (w * scale[:, None, None, None]).astype(np.float32)
        constants[f"{conv.name}.bias"] = ((b - mean) * scale + beta).astype(np.float32)
        inputs = (conv.inputs[0], f"{conv.name}.weight", f"{conv.name}.bias")
        changed[conv.name] = conv.with_(inputs=inputs, outputs=bn.outputs)
        drop.add(bn.name)
        if conv.output in graph.scales:
            rounded.append(bn.name)
    if rounded:
        warnings.warn(
            ModelWarning(
                f"{len(rounded)} BatchNormalization node(s) ({', '.join(rounded[:3])}"
                f"{', ...' if len(rounded) > 3 else ''}) follow a conv whose output the model "
                "rounds at a scale of its own: folded into the conv, which rounds once, so results "
                "differ from the model's by up to a step where it rounds twice (quantize after "
                "onnxruntime's quant_pre_process, which folds them first)"
            ),
            stacklevel=2,
        )
    nodes = [changed.get(n.name, n) for n in graph.nodes if n.name not in drop]
    return _prune_constants(graph.replace(nodes=tuple(nodes), constants=constants))


def dense_from_gemm(graph: Graph) -> Graph:
    """Gemm (constant B and C) and MatMul (constant B) + Add (constant) become Dense."""
    constants, consumers = dict(graph.constants), graph.consumers()
    weight_scales = dict(graph.weight_scales)  # a quantized model's, kept by the Dense weight
    nodes, drop = [], set()
    for node in graph.nodes:
        if node.name in drop:
            continue
        if node.inputs[1:] and node.inputs[1] in weight_scales:
            weight_scales[f"{node.name}.weight"] = weight_scales[node.inputs[1]]
        if node.op is OpType.GEMM and node.inputs[1] in constants and not node.attrs.trans_a:
            a = node.attrs
            w = constants[node.inputs[1]].astype(np.float64)
            w = (w.T if a.trans_b else w) * a.alpha
            n = w.shape[1]
            has_c = len(node.inputs) > 2 and node.inputs[2]
            if has_c and node.inputs[2] not in constants:
                nodes.append(node)
                continue
            b = np.asarray(constants[node.inputs[2]], np.float64) * a.beta if has_c else np.zeros(n)
            b = _bias_row(b, n)
            if b is None:  # a bias that differs per row: not a dense layer's
                nodes.append(node)
                continue
            nodes.append(_dense(node, node.outputs, w, b, constants))
            continue
        if (
            node.op is OpType.MATMUL
            and node.inputs[1] in constants
            and len(graph.shape(node.inputs[0])) == 2
        ):
            w = constants[node.inputs[1]].astype(np.float64)
            users = consumers.get(node.output, [])
            add = users[0] if len(users) == 1 else None
            if add is not None and add.op is OpType.ADD and node.output not in graph.outputs:
                other = [i for i in add.inputs if i != node.output]
                b = (
                    _bias_row(constants[other[0]], w.shape[1])
                    if len(other) == 1 and other[0] in constants
                    else None
                )
                if b is not None:
                    nodes.append(_dense(node, add.outputs, w, b, constants))
                    drop.add(add.name)
                    continue
            nodes.append(_dense(node, node.outputs, w, np.zeros(w.shape[1]), constants))
            continue
        nodes.append(node)
    return _prune_constants(
        graph.replace(nodes=tuple(nodes), constants=constants, weight_scales=weight_scales)
    )


def _bias_row(b, n: int):
    """A bias broadcast over rows ((N,), (1, N), a scalar) as (N,); None if it varies by row."""
    b = np.asarray(b, np.float64)
    if b.size == 1:
        return np.full(n, float(b.reshape(())))
    if b.size == n and b.shape[-1] == n:
        return b.reshape(n)
    return None


def _dense(node: Node, outputs, w, b, constants) -> Node:
    constants[f"{node.name}.weight"] = np.ascontiguousarray(w, np.float32)
    constants[f"{node.name}.bias"] = np.array(b, np.float32)
    inputs = (node.inputs[0], f"{node.name}.weight", f"{node.name}.bias")
    return Node(node.name, OpType.DENSE, inputs, tuple(outputs), DenseAttrs())


def flatten_reshapes(graph: Graph) -> Graph:
    """A Reshape of (N, ...) to (N, -1) (or its explicit size) is a Flatten."""
    nodes = []
    for node in graph.nodes:
        if node.op is OpType.RESHAPE:
            shape_in, shape_out = graph.shape(node.inputs[0]), graph.shape(node.output)
            if len(shape_out) == 2 and shape_out[0] == shape_in[0]:
                node = Node(node.name, OpType.FLATTEN, node.inputs[:1], node.outputs, AxisAttrs(1))
        nodes.append(node)
    return _prune_constants(graph.replace(nodes=tuple(nodes)))


def _macs(graph: Graph, conv: Node) -> int:
    """A convolution's multiply-accumulates: its output's elements times each one's taps."""
    weight = graph.shape(conv.inputs[1])
    return int(np.prod(graph.shape(conv.outputs[0]))) * int(np.prod(weight[1:]))


def fuse_residual(graph: Graph) -> Graph:
    """Add(conv_out, other) -> the conv adds `other` in its epilogue. Of two convs, the one
    with more MACs takes it (then the later): the residual's epilogue, the costlier one (ALU
    passes where the plain one may run on the requantization unit), hides under the larger
    GEMM. A ResNet's downsample block thus adds its 1x1 shortcut in the 3x3 conv.
    The conv must have no clip yet and its output one use; when `other` is made after the conv,
    the fused conv moves to the Add's place, where both exist. A quantized model that states a
    scale for the conv's output rounds it to int8 before the add (onnxruntime's QDQ form, run
    as QLinearConv then QLinearAdd): that second rounding is kept, so the Add stays a node."""
    producer, order = graph.producer(), {n.name: i for i, n in enumerate(graph.nodes)}
    changed, drop, place_at = {}, set(), {}
    for add in graph.nodes:
        if add.op is not OpType.ADD or len(add.inputs) != 2:
            continue
        a, b = add.inputs
        if a in graph.constants or b in graph.constants or graph.shape(a) != graph.shape(b):
            continue
        options = []
        for mine, other in ((a, b), (b, a)):
            conv = changed.get(getattr(producer.get(mine), "name", None)) or producer.get(mine)
            if (
                conv is not None
                and conv.op is OpType.CONV
                and not conv.attrs.residual
                and conv.attrs.clip is None
                and _single_use(graph, mine)
                and conv.name not in drop
                and mine not in graph.scales
            ):
                options.append(((_macs(graph, conv), order[conv.name]), conv, other))
        if not options:
            continue
        _, conv, other = max(options, key=lambda o: o[0])
        attrs = ConvAttrs(**{**conv.attrs.__dict__, "residual": True})
        fused = conv.with_(inputs=(*conv.inputs[:3], other), outputs=add.outputs, attrs=attrs)
        made = order[producer[other].name] if other in producer else -1
        if made > order[conv.name]:
            place_at[add.name] = fused
            drop.add(conv.name)
        else:
            changed[conv.name] = fused
            drop.add(add.name)
    nodes = []
    for n in graph.nodes:
        if n.name in place_at:
            nodes.append(place_at[n.name])
        elif n.name not in drop:
            nodes.append(changed.get(n.name, n))
    return graph.replace(nodes=tuple(nodes))


def fuse_activation(graph: Graph) -> Graph:
    """Relu / Clip after a conv, dense or unfused Add with one use (or after one fused so)
    becomes the producer's clip bounds (where a quantized model states both sides' scales,
    only if they are equal: a different scale would be a second rounding)."""
    producer = graph.producer()
    changed, drop = {}, set()
    for act in graph.nodes:
        if act.op not in (OpType.RELU, OpType.CLIP):
            continue
        src = producer.get(act.inputs[0])
        src = changed.get(getattr(src, "name", None)) or src
        if src is None or src.op not in (OpType.CONV, OpType.DENSE, OpType.ADD):
            continue
        if not _single_use(graph, act.inputs[0]):
            continue
        scales = [graph.scales.get(t) for t in (act.inputs[0], act.output)]
        if None not in scales and scales[0] != scales[1]:
            continue
        lo, hi = (0.0, float("inf")) if act.op is OpType.RELU else (act.attrs.low, act.attrs.high)
        old = getattr(src.attrs, "clip", None) or (float("-inf"), float("inf"))
        clip = (max(lo, old[0]), min(hi, old[1]))
        kind = AddAttrs if src.op is OpType.ADD else type(src.attrs)
        attrs = kind(**{**getattr(src.attrs, "__dict__", {}), "clip": clip})
        changed[src.name] = src.with_(outputs=act.outputs, attrs=attrs)
        producer[act.output] = src  # a second activation (Relu, then Clip) fuses too
        drop.add(act.name)
    nodes = [changed.get(n.name, n) for n in graph.nodes if n.name not in drop]
    return graph.replace(nodes=tuple(nodes))


def drop_dead(graph: Graph) -> Graph:
    live, kept = set(graph.outputs), []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs):
            kept.append(node)
            live.update(node.inputs)
    return _prune_constants(graph.replace(nodes=tuple(reversed(kept))))


def _prune_constants(graph: Graph) -> Graph:
    used = {i for n in graph.nodes for i in n.inputs}
    types = {
        k: v
        for k, v in graph.types.items()
        if k in used
        or k in graph.outputs
        or k in graph.inputs
        or any(k in n.outputs for n in graph.nodes)
    }
    constants = {k: v for k, v in graph.constants.items() if k in used}
    weight_scales = {k: v for k, v in graph.weight_scales.items() if k in constants}
    return graph.replace(constants=constants, types=types, weight_scales=weight_scales)


Pass = Callable[[Graph], Graph]
PASSES: tuple[tuple[str, Pass], ...] = (
    ("absorb-qdq", absorb_qdq),
    ("remove-identities", remove_identities),
    ("conv-biases", conv_biases),
    ("fold-batchnorm", fold_batchnorm),
    ("dense-from-gemm", dense_from_gemm),
    ("flatten-reshapes", flatten_reshapes),
    ("fuse-residual", fuse_residual),
    ("fuse-activation", fuse_activation),
    ("drop-dead", drop_dead),
)


def normalise(graph: Graph, *, check: bool = True) -> Graph:
    """Every pass of `PASSES`, in order; with `check`, the graph is checked after each."""
    for name, run in PASSES:
        graph = run(graph)
        if check:
            validate(graph, after=name)
    return graph


def validate(graph: Graph, after: str = "import") -> None:
    """Every input of every node is defined before it; every tensor has a type."""
    known = set(graph.inputs) | set(graph.constants)
    for node in graph.nodes:
        for i in node.inputs:
            if i and i not in known:
                raise ModelError(f"after {after}: node {node.name} reads {i!r} before it is made")
        for o in node.outputs:
            if not isinstance(graph.types.get(o), TensorType):
                raise ModelError(f"after {after}: tensor {o!r} has no type")
            known.add(o)
    missing = [o for o in graph.outputs if o not in known]
    if missing:
        raise ModelError(f"after {after}: graph outputs {missing} are never made")
