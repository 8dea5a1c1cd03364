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
