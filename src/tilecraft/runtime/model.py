"""The compiled-model artifact: a network as ordered steps over named tensors, each step an
accelerator program or a host operator (`tilecraft.ops.host`), with every tensor's shape, dtype
and quantization scale. Data only (NPZ + JSON header with a schema version and the config
digest, no pickle), written atomically, read strictly; numpy only, so a board loads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Union

import numpy as np

from tilecraft.artifact import read_artifact, write_artifact
from tilecraft.errors import ArtifactError, FormatError, ModelError, TilecraftError
from tilecraft.hw.config import HwConfig, require_config
from tilecraft.ops import Computation
from tilecraft.ops.host import HostOp
from tilecraft.runtime.program import Program
from tilecraft.serial import from_json, to_json

FORMAT = "tilecraft-model"
VERSION = 1


@dataclass(frozen=True)
class TensorSpec:
    """A tensor between steps: int8 values q stand for (q - zero) * scale (float tensors: scale
    1, zero 0)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: float = 1.0
    zero: int = 0


@dataclass(frozen=True)
class Binding:
    """A program buffer bound to a model tensor."""

    buffer: str
    tensor: str


@dataclass(frozen=True)
class ChainLayer:
    """One layer of a chained (multi-layer) program: what it computes, and its buffers by
    their names in the layer's own program (`buffer`) and in the chained one (`tensor`). The
    integer reference of the chain runs these in order."""

    computation: Computation
    buffers: tuple[Binding, ...]


@dataclass(frozen=True)
class AcceleratorStep:
    """A program run on the accelerator: one layer (its program says what it computes) or a
    chain of layers (`layers`) in one submission."""

    name: str
    program: int  # index into the model's programs
    inputs: tuple[Binding, ...]
    outputs: tuple[Binding, ...]
    layers: tuple[ChainLayer, ...] = ()
    kind: ClassVar[str] = "accelerator"


@dataclass(frozen=True)
class HostStep:
    name: str
    op: HostOp
    inputs: tuple[str, ...]
    output: str
    constants: tuple[str, ...] = ()
    kind: ClassVar[str] = "host"


Step = Union[AcceleratorStep, HostStep]


@dataclass(frozen=True)
class CompiledModel:
    name: str
    config: HwConfig
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    tensors: tuple[TensorSpec, ...]
    steps: tuple[Step, ...]
    programs: tuple[Program, ...] = ()
    host_constants: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        known = {t.name for t in self.tensors}
        made = set(self.inputs)
        for step in self.steps:
            reads = (
                [b.tensor for b in step.inputs]
                if isinstance(step, AcceleratorStep)
                else list(step.inputs)
            )
            missing = [t for t in reads if t not in made]
            if missing:
                raise ModelError(f"step {step.name} reads {missing} before any step makes them")
            writes = (
                [b.tensor for b in step.outputs]
                if isinstance(step, AcceleratorStep)
                else [step.output]
            )
            made.update(writes)
            if isinstance(step, AcceleratorStep) and not 0 <= step.program < len(self.programs):
                raise ModelError(
                    f"step {step.name} names program {step.program} of {len(self.programs)}"
                )
            if isinstance(step, HostStep):
                have = set(self.host_constants.get(step.name, {}))
                if have != set(step.constants):
                    raise ModelError(
                        f"step {step.name} needs constants {list(step.constants)}, "
                        f"the model holds {sorted(have)}"
                    )
        unknown = sorted((made | set(self.outputs)) - known)
        if unknown:
            raise ModelError(f"tensors {unknown} have no TensorSpec")
        for p in self.programs:
            p.check_config(self.config)

    def tensor(self, name: str) -> TensorSpec:
        for t in self.tensors:
            if t.name == name:
                return t
        raise ModelError(f"model {self.name!r} has no tensor {name!r}")

    # ---- the artifact ----------------------------------------------------------------------
    def header(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "config": self.config.to_dict(),
            "config_digest": self.config.digest,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "tensors": to_json(self.tensors),
            "steps": to_json(self.steps),
            "programs": [p.header() for p in self.programs],
        }

    def computations(self) -> list:
        """What the accelerator steps compute, in order: each chained layer's computation, or
        a program's own where it has no layers."""
        out = []
        for step in self.steps:
            if isinstance(step, AcceleratorStep):
                program = self.programs[step.program]
                out += [layer.computation for layer in step.layers] or [program.computation]
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for i, p in enumerate(self.programs):
            out.update({f"p{i}/{k}": v for k, v in p.arrays().items()})
        for step, consts in self.host_constants.items():
            out.update({f"h/{step}/{k}": np.ascontiguousarray(v) for k, v in consts.items()})
        return out

    def save(self, path: str | Path) -> Path:
        return write_artifact(path, self.header(), self.arrays())

    @classmethod
    def load(cls, path: str | Path, config: HwConfig | None = None) -> CompiledModel:
        """Read a compiled model; with `config`, refuse one built for another config."""
        if config is not None:
            config = require_config(config, "the config to check the model against")
        header, arrays = read_artifact(
            path, FORMAT, VERSION, kind="compiled model", remake="compile the model again"
        )
        try:
            model = cls._build(header, arrays)
        except TilecraftError as exc:
            raise ArtifactError(f"{str(path)!r}: {exc}") from None
        if config is not None and config.digest != model.config.digest:
            raise ArtifactError(
                f"{str(path)!r} was compiled for config {model.config.tag} "
                f"({model.config.digest[:12]}), not {config.tag} ({config.digest[:12]})"
            )
        return model

    @classmethod
    def _build(cls, header: dict, arrays: dict) -> CompiledModel:
        keys = {
            "format",
            "version",
            "name",
            "config",
            "config_digest",
            "inputs",
            "outputs",
            "tensors",
            "steps",
            "programs",
        }
        if set(header) != keys:
            raise FormatError(f"header fields {sorted(set(header) ^ keys)} missing or unknown")
        config = HwConfig.from_dict(header["config"])
        if config.digest != header["config_digest"]:
            raise ArtifactError("config digest does not match its config")
        programs = []
        if not isinstance(header["programs"], list):
            raise FormatError("programs: expected a list")
        for i, ph in enumerate(header["programs"]):
            prefix = f"p{i}/"
            mine = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
            programs.append(Program.from_parts(ph, mine))
        steps = from_json(tuple[Step, ...], header["steps"], "steps")
        host = {}
        for step in steps:
            if isinstance(step, HostStep) and step.constants:
                try:
                    host[step.name] = {c: arrays[f"h/{step.name}/{c}"] for c in step.constants}
                except KeyError as e:
                    raise FormatError(f"steps: the file holds no constant {e}") from None
        return cls(
            name=from_json(str, header["name"], "name"),
            config=config,
            inputs=from_json(tuple[str, ...], header["inputs"], "inputs"),
            outputs=from_json(tuple[str, ...], header["outputs"], "outputs"),
            tensors=from_json(tuple[TensorSpec, ...], header["tensors"], "tensors"),
            steps=steps,
            programs=tuple(programs),
            host_constants=host,
        )
