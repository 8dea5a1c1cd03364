"""Small ONNX networks for the whole-network tests: every operator ResNet-18 uses (conv + BN +
ReLU, max pool, residual blocks with and without a downsampling conv, global average pool,
flatten, Gemm), small enough to compile and simulate in a second or two."""

from tilecraft.models.onnx_builder import Builder


def tiny_resnet(seed: int = 0, size: int = 16, classes: int = 10, depthwise: bool = False):
    b = Builder("tiny_resnet", seed)
    y = b.conv_bn("input", 3, 16, 3, stride=1)
    y = b.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    z = b.conv_bn(y, 16, 16, 3)
    z = b.conv_bn(z, 16, 16, 3, act=None)
    y = b.node("Relu", [b.node("Add", [z, y])])
    z = b.conv_bn(y, 16, 32, 3, stride=2)
    if depthwise:
        z = b.conv_bn(z, 32, 32, 3, groups=32, act="relu6")
    z = b.conv_bn(z, 32, 32, 3, act=None)
    identity = b.conv_bn(y, 16, 32, 1, stride=2, act=None)
    y = b.node("Relu", [b.node("Add", [z, identity])])
    y = b.node("Flatten", [b.node("GlobalAveragePool", [y])], axis=1)
    y = b.dense(y, 32, classes)
    return b.model("input", (1, 3, size, size), y, (1, classes))


def small_cnn(seed: int = 0, size: int = 32, classes: int = 10):
    """A plain CNN whose classifier reads a whole feature map: conv, max pool, two convs, a
    Flatten of (N, 32, H, W), Gemm (the shape of many small models users bring)."""
    b = Builder("small_cnn", seed)
    y = b.conv_bn("input", 3, 16, 3)
    y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.conv_bn(y, 16, 32, 3, stride=2)
    y = b.conv_bn(y, 32, 32, 3)
    y = b.node("Flatten", [y], axis=1)
    y = b.dense(y, 32 * (size // 4) ** 2, classes)
    return b.model("input", (1, 3, size, size), y, (1, classes))


def quantized_by_onnxruntime(
    model, path, activations: str = "int8", samples: int = 4, form: str = "qdq"
):
    """`model` quantized by onnxruntime (QDQ or QOperator, per-channel) on random samples, at
    `path`."""
    from tilecraft.models.onnxruntime_quant import quantize_with_onnxruntime, random_samples

    return quantize_with_onnxruntime(
        model, path, random_samples(model, samples, seed=1), activations=activations, form=form
    )
