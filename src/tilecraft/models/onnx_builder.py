"""A small ONNX graph builder over `onnx.helper`: layers with torchvision's ONNX export shapes
(Conv without bias + BatchNormalization + Relu, MaxPool, Add, GlobalAveragePool, Flatten, Gemm),
seeded random weights. No torch needed."""

from __future__ import annotations

import numpy as np

OPSET = 17


class Builder:
    def __init__(self, name: str, seed: int = 0):
        import onnx  # noqa: F401  (a clear ImportError before any work)

        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.initializers: list = []
        self.count = 0

    def _name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}_{self.count}"

    def const(self, base: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        name = self._name(base)
        self.initializers.append(numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def node(self, op: str, inputs: list[str], name: str | None = None, **attrs) -> str:
        from onnx import helper

        name = name or self._name(op.lower())
        out = name + "_out"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def conv(
        self, x: str, ic: int, oc: int, k: int, stride: int = 1, groups: int = 1, bias: bool = False
    ) -> str:
        fan_in = ic // groups * k * k
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (oc, ic // groups, k, k)).astype(np.float32)
        inputs = [x, self.const("w", w)]
        if bias:
            inputs.append(self.const("b", self.rng.normal(0, 0.1, oc).astype(np.float32)))
        p = k // 2
        return self.node(
            "Conv",
            inputs,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[p, p, p, p],
            group=groups,
        )

    def batchnorm(self, x: str, c: int) -> str:
        r = self.rng
        params = [
            r.uniform(0.6, 1.0, c),
            r.normal(0, 0.1, c),
            r.normal(0, 0.1, c),
            r.uniform(0.8, 1.5, c),
        ]
        names = [self.const(n, v.astype(np.float32)) for n, v in zip(("g", "b", "m", "v"), params)]
        return self.node("BatchNormalization", [x, *names], epsilon=1e-5)

    def conv_bn(
        self,
        x: str,
        ic: int,
        oc: int,
        k: int,
        stride: int = 1,
        groups: int = 1,
        act: str | None = "relu",
    ) -> str:
        y = self.batchnorm(self.conv(x, ic, oc, k, stride, groups), oc)
        return self.activation(y, act)

    def activation(self, x: str, act: str | None) -> str:
        if act == "relu":
            return self.node("Relu", [x])
        if act == "relu6":
            lo = self.const("lo", np.array(0.0, np.float32))
            hi = self.const("hi", np.array(6.0, np.float32))
            return self.node("Clip", [x, lo, hi])
        return x

    def dense(self, x: str, k: int, n: int) -> str:
        w = self.rng.normal(0, np.sqrt(1.0 / k), (n, k)).astype(np.float32)
        b = self.rng.normal(0, 0.01, n).astype(np.float32)
        return self.node("Gemm", [x, self.const("fc_w", w), self.const("fc_b", b)], transB=1)

    def model(self, x: str, shape: tuple[int, ...], out: str, out_shape: tuple[int, ...]):
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            self.nodes,
            self.name,
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(shape))],
            [helper.make_tensor_value_info(out, TensorProto.FLOAT, list(out_shape))],
            self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        return model
