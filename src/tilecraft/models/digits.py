"""The digits CNN: a small residual network trained (scripts/train_digits.py, numpy only) on the
8x8 handwritten digits that scikit-learn ships (1,797 images), committed as ONNX. It is the
model with a real accuracy to keep: int8 on the accelerator must stay within a point of float.

Input: (batch, 1, 8, 8) float, pixel values / 16; output: (batch, 10) logits. The batch
dimension is dynamic (`--input-shape input=N,1,8,8`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ONNX_PATH = Path(__file__).with_name("data") / "digits_cnn.onnx"
TEST_FRACTION = 0.2
SPLIT_SEED = 0


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): the fixed, stratified 80/20 split, x as float32
    (N, 1, 8, 8) in [0, 1]. Needs scikit-learn (the data set ships with it)."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as e:  # pragma: no cover - part of the dev extra
        raise ImportError("the digits data set needs scikit-learn: pip install scikit-learn") from e
    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)[:, None]
    y = data.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y
    )
    return x_tr, y_tr, x_te, y_te


def quantize_with_onnxruntime(
    out: Path,
    x_train: np.ndarray,
    *,
    symmetric: bool = True,
    images: int = 64,
    form: str = "qdq",
    activations: str = "int8",
) -> Path:
    """The digits CNN quantized by onnxruntime's own quantizer (per-channel int8 weights,
    `activations` "int8" or "uint8" (onnxruntime's default, asymmetric), symmetric or not,
    calibrated on the first `images` training images; `form` "qdq" or "qoperator"), written to
    `out`: the model a user brings that tilecraft must run as onnxruntime does. Needs
    onnxruntime."""
    from tilecraft.models.onnxruntime_quant import quantize_with_onnxruntime as quantize

    samples = [{"input": x_train[i : i + 1]} for i in range(images)]
    return quantize(
        ONNX_PATH,
        out,
        samples,
        activations=activations,
        symmetric=symmetric,
        form=form,
        preprocess=False,
    )
