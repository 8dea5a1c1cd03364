"""The graph IR: a network as frozen nodes over named tensors, each with a static shape and a
dtype, and constant tensors (weights) by name. Import (`onnx_import`) builds it, the passes
(`passes`) rewrite it into the normalised form the partitioner and quantizer read.

Operators carry typed attributes (`ConvAttrs`, `PoolAttrs`, ...), not strings: what a pass
fuses into a convolution (a clip, a residual input) is a field of its attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Union

import numpy as np

from tilecraft.errors import ModelError


class OpType(str, Enum):
    """The operators the IR knows (by their ONNX names), and the normalised ones passes make."""

    CONV = "Conv"
    BATCHNORM = "BatchNormalization"
    RELU = "Relu"
    CLIP = "Clip"
    ADD = "Add"
    MUL = "Mul"
    MAXPOOL = "MaxPool"
    AVGPOOL = "AveragePool"
    GLOBALAVGPOOL = "GlobalAveragePool"
    FLATTEN = "Flatten"
    RESHAPE = "Reshape"
    GEMM = "Gemm"
    MATMUL = "MatMul"
    SOFTMAX = "Softmax"
    IDENTITY = "Identity"
    QUANTIZE = "QuantizeLinear"
    DEQUANTIZE = "DequantizeLinear"
    DENSE = "Dense"  # normalised: x (M, K) @ w (K, N) + b, optional clip (Gemm, MatMul+Add)


@dataclass(frozen=True)
class TensorType:
    """A tensor's static shape and numpy dtype name."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class ConvAttrs:
    """A 2-D convolution; `pads` are (top, left, bottom, right). Inputs: x, weight, bias, and
    the residual when `residual` (a fused Add: out = clip(conv + bias + residual))."""

    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    groups: int = 1
    dilation: tuple[int, int] = (1, 1)
    clip: tuple[float, float] | None = None  # a fused ReLU/Clip, as float bounds
    residual: bool = False

    @property
    def symmetric_pad(self) -> tuple[int, int] | None:
        t, left, b, r = self.pads
        return (t, left) if (t, left) == (b, r) else None


@dataclass(frozen=True)
class PoolAttrs:
    """Max or average pooling; `pads` are (top, left, bottom, right)."""

    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    count_include_pad: bool = False


@dataclass(frozen=True)
class ClipAttrs:
    low: float = float("-inf")
    high: float = float("inf")


@dataclass(frozen=True)
class AxisAttrs:
    """Flatten, Softmax, and the quantization axis of Quantize/DequantizeLinear."""

    axis: int = 1


@dataclass(frozen=True)
class ReshapeAttrs:
    shape: tuple[int, ...]


@dataclass(frozen=True)
class GemmAttrs:
    """ONNX Gemm: alpha * A' @ B' + beta * C, A' and B' transposed as flagged."""

    alpha: float = 1.0
    beta: float = 1.0
    trans_a: bool = False
    trans_b: bool = False


@dataclass(frozen=True)
class DenseAttrs:
    """x (M, K) @ weight (K, N) + bias (N,), then the fused clip if any."""

    clip: tuple[float, float] | None = None


@dataclass(frozen=True)
class AddAttrs:
    """An elementwise Add not fused into a conv, with the ReLU/Clip fused after it if any."""

    clip: tuple[float, float] | None = None


@dataclass(frozen=True)
class BatchNormAttrs:
    epsilon: float = 1e-5


@dataclass(frozen=True)
class NoAttrs:
    pass


Attrs = Union[
    ConvAttrs,
    PoolAttrs,
    ClipAttrs,
    AxisAttrs,
    ReshapeAttrs,
    GemmAttrs,
    DenseAttrs,
    AddAttrs,
    BatchNormAttrs,
    NoAttrs,
]


@dataclass(frozen=True)
class Node:
    name: str
    op: OpType
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Attrs = NoAttrs()

    def with_(self, **changes) -> Node:
        return replace(self, **changes)

    @property
    def output(self) -> str:
        return self.outputs[0]


@dataclass(frozen=True)
class Graph:
    """Nodes in topological order; `types` holds every non-constant tensor's type, `constants`
    every constant (read-only arrays); `inputs` and `outputs` name the graph's interface."""

    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    types: dict[str, TensorType] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    name: str = "model"
    scales: dict[str, float] = field(default_factory=dict)  # from a quantized model (QDQ)
    # a quantized model's weight constants: their own scale, one per output channel or one
    weight_scales: dict[str, np.ndarray] = field(default_factory=dict)
    # a quantized model's asymmetric activations: their zero point as stored in int8 (a uint8
    # model's less 128, as its values are); tensors not named here have zero point 0
    zero_points: dict[str, int] = field(default_factory=dict)

    def type_of(self, tensor: str) -> TensorType:
        if tensor in self.constants:
            c = self.constants[tensor]
            return TensorType(tuple(c.shape), str(c.dtype))
        if tensor not in self.types:
            raise ModelError(f"tensor {tensor!r} has no known shape")
        return self.types[tensor]

    def shape(self, tensor: str) -> tuple[int, ...]:
        return self.type_of(tensor).shape

    def producer(self) -> dict[str, Node]:
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                users.setdefault(name, []).append(node)
        return users

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise ModelError(f"no node named {name!r}")

    def replace(self, **changes) -> Graph:
        return replace(self, **changes)

    def describe(self) -> list[str]:
        lines = []
        for node in self.nodes:
            ins = ", ".join(i for i in node.inputs if i not in self.constants)
            lines.append(f"{node.name}: {node.op.value}({ins}) -> {', '.join(node.outputs)}")
        return lines
