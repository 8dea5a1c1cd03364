"""onnxruntime's side of `cpu-fallback`: one-node models run with one thread, sequentially."""

from __future__ import annotations

import numpy as np


def _session(nodes, inputs: dict, initializers: dict, outputs: list[str]):
    try:
        import onnx
        import onnxruntime as ort
        from onnx import helper, numpy_helper
    except ImportError:
        return None
    types = {np.dtype(np.float32): onnx.TensorProto.FLOAT, np.dtype(np.int8): onnx.TensorProto.INT8}
    graph = helper.make_graph(
        nodes,
        "case",
        [
            helper.make_tensor_value_info(k, types[v.dtype], list(v.shape))
            for k, v in inputs.items()
        ],
        [
            helper.make_tensor_value_info(o, types[next(iter(inputs.values())).dtype], None)
            for o in outputs
        ],  # every case's output has its input's type
        [numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception:  # an operator/type pair this onnxruntime lacks: no baseline
        return None
    return lambda: session.run(None, inputs)


def _ort_conv(x, w, bias, k, s, p):
    from onnx import helper

    nodes = [
        helper.make_node(
            "Conv", ["x", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4
        ),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    return _session(nodes, {"x": x}, {"w": w, "b": bias}, ["y"])


def _scalars(**values):
    return {
        k: np.array(v, np.float32 if isinstance(v, float) else np.int8) for k, v in values.items()
    }


def _ort_qconv(x, w, bias, k, s, p):
    from onnx import helper

    oc = w.shape[0]
    init = {
        "w": w,
        "b": bias,
        "ws": np.full(oc, 0.01, np.float32),
        "wz": np.zeros(oc, np.int8),
        **_scalars(xs=0.05, xz=0, ys=0.1, yz=0),
    }
    node = helper.make_node(
        "QLinearConv",
        ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
        ["y"],
        kernel_shape=[k, k],
        strides=[s, s],
        pads=[p] * 4,
    )
    return _session([node], {"x": x}, init, ["y"])


def _ort_gemm(x, w, bias):
    from onnx import helper

    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"])
    return _session([node], {"x": x}, {"w": w, "b": bias}, ["y"])


def _ort_qmatmul(x, w):
    from onnx import helper

    init = {"w": w, **_scalars(xs=0.05, xz=0, ws=0.01, wz=0, ys=0.1, yz=0)}
    node = helper.make_node("QLinearMatMul", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
    return _session([node], {"x": x}, init, ["y"])


def _ort_one(op: str, x, **attrs):
    from onnx import helper

    return _session([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": x}, {}, ["y"])


def session(model):
    """A whole ONNX model on onnxruntime, one thread: `run(inputs)`, or None without it."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda inputs: s.run(None, inputs)
