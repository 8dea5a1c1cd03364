"""Networks as ONNX, built in the repo (no downloads): the zoo (ResNet-18, MobileNetV2 with
torchvision's architectures and seeded weights) and the trained digits CNN."""
