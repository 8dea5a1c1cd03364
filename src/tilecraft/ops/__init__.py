"""Operators, their schedules and their reference semantics: the data every layer shares (the
compiler builds programs for them, artifacts record them, the reference and the devices check
them). numpy only, so it loads on a board."""

from tilecraft.ops.operators import (
    Computation,
    Conv2d,
    Dense,
    DepthwiseConv2d,
    Epilogue,
    Gemm,
    GlobalAvgPool2d,
    MaxPool2d,
    Multiplier,
    ScaledAdd,
)
from tilecraft.ops.schedules import ConvSchedule, GemmTiles, LoopOrder

__all__ = [
    "Computation",
    "Conv2d",
    "ConvSchedule",
    "Dense",
    "DepthwiseConv2d",
    "Epilogue",
    "Gemm",
    "GemmTiles",
    "GlobalAvgPool2d",
    "LoopOrder",
    "MaxPool2d",
    "Multiplier",
    "ScaledAdd",
]
