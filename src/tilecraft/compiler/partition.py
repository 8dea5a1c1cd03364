"""The partitioner: each node of a normalised graph goes to the accelerator or the host, with
the reason for every node, its MACs and its share of the network's MACs.

`partition` is the one placement: `tilecraft partition` reports it and the quantizer builds
the network from it (`quant.quantize`), so the report cannot disagree with what is compiled.
Given the config, it also says what the config decides (a depthwise conv needs square channel
blocks). A Flatten the dense layers after it read on the accelerator moves nothing: an
(N, C, 1, 1) map is its (N, C) rows byte for byte, and a dense layer reading a whole (N, C, H,
W) map reads it in the accelerator's blocked layout, its weights permuted to match (an H x W
convolution with one output pixel: the same MACs, the same values)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

from tilecraft.compiler.frontend.ir import Graph, Node, OpType


class Place(str, Enum):
    ACCELERATOR = "accelerator"
    HOST = "host"


class Reason(str, Enum):
    """Why a node runs where it does."""

    GEMM = "conv/dense: GEMM core with a fused epilogue"
    POOL_ALU = "max pool: window maximum on the vector ALU"
    POOL_AVG = "global average pool: GEMM row sums and requantization on the ALU"
    VIEW = "a view of the data: nothing moves"
    FLATTEN_VIEW = "(N, C, 1, 1) read as (N, C) rows by the dense layers after it: the same bytes"
    FLATTEN_ABSORBED = (
        "flatten of an (N, C, H, W) map into the dense layers after it: they read "
        "the blocked layout, their weights in its order (an HxW conv)"
    )
    FLATTEN_HOST = "flatten read on the host (or a graph output): unpacked there in NCHW order"
    DEPTHWISE = (
        "depthwise conv: a diagonal weight block per channel block on the GEMM core "
        "(1/BLOCK_OUT of its products are the layer's)"
    )
    DEPTHWISE_HOST = "depthwise conv with dilation or asymmetric padding (host kernel)"
    WIDEN_BLOCKS = (
        "pooling or a scaled Add on a config with BLOCK_IN != BLOCK_OUT: the GEMM "
        "cannot widen its rows into the accumulator (host kernel)"
    )
    DEPTHWISE_BLOCKS = (
        "depthwise conv on a config with BLOCK_IN != BLOCK_OUT: no diagonal "
        "weight blocks (host kernel)"
    )
    GROUPED = "grouped conv (groups > 1, not depthwise): not offloaded"
    DILATED = "dilated conv: not offloaded"
    ASYMMETRIC_PAD = "asymmetric padding: not offloaded"
    POOLING = "pooling: ALU pooling not implemented yet (host kernel)"
    ADD = "elementwise Add not fused into a conv epilogue (host kernel)"
    ADD_SCALED = (
        "Add of two int8 tensors at their own scales (the model rounds the conv's "
        "output before it): GEMM widening, requantized on the ALU"
    )
    ADD_ROUNDED = (
        "Add of two int8 tensors at their own scales, not of one (N, C, H, W) shape: "
        "host kernel, as onnxruntime's QLinearAdd"
    )
    ACTIVATION = "activation not fused into a conv/dense epilogue (host kernel)"
    SOFTMAX = "softmax needs exp: not in the accelerator's ISA"
    UNFUSED = "BatchNorm/Mul not folded into a conv (host kernel)"
    QUANT = "quantize/dequantize at the graph's boundary"
    FLOAT = "float-only operator"


@dataclass(frozen=True)
class Placement:
    node: str
    op: str
    place: Place
    reason: Reason
    macs: int


def node_macs(graph: Graph, node: Node) -> int:
    if node.op is OpType.CONV:
        out = graph.shape(node.output)
        w = graph.shape(node.inputs[1])  # (OC, IC/groups, KH, KW)
        return int(out[0] * out[1] * out[2] * out[3] * w[1] * w[2] * w[3])
    if node.op in (OpType.DENSE, OpType.MATMUL, OpType.GEMM):
        m, n = graph.shape(node.output)
        k = graph.shape(node.inputs[0])[1]
        return int(m * k * n)
    return 0


def place(graph: Graph, node: Node, cfg=None) -> tuple[Place, Reason]:
    """Where `node` runs and why; `cfg` (an HwConfig), if given, adds what the config decides."""
    op = node.op
    if op is OpType.FLATTEN:
        return _flatten(graph, node, cfg)
    if op is OpType.CONV:
        a = node.attrs
        ic = graph.shape(node.inputs[0])[1]
        if a.groups != 1 and (a.groups != ic or graph.shape(node.inputs[1])[0] != ic):
            return Place.HOST, Reason.GROUPED  # (a depthwise conv has one output per input)
        if a.groups != 1:
            if a.dilation != (1, 1) or a.symmetric_pad is None:
                return Place.HOST, Reason.DEPTHWISE_HOST
            if cfg is not None and cfg.block_in != cfg.block_out:
                return Place.HOST, Reason.DEPTHWISE_BLOCKS
            return Place.ACCELERATOR, Reason.DEPTHWISE
        if a.dilation != (1, 1):
            return Place.HOST, Reason.DILATED
        if a.symmetric_pad is None:
            return Place.HOST, Reason.ASYMMETRIC_PAD
        return Place.ACCELERATOR, Reason.GEMM
    if op is OpType.DENSE:
        return Place.ACCELERATOR, Reason.GEMM
    square = cfg is None or cfg.block_in == cfg.block_out  # rows widened through the GEMM
    if op is OpType.GLOBALAVGPOOL:
        return (Place.ACCELERATOR, Reason.POOL_AVG) if square else (Place.HOST, Reason.WIDEN_BLOCKS)
    if op is OpType.MAXPOOL:  # its LOADs pad with -128: ONNX's -inf
        return (Place.ACCELERATOR, Reason.POOL_ALU) if square else (Place.HOST, Reason.WIDEN_BLOCKS)
    if op is OpType.ADD and any(i in graph.scales for i in node.inputs):
        shapes = {graph.shape(i) for i in node.inputs}
        if len(shapes) != 1 or len(next(iter(shapes))) != 4:
            return Place.HOST, Reason.ADD_ROUNDED
        return (
            (Place.ACCELERATOR, Reason.ADD_SCALED) if square else (Place.HOST, Reason.WIDEN_BLOCKS)
        )
    host = {
        OpType.AVGPOOL: Reason.POOLING,
        OpType.ADD: Reason.ADD,
        OpType.RELU: Reason.ACTIVATION,
        OpType.CLIP: Reason.ACTIVATION,
        OpType.SOFTMAX: Reason.SOFTMAX,
        OpType.BATCHNORM: Reason.UNFUSED,
        OpType.MUL: Reason.UNFUSED,
        OpType.QUANTIZE: Reason.QUANT,
        OpType.DEQUANTIZE: Reason.QUANT,
        OpType.RESHAPE: Reason.VIEW,
        OpType.IDENTITY: Reason.VIEW,
    }
    return Place.HOST, host.get(op, Reason.FLOAT)


def _flatten(graph: Graph, node: Node, cfg) -> tuple[Place, Reason]:
    """A Flatten of an (N, C, H, W) map whose every reader is a dense layer (on the
    accelerator) moves nothing; any other is the host's."""
    shape = graph.shape(node.inputs[0])
    readers = graph.consumers().get(node.output, [])
    if (
        len(shape) != 4
        or node.attrs.axis != 1
        or node.output in graph.outputs
        or not readers
        or any(r.op is not OpType.DENSE or r.inputs[0] != node.output for r in readers)
    ):
        return Place.HOST, Reason.FLATTEN_HOST
    if shape[2:] == (1, 1):
        return Place.ACCELERATOR, Reason.FLATTEN_VIEW
    return Place.ACCELERATOR, Reason.FLATTEN_ABSORBED


def partition(graph: Graph, cfg=None) -> list[Placement]:
    """Every node's placement, in graph order; `cfg` (an HwConfig), if given, adds what the
    config decides (see `place`)."""
    out = []
    for node in graph.nodes:
        where, why = place(graph, node, cfg)
        out.append(Placement(node.name, node.op.value, where, why, node_macs(graph, node)))
    return out


def accelerator_mac_share(placements: list[Placement]) -> float:
    total = sum(p.macs for p in placements)
    on = sum(p.macs for p in placements if p.place is Place.ACCELERATOR)
    return on / total if total else 0.0


def report(placements: list[Placement]) -> str:
    total = sum(p.macs for p in placements) or 1
    width = max(len(p.node) for p in placements)
    lines = [f"{'node':<{width}}  {'op':<18} {'place':<11} {'MACs':>13} {'share':>6}  reason"]
    for p in placements:
        why = p.reason.value if p.place is Place.HOST or p.op == OpType.FLATTEN.value else ""
        lines.append(
            f"{p.node:<{width}}  {p.op:<18} {p.place.value:<11} {p.macs:>13,} "
            f"{p.macs / total:>6.1%}  {why}"
        )
    on = sum(1 for p in placements if p.place is Place.ACCELERATOR)
    lines.append(
        f"{on}/{len(placements)} nodes on the accelerator; "
        f"accelerator MAC share {accelerator_mac_share(placements):.2%} "
        f"of {sum(p.macs for p in placements):,} MACs"
    )
    return "\n".join(lines)


def to_json(placements: list[Placement]) -> str:
    return json.dumps(
        {
            "accelerator_mac_share": accelerator_mac_share(placements),
            "total_macs": sum(p.macs for p in placements),
            "nodes": [
                {
                    "node": p.node,
                    "op": p.op,
                    "place": p.place.value,
                    "macs": p.macs,
                    "reason": p.reason.value,
                }
                for p in placements
            ],
        },
        indent=1,
    )
