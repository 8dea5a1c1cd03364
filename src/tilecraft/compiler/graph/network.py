"""A network from ONNX to a compiled model: import and normalise, check every node up front,
calibrate, quantize, then compile each accelerator layer through the operator pipeline and
string the steps together (`CompiledModel`, run by `runtime.executor`).

Today each conv/dense is its own program and the host passes int8 NCHW tensors between them;
one program per accelerator segment (activations kept in the blocked DRAM layout, a planned
arena) is the next step of the whole-network issue.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tilecraft.compiler.conv2d import compile_operator
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.frontend.ir import Graph
from tilecraft.compiler.pipeline import MEASURED
from tilecraft.compiler.quant.calibrate import Ranges, calibrate
from tilecraft.compiler.quant.quantize import (
    AccelLayer,
    QuantizedNetwork,
    check_supported,
    quantize,
)
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.ops import ConvSchedule
from tilecraft.progress import track
from tilecraft.runtime.model import AcceleratorStep, Binding, CompiledModel, HostStep


@dataclass
class NetworkCompilation:
    model: CompiledModel
    graph: Graph
    network: QuantizedNetwork
    ranges: Ranges
    seconds: dict[str, float]  # import, calibrate, quantize, compile


def build_model(cfg: HwConfig, net: QuantizedNetwork, measure: int = MEASURED) -> CompiledModel:
    """Compile every accelerator layer of `net` and order the steps."""
    steps, programs, host_constants = [], [], {}
    chosen: dict[tuple, ConvSchedule] = {}  # a layer shape's schedule, measured once
    for layer in track(net.layers, f"compiling {net.name}"):
        if isinstance(layer, AccelLayer):
            key = _schedule_key(layer)
            params = {"weight": layer.weight, "bias": layer.bias, "multiplier": layer.multiplier,
                      "name": layer.name}  # fmt: skip
            try:
                comp = compile_operator(cfg, layer.op, layer.epilogue, **params,
                                        schedule=chosen.get(key), measure=measure)  # fmt: skip
            except ScheduleError:
                if key not in chosen:
                    raise
                comp = compile_operator(cfg, layer.op, layer.epilogue, **params, measure=measure)
            chosen[key] = comp.schedule
            inputs = [Binding("input", layer.input)]
            if layer.residual is not None:
                inputs.append(Binding("residual", layer.residual))
            steps.append(AcceleratorStep(layer.name, len(programs), tuple(inputs),
                                         (Binding("output", layer.output),)))  # fmt: skip
            programs.append(comp.program)
        else:
            steps.append(HostStep(layer.name, layer.op, layer.inputs, layer.output,
                                  tuple(sorted(layer.constants))))  # fmt: skip
            if layer.constants:
                host_constants[layer.name] = dict(layer.constants)
    return CompiledModel(net.name, cfg, net.inputs, net.outputs, tuple(net.tensors.values()),
                         tuple(steps), tuple(programs), host_constants)  # fmt: skip


def _schedule_key(layer: AccelLayer) -> tuple:
    """What a schedule's choice depends on: the operator and the epilogue's shape (not its
    values, except whether the rounding constant needs its own row)."""
    ep = layer.epilogue
    return (layer.op, ep.bias, ep.multiplier, ep.residual, ep.shift > 16)


def compile_network(source, cfg: HwConfig, calibration: dict, *, observer: str = "minmax",
                    input_shapes=None, measure: int = MEASURED) -> NetworkCompilation:  # fmt: skip
    """ONNX (a path or ModelProto, or an imported Graph) -> a compiled int8 model on `cfg`."""
    seconds = {}
    start = time.perf_counter()
    graph = source if isinstance(source, Graph) else import_model(source, input_shapes)
    check_supported(graph)
    seconds["import"] = time.perf_counter() - start
    start = time.perf_counter()
    ranges = calibrate(graph, calibration, observer)
    seconds["calibrate"] = time.perf_counter() - start
    start = time.perf_counter()
    net = quantize(graph, ranges)
    seconds["quantize"] = time.perf_counter() - start
    start = time.perf_counter()
    model = build_model(cfg, net, measure)
    seconds["compile"] = time.perf_counter() - start
    return NetworkCompilation(model, graph, net, ranges, seconds)
