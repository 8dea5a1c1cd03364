"""What is tuned: one conv2d or dense layer (with its epilogue) on one config. Its search space
is the legal `ConvSchedule`s the compiler enumerates (`schedule.space`), in a fixed order, so a
schedule is also an index; `key` names the layer in the records."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property

from tilecraft.compiler.mapping.blocks import MappedConv, map_conv2d, map_dense
from tilecraft.compiler.operator import schedule as S
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import HwConfig, require_config
from tilecraft.ops import Conv2d, ConvSchedule, Dense, Epilogue
from tilecraft.serial import to_json


@dataclass(frozen=True)
class Task:
    config: HwConfig
    op: Conv2d | Dense
    epilogue: Epilogue = field(default_factory=Epilogue)
    fold: bool | None = None

    def __post_init__(self):
        require_config(self.config, "a task's config")
        if not isinstance(self.op, (Conv2d, Dense)):
            raise ScheduleError(f"the tuner takes a conv2d or dense layer, not {self.op!r}")
        if not isinstance(self.epilogue, Epilogue):
            raise ScheduleError(f"a task's epilogue is an ops.Epilogue, not {self.epilogue!r}")
        if self.fold not in (None, True, False):
            raise ScheduleError(f"fold is None (decide), True or False, not {self.fold!r}")

    @cached_property
    def mapped(self) -> MappedConv:
        if isinstance(self.op, Dense):
            return map_dense(self.config, self.op, self.epilogue)
        return map_conv2d(self.config, self.op, self.epilogue, self.fold)

    @cached_property
    def space(self) -> tuple[ConvSchedule, ...]:
        schedules = tuple(S.space(self.config, self.mapped))
        if not schedules:
            raise ScheduleError(
                f"no legal schedule for {self.mapped.describe()} on {self.config.tag}"
            )
        return schedules

    @cached_property
    def key(self) -> str:
        """The layer as the records name it: the operator, the folding, and what of the
        epilogue shapes a schedule (which ALU passes and buffers it takes, not its values), so
        that a schedule found for one layer serves every layer of the same shape."""
        ep = self.epilogue
        shape = {
            "bias": ep.bias,
            "multiplier": ep.multiplier.value,
            "residual": ep.residual,
            "final_clip": ep.final_clip,
            "acc_bounds": ep.acc_bounds,
            "two_stage": ep.pre_shift > 0,
            "shift": ep.shift > 0,
            "round_row": self.mapped.round_row,
        }
        return json.dumps(
            {"op": to_json(self.op), "epilogue": shape, "folded": self.mapped.folded},
            sort_keys=True,
        )

    def describe(self) -> str:
        return f"{self.op.describe()} on {self.config.tag} ({len(self.space):,} schedules)"


def schedule_key(s: ConvSchedule) -> str:
    return json.dumps(to_json(s), sort_keys=True)


def network_tasks(config: HwConfig, net) -> list[tuple[str, Task]]:
    """The distinct conv and dense layers of a quantized network (`quant.QuantizedNetwork`)
    as tasks, each named by its first layer: what `tilecraft compile --records` looks up."""
    tasks: dict[str, tuple[str, Task]] = {}
    for layer in net.layers:
        op = getattr(layer, "op", None)
        if isinstance(op, (Conv2d, Dense)):
            task = Task(config, op, layer.epilogue)
            tasks.setdefault(task.key, (layer.name, task))
    return list(tasks.values())
