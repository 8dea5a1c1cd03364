"""Train the digits CNN (tilecraft.models.digits) with numpy alone and write it as ONNX.

    .venv/bin/python scripts/train_digits.py [--epochs 40] [-o FILE]  (default: the committed file)

conv 1->16 3x3 + ReLU, conv 16->32 3x3 + ReLU, max pool 2x2, conv 32->32 3x3 + the pooled
input (a residual) + ReLU, global average pool, dense 32->10. Adam, cross-entropy, seeded:
the same file every run. Dev-only (it is how the committed model was made); tests never run it.
"""

from __future__ import annotations

import argparse

import numpy as np

from tilecraft.models.digits import ONNX_PATH, digits_split

TAPS = [(i, j) for i in range(3) for j in range(3)]


def conv_forward(x, w, b):
    """3x3, stride 1, pad 1: returns the output and the padded input (for the backward)."""
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, i : i + h, j : j + wd] for i, j in TAPS], axis=2)  # N C 9 H W
    out = np.einsum("nckhw,ock->nohw", cols, w.reshape(w.shape[0], c, 9)) + b[None, :, None, None]
    return out, cols


def conv_backward(dout, cols, w):
    n, c, _, h, wd = cols.shape
    dw = np.einsum("nohw,nckhw->ock", dout, cols).reshape(w.shape)
    db = dout.sum(axis=(0, 2, 3))
    dcols = np.einsum("nohw,ock->nckhw", dout, w.reshape(w.shape[0], c, 9))
    dxp = np.zeros((n, c, h + 2, wd + 2))
    for k, (i, j) in enumerate(TAPS):
        dxp[:, :, i : i + h, j : j + wd] += dcols[:, :, k]
    return dxp[:, :, 1:-1, 1:-1], dw, db


def init(rng):
    def he(shape, fan_in):
        return rng.normal(0, np.sqrt(2.0 / fan_in), shape)

    return {
        "w1": he((16, 1, 3, 3), 9),
        "b1": np.zeros(16),
        "w2": he((32, 16, 3, 3), 144),
        "b2": np.zeros(32),
        "w3": he((32, 32, 3, 3), 288) * 0.5,
        "b3": np.zeros(32),
        "wd": he((10, 32), 32),
        "bd": np.zeros(10),
    }


def forward(p, x):
    c1, cols1 = conv_forward(x, p["w1"], p["b1"])
    a1 = np.maximum(c1, 0)
    c2, cols2 = conv_forward(a1, p["w2"], p["b2"])
    a2 = np.maximum(c2, 0)
    n, c, h, w = a2.shape
    blocks = a2.reshape(n, c, h // 2, 2, w // 2, 2)
    pooled = blocks.max(axis=(3, 5))
    c3, cols3 = conv_forward(pooled, p["w3"], p["b3"])
    s = c3 + pooled
    a3 = np.maximum(s, 0)
    g = a3.mean(axis=(2, 3))
    logits = g @ p["wd"].T + p["bd"]
    cache = (cols1, c1, cols2, c2, blocks, pooled, cols3, s, a3, g)
    return logits, cache


def backward(p, cache, dlogits):
    cols1, c1, cols2, c2, blocks, pooled, cols3, s, a3, g = cache
    grads = {"wd": dlogits.T @ g, "bd": dlogits.sum(0)}
    dg = dlogits @ p["wd"]
    n, c, h, w = a3.shape
    da3 = np.broadcast_to(dg[:, :, None, None] / (h * w), a3.shape)
    ds = da3 * (s > 0)
    dpool, grads["w3"], grads["b3"] = conv_backward(ds, cols3, p["w3"])
    dpool = dpool + ds
    mask = blocks == pooled[:, :, :, None, :, None]
    da2 = (mask * dpool[:, :, :, None, :, None]).reshape(c2.shape)
    dc2 = da2 * (c2 > 0)
    da1, grads["w2"], grads["b2"] = conv_backward(dc2, cols2, p["w2"])
    dc1 = da1 * (c1 > 0)
    _, grads["w1"], grads["b1"] = conv_backward(dc1, cols1, p["w1"])
    return grads


def train(epochs: int, seed: int = 0):
    x_tr, y_tr, x_te, y_te = digits_split()
    x_tr, x_te = x_tr.astype(np.float64), x_te.astype(np.float64)
    rng = np.random.default_rng(seed)
    p = init(rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    step, lr, batch = 0, 3e-3, 32
    for epoch in range(epochs):
        order = rng.permutation(len(x_tr))
        for start in range(0, len(order), batch):
            idx = order[start : start + batch]
            logits, cache = forward(p, x_tr[idx])
            prob = np.exp(logits - logits.max(1, keepdims=True))
            prob /= prob.sum(1, keepdims=True)
            prob[np.arange(len(idx)), y_tr[idx]] -= 1
            grads = backward(p, cache, prob / len(idx))
            step += 1
            for k in p:
                m[k] = 0.9 * m[k] + 0.1 * grads[k]
                v[k] = 0.999 * v[k] + 0.001 * grads[k] ** 2
                mh, vh = m[k] / (1 - 0.9**step), v[k] / (1 - 0.999**step)
                p[k] -= lr * mh / (np.sqrt(vh) + 1e-8)
        if epoch == epochs * 2 // 3:
            lr /= 5
        acc = (forward(p, x_te)[0].argmax(1) == y_te).mean()
        print(f"epoch {epoch + 1:3d}: test accuracy {acc:.4f}")
    return p


def to_onnx(p):
    from onnx import TensorProto, helper, numpy_helper

    def const(name, value):
        return numpy_helper.from_array(np.asarray(value, np.float32), name)

    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", **conv),
        helper.make_node("Relu", ["c1"], ["a1"], name="relu1"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], name="conv2", **conv),
        helper.make_node("Relu", ["c2"], ["a2"], name="relu2"),
        helper.make_node(
            "MaxPool", ["a2"], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Conv", ["pool", "w3", "b3"], ["c3"], name="conv3", **conv),
        helper.make_node("Add", ["c3", "pool"], ["s3"], name="add3"),
        helper.make_node("Relu", ["s3"], ["a3"], name="relu3"),
        helper.make_node("GlobalAveragePool", ["a3"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "wd", "bd"], ["logits"], name="fc", transB=1),
    ]
    inits = [const(k, p[k]) for k in ("w1", "b1", "w2", "b2", "w3", "b3", "wd", "bd")]
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.producer_name = "tilecraft scripts/train_digits.py"
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("-o", "--output", default=str(ONNX_PATH))
    args = ap.parse_args()
    model = to_onnx(train(args.epochs))
    from tilecraft.files import write_atomic

    write_atomic(args.output, model.SerializeToString())
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
