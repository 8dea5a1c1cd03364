"""The graph compiler takes the schedule tuning records hold for each layer they cover."""

import json

from network_models import tiny_resnet

from tilecraft.compiler.frontend import import_model
from tilecraft.compiler.graph.network import compile_network
from tilecraft.compiler.quant.calibrate import random_calibration
from tilecraft.compiler.tune.records import Record, Records, tool_version
from tilecraft.compiler.tune.task import Task, schedule_key
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d


def test_a_recorded_schedule_is_used_for_its_layer(tmp_path):
    cfg = preset("default")
    graph = import_model(tiny_resnet(seed=1))
    data = random_calibration(graph, 1)
    plain = compile_network(graph, cfg, data)
    name, program = next(
        (n, p)
        for n, p in plain.layer_programs.items()
        if isinstance(p.computation.op, Conv2d) and n != "conv_2" and n not in plain.merged
    )
    layer = next(x for x in plain.network.layers if x.name == name)
    task = Task(cfg, layer.op, layer.epilogue, False)
    other = next(s for s in reversed(task.space) if s != program.schedule)
    records = Records(tmp_path / "r.jsonl", cfg.digest, tool_version("cycle-model"))
    records.append(Record(task.key, cfg.digest, schedule_key(other), 1, None, records.tool, 0))
    tuned = compile_network(
        graph, cfg, data, records=Records(tmp_path / "r.jsonl", cfg.digest, None)
    )
    assert tuned.layer_programs[name].schedule == other
    assert plain.layer_programs[name].schedule != other
    assert json.loads(records.records[0].task)["op"]["kind"] == "conv2d"


def test_a_layer_on_the_requantization_unit_is_tuned_and_its_record_used(tmp_path):
    """On a config with the unit the tuner's tasks are the FLOAT32 layers compile_network
    builds: the cycle model measures one (placeholder scales: they change no cycle) and a
    record of it reaches that layer."""
    from tilecraft.compiler.quant.calibrate import calibrate
    from tilecraft.compiler.quant.quantize import quantize
    from tilecraft.compiler.tune.measure import CycleModel
    from tilecraft.compiler.tune.task import network_tasks

    cfg = preset("default").replace(requant_lanes=8)
    graph = import_model(tiny_resnet(seed=1))
    data = random_calibration(graph, 1)
    tasks = dict(network_tasks(cfg, quantize(graph, calibrate(graph, data), cfg=cfg)))
    name, task = next((n, t) for n, t in tasks.items() if t.epilogue.on_unit and n != "conv_2")
    other = next(s for s in reversed(task.space) if s != task.space[0])
    result = CycleModel().measure(task, other)
    assert result.error is None and result.cycles > 0
    records = Records(tmp_path / "r.jsonl", cfg.digest, tool_version("cycle-model"))
    records.append(Record(task.key, cfg.digest, schedule_key(other), 1, None, records.tool, 0))
    tuned = compile_network(
        graph, cfg, data, records=Records(tmp_path / "r.jsonl", cfg.digest, None)
    )
    assert tuned.layer_programs[name].schedule == other
