"""A conv and the max pool that alone reads its output, compiled as one layer: the pool taken on
the conv's accumulators in the conv's own program (`compile_operator`'s `pool`,
`operator/pool_epilogue.py`), so that its epilogue and stores cover the pooled rows alone and
the conv's output never goes to DRAM. `merge_pools` pairs them where the epilogue is shown
never to decrease; the network compiles the pair both ways, and `keep_faster` keeps the one
layer only where its cycles are fewer than the conv's and the pool's programs' together (a
small array's scratchpads can make the handed rows and columns cost more than they save)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tilecraft.compiler.operator.pipeline import check_pool
from tilecraft.compiler.quant.quantize import AccelLayer, PoolLayer, QuantizedNetwork
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig
from tilecraft.ops import Conv2d, MaxPool2d
from tilecraft.runtime.device import cycle_model


def merge_pools(
    cfg: HwConfig,
    net: QuantizedNetwork,
    merged: dict,
    parameters: Callable[[AccelLayer], dict],
    reads: Callable[[object], list],
) -> tuple[list, dict[str, tuple[AccelLayer, PoolLayer]]]:
    """The network's layers with each such pair as one layer, named for both (its names
    recorded in `merged`) and writing the pool's output; and the pairs, by that name.
    `parameters`: a layer's, as `compile_operator` takes them; `reads`: the tensors a layer
    reads."""
    readers: dict[str, int] = {}
    for layer in net.layers:
        for t in reads(layer):
            readers[t] = readers.get(t, 0) + 1
    out: list = []
    pairs: dict[str, tuple[AccelLayer, PoolLayer]] = {}
    for layer in net.layers:
        conv = out[-1] if out else None
        if (
            isinstance(layer, PoolLayer)
            and isinstance(layer.op, MaxPool2d)
            and isinstance(conv, AccelLayer)
            and isinstance(conv.op, Conv2d)
            and conv.pool is None
            and conv.output == layer.input
            and readers[conv.output] == 1
            and conv.output not in net.outputs
            and _fits(cfg, conv, layer.op, parameters(conv))
        ):
            name = f"{conv.name}+{layer.name}"
            merged[name] = (conv.name, layer.name)
            pairs[name] = (conv, layer)
            out[-1] = replace(conv, name=name, output=layer.output, pool=layer.op)
        else:
            out.append(layer)
    return out, pairs


def _fits(cfg: HwConfig, conv: AccelLayer, pool: MaxPool2d, params: dict) -> bool:
    try:
        check_pool(cfg, conv.op, conv.epilogue, pool, **params)
    except ScheduleError:
        return False
    return True


def keep_faster(
    pairs: dict[str, tuple[AccelLayer, PoolLayer]],
    layers: list,
    programs: dict,
    cycles: dict,
    pools: dict,
    pool_program: Callable,
    moved: dict,
    merged: dict,
    timer=None,
) -> list:
    """`layers` with each pair split again where its one program (`programs[name]`, None if
    it could not be compiled) takes more cycles than the conv's alone (compiled beside it,
    `programs[conv.name]`) and the pool's (`pool_program(pool_layer, moved)`; None where the
    host runs it, counted as no cycles: split, the accelerator's time is what it was) together;
    `cycles` holds what the compiles measured, `timer` (the cycle model unless given) measures
    the rest. Updates `programs`, `pools` (each split pool's program) and `merged`."""
    timer = timer or cycle_model()
    out = list(layers)
    for name, (conv, pool) in pairs.items():
        fused, alone = programs.get(name), programs.pop(conv.name)
        one = None if fused is None else cycles.get(name) or timer(fused)
        two = cycles.get(conv.name) or timer(alone)
        if one is not None and one <= two:
            continue  # faster than the conv alone: no need to build the pool's program
        apart = pool_program(pool, moved)
        if one is not None and one <= two + (timer(apart) if apart else 0):
            continue
        k = next(i for i, layer in enumerate(out) if getattr(layer, "name", None) == name)
        out[k : k + 1] = [conv, pool]
        programs.pop(name, None)
        programs[conv.name], pools[pool.name] = alone, apart
        del merged[name]
    return out
