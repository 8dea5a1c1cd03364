"""ResNet-18 and MobileNetV2 as ONNX with exactly torchvision's architectures (layer for layer
as `torch.onnx.export` writes them: Conv + BatchNormalization + Relu/Clip, MaxPool, Add,
GlobalAveragePool, Flatten, Gemm) and seeded random weights, built with `onnx.helper`."""

from __future__ import annotations

from pathlib import Path

from tilecraft.models.onnx_builder import Builder


def resnet18(seed: int = 0, classes: int = 1000, size: int = 224):
    b = Builder("resnet18", seed)
    x = "input"
    y = b.conv_bn(x, 3, 64, 7, stride=2)
    y = b.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    ic = 64
    for stage, oc in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            identity = y
            z = b.conv_bn(y, ic, oc, 3, stride)
            z = b.conv_bn(z, oc, oc, 3, 1, act=None)
            if stride != 1 or ic != oc:
                identity = b.conv_bn(y, ic, oc, 1, stride, act=None)
            y = b.node("Relu", [b.node("Add", [z, identity])])
            ic = oc
    y = b.node("Flatten", [b.node("GlobalAveragePool", [y])], axis=1)
    y = b.dense(y, 512, classes)
    return b.model(x, (1, 3, size, size), y, (1, classes))


# torchvision's inverted-residual settings: expansion t, channels c, repeats n, first stride s
_MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                 (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip


def mobilenet_v2(seed: int = 0, classes: int = 1000, size: int = 224):
    b = Builder("mobilenet_v2", seed)
    x = "input"
    y = b.conv_bn(x, 3, 32, 3, stride=2, act="relu6")
    ic = 32
    for t, c, n, s in _MOBILENET_V2:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = ic * t
            z = y if t == 1 else b.conv_bn(y, ic, hidden, 1, act="relu6")
            z = b.conv_bn(z, hidden, hidden, 3, stride, groups=hidden, act="relu6")
            z = b.conv_bn(z, hidden, c, 1, act=None)
            y = b.node("Add", [y, z]) if stride == 1 and ic == c else z
            ic = c
    y = b.conv_bn(y, ic, 1280, 1, act="relu6")
    y = b.node("Flatten", [b.node("GlobalAveragePool", [y])], axis=1)
    y = b.dense(y, 1280, classes)
    return b.model(x, (1, 3, size, size), y, (1, classes))


MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}


def write_model(name: str, path: str | Path, seed: int = 0) -> Path:
    """Write a zoo model as an ONNX file (atomically)."""
    from tilecraft.errors import ModelError
    from tilecraft.files import write_atomic

    if name not in MODELS:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return write_atomic(path, MODELS[name](seed).SerializeToString())
