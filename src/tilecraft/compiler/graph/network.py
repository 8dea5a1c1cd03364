"""A network from ONNX to a compiled model: import and normalise, check every node up front,
calibrate, quantize, then compile each accelerator layer through the operator pipeline and
string the steps together (`CompiledModel`, run by `runtime.executor`): each run of
consecutive accelerator layers is one program (`chain`), its activations kept in DRAM in the
blocked layout and placed in a liveness arena (`arena`); the host passes tensors between runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.frontend.ir import Graph
from tilecraft.compiler.graph.arena import DEFAULT_BUDGET
from tilecraft.compiler.graph.chain import Part, chain_programs, compatible
from tilecraft.compiler.graph.pooled import keep_faster, merge_pools
from tilecraft.compiler.operator.conv2d import compile_operator
from tilecraft.compiler.operator.pipeline import MEASURED
from tilecraft.compiler.programs.eltwise import compile_scaled_add
from tilecraft.compiler.programs.pool import compile_global_avgpool, compile_maxpool
from tilecraft.compiler.quant.calibrate import Ranges, calibrate, model_ranges
from tilecraft.compiler.quant.quantize import (
    AccelLayer,
    AddLayer,
    HostLayer,
    PoolLayer,
    QuantizedNetwork,
    check_supported,
    quantize,
)
from tilecraft.compiler.tune.task import Task
from tilecraft.compiler.tune.tuner import best_schedule
from tilecraft.errors import ConfigError, ModelError, ScheduleError
from tilecraft.hw.config import HwConfig, require_config
from tilecraft.jobs import map_jobs
from tilecraft.ops import Conv2d, ConvSchedule, Dense, DepthwiseConv2d, MaxPool2d
from tilecraft.ops import host as host_ops
from tilecraft.runtime.device import cycle_model
from tilecraft.runtime.model import (
    AcceleratorStep,
    Binding,
    ChainLayer,
    CompiledModel,
    HostStep,
)
from tilecraft.runtime.program import Program


@dataclass
class NetworkCompilation:
    model: CompiledModel
    graph: Graph
    network: QuantizedNetwork
    ranges: Ranges
    seconds: dict[str, float]  # import, calibrate, quantize, compile
    layer_programs: dict[str, Program]  # each accelerator layer's own program, by layer name
    moved: dict[str, str]  # layers the partition placed on the accelerator, run on the host
    merged: dict[str, tuple[str, ...]]  # layers compiled as one (a conv and its max pool)


ON_ACCELERATOR = (AccelLayer, PoolLayer, AddLayer)
FIXED = (PoolLayer, AddLayer)  # layers with one program whatever the schedule


def _pool_program(
    cfg: HwConfig, layer: PoolLayer | AddLayer, moved: dict[str, str]
) -> Program | None:
    """The pooling (or scaled add) layer's program, or None when the accelerator cannot hold
    it (a shape past a limit the partition does not see: the host runs it then, and `moved`
    says why)."""
    try:
        if isinstance(layer, AddLayer):
            return compile_scaled_add(cfg, layer.op, layer.name)
        if isinstance(layer.op, MaxPool2d):
            return compile_maxpool(cfg, layer.op, layer.name)
        return compile_global_avgpool(cfg, layer.op, layer.name)
    except ScheduleError as e:
        moved[layer.name] = str(e)
        return None


def _host_pool(layer: PoolLayer | AddLayer) -> HostLayer:
    """A pool (or scaled add) the accelerator cannot widen (block_in != block_out) runs on the
    host, with the same integers (an add as onnxruntime's QLinearAdd)."""
    op = layer.op
    if isinstance(layer, AddLayer):
        unit = 2.0 ** (op.pre_shift + op.shift)
        ratio_a, ratio_b = (
            op.weight_a * op.multiplier_a / unit,
            op.weight_b * op.multiplier_b / unit,
        )
        host = host_ops.Add(ratio_a, ratio_b, op.clip, op.zero_a, op.zero_b, op.zero_y)
        return HostLayer(layer.name, host, (layer.input, layer.residual), layer.output)
    if isinstance(op, MaxPool2d):
        host = host_ops.MaxPool(op.kernel, op.stride, op.pads)
    else:  # its zero points, its GEMM weight (folded into the multiplier) and both shifts
        host = host_ops.GlobalAvgPool(
            op.weight * op.multiplier,
            op.shift,
            op.input_zero,
            op.output_zero,
            op.pre_shift,
            op.scale,
        )
    return HostLayer(layer.name, host, (layer.input,), layer.output)


def _host_depthwise(layer: AccelLayer) -> HostLayer:
    """A depthwise layer on a config without square blocks (no diagonal weight blocks) runs on
    the host, with the same integers."""
    op = layer.op
    (ph, pw) = op.pad
    host = host_ops.DepthwiseConv(
        op.kernel, op.stride, (ph, pw, ph, pw), layer.epilogue, op.pad_value
    )
    return HostLayer(layer.name, host, (layer.input,), layer.output, _parameters(layer))


def _parameters(layer: AccelLayer) -> dict:
    """The layer's parameters as `compile_operator` takes them."""
    return {
        "weight": layer.weight,
        "bias": layer.bias,
        "multiplier": layer.multiplier,
        **layer.vectors,
    }


def _runs(layers: list) -> list[list]:
    """The layers as maximal runs of consecutive accelerator layers, and host layers alone."""
    runs: list[list] = []
    for layer in layers:
        if isinstance(layer, ON_ACCELERATOR) and runs and isinstance(runs[-1][0], ON_ACCELERATOR):
            runs[-1].append(layer)
        else:
            runs.append([layer])
    return runs


def _bindings(layer) -> dict[str, str]:
    out = {"input": layer.input, "output": layer.output}
    if getattr(layer, "residual", None) is not None:
        out["residual"] = layer.residual
    return out


def _step(layer, index: int) -> AcceleratorStep:
    inputs = [Binding(b, t) for b, t in _bindings(layer).items() if b != "output"]
    return AcceleratorStep(layer.name, index, tuple(inputs), (Binding("output", layer.output),))


def build_model(
    cfg: HwConfig,
    net: QuantizedNetwork,
    measure: int = MEASURED,
    *,
    chain: bool = True,
    budget: int = DEFAULT_BUDGET,
    layer_programs: dict | None = None,
    records=None,
    jobs: int | None = None,
    moved: dict | None = None,
    timer=None,
    merged: dict | None = None,
    pools_on_accumulators: bool = True,
) -> CompiledModel:
    """Compile every accelerator layer of `net` and order the steps. With `chain`, each run of
    consecutive accelerator layers becomes one program whose activations stay in DRAM in the
    blocked layout (`chain.chain_programs`), split where a layer's layout does not line up with
    its producer's. `layer_programs`, if given, receives each layer's own program; `records`
    (`tune.records.Records`), the schedules tuning found, used for each layer they cover;
    `jobs`, the worker processes the layers are compiled on (None: one per core, `jobs.py`);
    `moved`, if given, receives each layer the partition placed on the accelerator that runs
    on the host, with the reason; `timer`, what schedule candidates are measured with
    (`compile_operator`'s: the cycle model unless given); `merged`, if given, receives the
    layers compiled as one (`_pools_on_accumulators`, unless `pools_on_accumulators` is
    False): the network's layer names, by the compiled layer's."""
    steps, programs, host_constants = [], [], {}
    moved = {} if moved is None else moved
    merged = {} if merged is None else merged
    together, pairs = (
        merge_pools(cfg, net, merged, _parameters, _reads)
        if pools_on_accumulators
        else (list(net.layers), {})
    )
    pools = {
        layer.name: _pool_program(cfg, layer, moved)
        for layer in together
        if isinstance(layer, FIXED)
    }
    layers = [
        _host_pool(layer) if isinstance(layer, FIXED) and pools[layer.name] is None else layer
        for layer in together
    ]
    if cfg.block_in != cfg.block_out:  # a network quantized without the config (the tuner's)
        layers = [
            _host_depthwise(layer)
            if isinstance(getattr(layer, "op", None), DepthwiseConv2d)
            else layer
            for layer in layers
        ]
    programs_of, cycles_of = _compile_layers(
        cfg,
        _runs(layers),
        measure,
        records=records,
        jobs=jobs,
        timer=timer,
        description=f"compiling {net.name}",
        alternatives={name: conv for name, (conv, _) in pairs.items()},
    )
    if pairs:  # each conv and its pool as one layer only where that is faster
        layers = keep_faster(
            pairs, layers, programs_of, cycles_of, pools, partial(_pool_program, cfg), moved,
            merged, timer,
        )  # fmt: skip
        layers = [
            _host_pool(layer) if isinstance(layer, FIXED) and pools[layer.name] is None else layer
            for layer in layers
        ]
    reads = {t for layer in layers for t in getattr(layer, "inputs", ())} | set(net.outputs)
    runs = _runs(layers)
    for k, run in enumerate(runs):
        if not isinstance(run[0], ON_ACCELERATOR):
            layer = run[0]
            steps.append(
                HostStep(
                    layer.name, layer.op, layer.inputs, layer.output, tuple(sorted(layer.constants))
                )
            )
            if layer.constants:
                host_constants[layer.name] = dict(layer.constants)
            continue
        compiled = [
            pools[layer.name] if isinstance(layer, FIXED) else programs_of[layer.name]
            for layer in run
        ]
        if layer_programs is not None:
            layer_programs.update({layer.name: p for layer, p in zip(run, compiled)})
        later = {t for other in runs[k + 1 :] for layer in other for t in _reads(layer)}
        groups = _segments(cfg, run, compiled) if chain else [[i] for i in range(len(run))]
        for g, group in enumerate(groups):
            part_layers = [run[i] for i in group]
            part_programs = [compiled[i] for i in group]
            outside = (
                later
                | reads
                | {t for other in groups[g + 1 :] for i in other for t in _reads(run[i])}
            )
            made = {layer.output for layer in part_layers}
            if len(group) == 1:
                steps.append(_step(part_layers[0], len(programs)))
                programs.append(part_programs[0])
                continue
            parts = [Part(p, _bindings(layer)) for layer, p in zip(part_layers, part_programs)]
            name = f"{part_layers[0].name}..{part_layers[-1].name}"
            # each layer was verified where it was compiled: the chain checks what joining adds
            program, _ = chain_programs(parts, made & outside, name, budget, verified_parts=True)
            names = {x.name for x in program.buffers}
            chain_layers = tuple(
                ChainLayer(
                    p.computation,
                    tuple(
                        Binding(b.name, glob)
                        for b in p.buffers
                        if (glob := _bindings(layer).get(b.name, f"{p.name}.{b.name}")) in names
                    ),
                )
                for layer, p in zip(part_layers, part_programs)
            )
            inputs = tuple(Binding(b.name, b.name) for b in program.inputs)
            outputs = tuple(Binding(b.name, b.name) for b in program.outputs)
            steps.append(
                AcceleratorStep(program.name, len(programs), inputs, outputs, chain_layers)
            )
            programs.append(program)
    total = sum(p.dram_size for p in programs)
    if total > budget:
        raise ModelError(
            f"{net.name} needs {total:,} bytes of DRAM (its {len(programs)} programs: weights, "
            f"activations, instructions); the budget is {budget:,} bytes (--dram-budget)"
        )
    return CompiledModel(
        net.name,
        cfg,
        net.inputs,
        net.outputs,
        tuple(net.tensors.values()),
        tuple(steps),
        tuple(programs),
        host_constants,
    )


def _segments(cfg: HwConfig, run: list, compiled: list) -> list[list[int]]:
    """The run split where a layer cannot read what an earlier layer of its segment stored
    (`chain.compatible`): each segment becomes one program, the host re-packs in between."""
    groups: list[list[int]] = []
    seen: dict = {}  # tensor -> how the current segment has it: stored, or read from the host
    for i, (layer, program) in enumerate(zip(run, compiled)):
        reads = [(program.buffer(b), t) for b, t in _bindings(layer).items() if b != "output"]
        if not groups or any(t in seen and not compatible(cfg, seen[t], buf) for buf, t in reads):
            groups.append([])
            seen = {}
        groups[-1].append(i)
        for buf, t in reads:
            seen.setdefault(t, buf)
        seen[layer.output] = program.buffer("output")
    return groups


def _reads(layer) -> list[str]:
    if isinstance(layer, ON_ACCELERATOR):
        return [layer.input] + ([layer.residual] if getattr(layer, "residual", None) else [])
    return list(layer.inputs)


def _compile_layers(
    cfg: HwConfig,
    runs: list[list],
    measure: int,
    *,
    records,
    jobs: int | None,
    description: str,
    timer=None,
    alternatives: dict | None = None,
) -> tuple[dict[str, Program | None], dict[str, int | None]]:
    """Each conv/dense layer's program, by name, verified, and its cycles where the compile
    measured them. Layers of one shape (operator and epilogue shape, `_schedule_key`) are one
    job: the first searches the schedule, the others take it. The jobs run side by side
    (`jobs.map_jobs`), the largest layers first. `alternatives`: by a layer's name, another
    layer compiled beside it, fed the same way (a conv merged with its pool, alone), both
    timed where the compile did not (in the jobs, side by side); a layer with a pool that
    cannot be compiled is None."""
    alternatives = alternatives or {}
    groups: dict[tuple, list[tuple[AccelLayer, bool | None]]] = {}
    for run in runs:
        if not isinstance(run[0], ON_ACCELERATOR):
            continue
        made = {layer.output for layer in run}
        for layer in run:
            if not isinstance(layer, FIXED):
                fold = None if layer.input not in made else False  # fed by the host: may fold
                for each in (layer, alternatives.get(layer.name)):
                    if each is not None:
                        groups.setdefault(_schedule_key(each) + (fold,), []).append((each, fold))
    work = sorted(groups.values(), key=lambda g: -g[0][0].op.macs)
    timed = frozenset(alternatives) | {conv.name for conv in alternatives.values()}
    compile_group = partial(
        _compile_group, cfg, measure=measure, records=records, timer=timer, timed=timed
    )
    done = [
        (layer.name, result)
        for group, results in zip(work, map_jobs(compile_group, work, jobs, description))
        for (layer, _), result in zip(group, results)
    ]
    return {n: program for n, (program, _) in done}, {n: cycles for n, (_, cycles) in done}


def _compile_group(
    cfg: HwConfig, group: list, *, measure: int, records, timer=None, timed=frozenset()
) -> list:
    chosen: dict[tuple, ConvSchedule] = {}
    out = []
    for layer, fold in group:
        program, cycles = _compile(cfg, layer, chosen, measure, fold, records, timer)
        if cycles is None and program is not None and layer.name in timed:
            cycles = (timer or cycle_model())(program)
        out.append((program, cycles))
    return out


def _compile(cfg, layer: AccelLayer, chosen: dict, measure: int, fold, records=None, timer=None):
    """The layer's program, verified by every rule but dataflow (which a network's chain never
    ran: half a layer's verification time; tests/compiler/graph checks the networks bit-exact
    against the integer reference), and its cycles where the compile measured them; (None,
    None) for a conv with a pool that cannot be compiled so (too many instructions). A
    schedule the records hold for the layer's shape is taken as chosen."""
    key = _schedule_key(layer) + (fold,)
    tuned = isinstance(layer.op, (Conv2d, Dense)) and layer.pool is None
    if records is not None and key not in chosen and tuned:
        best = best_schedule(records, Task(cfg, layer.op, layer.epilogue, fold))
        if best is not None:
            chosen[key] = best
    params = {
        **_parameters(layer),
        "pool": layer.pool,
        "name": layer.name,
        "fold": fold,
        "measure": measure,
        "check": False,
        "timer": timer,
    }
    try:
        comp = _search(cfg, layer, params, chosen.get(key))
    except ScheduleError:
        if layer.pool is None:
            raise
        return None, None  # compiled apart (`pooled.keep_faster`)
    chosen[key] = comp.schedule
    verify(comp.program, dataflow=False)
    cycles = [c.cycles for c in comp.candidates if c.schedule == comp.schedule]
    return comp.program, cycles[0] if cycles else None


def _search(cfg, layer: AccelLayer, params: dict, schedule):
    """The layer compiled with `schedule` (a same-shaped layer's, or a record's), or, where
    that does not fit it (or is None), with a schedule searched afresh."""
    if schedule is not None:
        try:
            return compile_operator(cfg, layer.op, layer.epilogue, **params, schedule=schedule)
        except ScheduleError:
            pass  # another epilogue's (or record's) schedule that does not fit this one
    return compile_operator(cfg, layer.op, layer.epilogue, **params)


def _schedule_key(layer: AccelLayer) -> tuple:
    """What a schedule's choice depends on: the operator and the epilogue's shape (not its
    values; a schedule that does not fit another epilogue is searched again)."""
    ep = layer.epilogue
    return (
        layer.op,
        layer.pool,
        ep.bias,
        ep.multiplier,
        ep.residual,
        ep.final_clip,
        ep.acc_bounds,
        ep.pre_shift > 0,
    )


def compile_network(
    source,
    cfg: HwConfig,
    calibration: dict | None,
    *,
    observer: str = "minmax",
    input_shapes=None,
    measure: int = MEASURED,
    chain: bool = True,
    budget: int = DEFAULT_BUDGET,
    exact_requant: bool | str | None = None,
    records=None,
    jobs: int | None = None,
    timer=None,
    pools_on_accumulators: bool = True,
) -> NetworkCompilation:
    """ONNX (a path or ModelProto, or an imported Graph) -> a compiled int8 model on `cfg`;
    `calibration` None takes the scales of an already quantized (QDQ) model. `exact_requant`:
    see `quantize` (default: for a model that brings its own scales); `jobs`, `timer`,
    `pools_on_accumulators`: see `build_model`."""
    require_config(cfg)
    if records is not None and not hasattr(records, "of"):
        raise ConfigError(
            f"records must be tune.records.Records (applied_records(PATH, cfg.digest) reads a "
            f"file), not {type(records).__name__} {records!r}"
        )
    seconds = {}
    start = time.perf_counter()
    graph = source if isinstance(source, Graph) else import_model(source, input_shapes)
    check_supported(graph)
    seconds["import"] = time.perf_counter() - start
    start = time.perf_counter()
    if calibration is None:  # a quantized model (QDQ) brings its own scales
        ranges = model_ranges(graph)
    else:
        ranges = calibrate(graph, calibration, observer)
    seconds["calibrate"] = time.perf_counter() - start
    start = time.perf_counter()
    net = quantize(graph, ranges, exact_requant, cfg)
    seconds["quantize"] = time.perf_counter() - start
    start = time.perf_counter()
    layer_programs: dict[str, Program] = {}
    moved: dict[str, str] = {}
    merged: dict[str, tuple[str, ...]] = {}
    model = build_model(
        cfg,
        net,
        measure,
        chain=chain,
        budget=budget,
        moved=moved,
        timer=timer,
        layer_programs=layer_programs,
        records=records,
        jobs=jobs,
        merged=merged,
        pools_on_accumulators=pools_on_accumulators,
    )
    seconds["compile"] = time.perf_counter() - start
    return NetworkCompilation(model, graph, net, ranges, seconds, layer_programs, moved, merged)
