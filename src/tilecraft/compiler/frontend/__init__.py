"""ONNX in: import (`onnx_import`), the graph IR (`ir`), the named passes (`passes`) and a float
evaluator of the IR (`evaluate`)."""

from __future__ import annotations

from tilecraft.compiler.frontend.ir import Graph
from tilecraft.compiler.frontend.onnx_import import load_onnx
from tilecraft.compiler.frontend.passes import normalise


def import_model(source, input_shapes: dict[str, tuple[int, ...]] | None = None) -> Graph:
    """An ONNX model (path or ModelProto) as a normalised graph."""
    return normalise(load_onnx(source, input_shapes))


__all__ = ["Graph", "import_model", "load_onnx", "normalise"]
