"""Networks quantized by onnxruntime's own quantizer: the models a user brings, which tilecraft
must run as onnxruntime does. One recipe for every suite and test: `quant_pre_process` (it
folds BatchNorm into the convs), then `quantize_static` with per-channel symmetric int8
weights and int8 (symmetric) or uint8 (onnxruntime's default, with zero points) activations.
Needs onnxruntime (the `onnx` extra's companion in `dev`)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

ACTIVATIONS = ("int8", "uint8")
FORMS = ("qdq", "qoperator")


def quantize_with_onnxruntime(
    model,
    out: str | Path,
    samples: Iterable[dict[str, np.ndarray]],
    *,
    activations: str = "int8",
    symmetric: bool | None = None,
    form: str = "qdq",
    preprocess: bool = True,
) -> Path:
    """`model` (a ModelProto or an ONNX path) quantized by onnxruntime, calibrated on
    `samples` (input dicts), written to `out`. `symmetric` defaults to int8's symmetric and
    uint8's asymmetric activations (onnxruntime's defaults); `preprocess` runs
    `quant_pre_process` first, as onnxruntime's documentation asks."""
    import onnx
    from onnxruntime import quantization as q

    if activations not in ACTIVATIONS:
        raise ValueError(f"activations must be one of {ACTIVATIONS}, not {activations!r}")
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, not {form!r}")
    formats = {"qdq": q.QuantFormat.QDQ, "qoperator": q.QuantFormat.QOperator}
    types = {"int8": q.QuantType.QInt8, "uint8": q.QuantType.QUInt8}
    symmetric = activations == "int8" if symmetric is None else symmetric
    batches = iter(list(samples))

    class Reader(q.CalibrationDataReader):
        def get_next(self):
            return next(batches, None)

    out = Path(out)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "float.onnx"
        if isinstance(model, (str, Path)):
            src = Path(model)
        else:
            onnx.save(model, str(src))
        if preprocess:
            from onnxruntime.quantization.shape_inference import quant_pre_process

            pre = Path(tmp) / "preprocessed.onnx"
            quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
            src = pre
        q.quantize_static(
            str(src),
            str(out),
            Reader(),
            quant_format=formats[form],
            per_channel=True,
            weight_type=q.QuantType.QInt8,
            activation_type=types[activations],
            extra_options={"ActivationSymmetric": symmetric, "WeightSymmetric": True},
        )
    return out


def random_samples(model, count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`count` standard-normal inputs for `model`'s (static) input shapes."""
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    shapes = {
        i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
        for i in model.graph.input
        if i.name not in initializers
    }
    return [
        {n: rng.normal(0, 1, s).astype(np.float32) for n, s in shapes.items()} for _ in range(count)
    ]
