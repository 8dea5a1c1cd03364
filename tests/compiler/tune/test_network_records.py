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
        if isinstance(p.computation.op, Conv2d) and n != "conv_2"
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
