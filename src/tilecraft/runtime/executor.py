"""The graph executor: runs a compiled model's steps in order, accelerator programs on a Device
(`sim`, `rtl`, `pynq`, `cpu`, `gpu`) or on the integer reference, host operators on a
host-kernel backend (`HostKernels`: numpy's `NumpyKernels`, or the generated kernels through
`runtime.kernels.HostStepKernels`, JIT-compiled here or from a board's prebuilt library). numpy
only, so it runs on a board."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from tilecraft.errors import DeviceError
from tilecraft.ops import host as host_ops
from tilecraft.runtime.check import expected_chain_outputs, expected_outputs
from tilecraft.runtime.device import Device
from tilecraft.runtime.layout import pack_inputs, unpack_outputs
from tilecraft.runtime.model import CompiledModel, HostStep
from tilecraft.runtime.tensors import check_names


class HostKernels(Protocol):
    """Runs one host operator: `op` (a `tilecraft.ops.host` record) on its inputs and
    constants; must match `tilecraft.ops.host.run` bit for bit."""

    name: str

    def run(self, op: host_ops.HostOp, inputs: list[np.ndarray], constants: dict) -> np.ndarray: ...


class NumpyKernels:
    """The host kernels in numpy: the reference semantics themselves."""

    name = "numpy"

    def run(self, op, inputs, constants):
        return host_ops.run(op, inputs, constants)


@dataclass
class StepReport:
    name: str
    place: str  # "accelerator", "host", or "cpu" (an accelerator step on the cpu device)
    seconds: float
    cycles: int | None = None
    dram_bytes: int | None = None
    pack_seconds: float = 0.0  # host time packing inputs and unpacking outputs (accelerator)


@dataclass
class ModelRun:
    outputs: dict[str, np.ndarray]
    steps: list[StepReport]
    tensors: dict[str, np.ndarray] = field(default_factory=dict)  # every tensor, with keep

    @property
    def accelerator_cycles(self) -> int:
        return sum(s.cycles or 0 for s in self.steps)

    @property
    def host_seconds(self) -> float:
        """Host work: host steps (and steps on the cpu device), and packing/unpacking around
        accelerator steps."""
        return sum(s.seconds if s.place in ("host", "cpu") else s.pack_seconds for s in self.steps)


def run_model(
    model: CompiledModel,
    inputs: dict[str, np.ndarray],
    device: Device | None = None,
    *,
    host: HostKernels | None = None,
    keep: bool = False,
) -> ModelRun:
    """Run `model` on float `inputs` (by input name); accelerator steps on `device`, or on the
    integer reference when it is None. With `keep`, every tensor is returned."""
    if not isinstance(model, CompiledModel):
        raise DeviceError(
            f"run_model runs a CompiledModel (CompiledModel.load(PATH) reads a .tcm file), not "
            f"{type(model).__name__} {model!r}"
        )
    if device is not None and not callable(getattr(device, "run", None)):
        raise DeviceError(
            f"device must be a device (get_device(NAME) makes one) or None, not {device!r}"
        )
    host = host or NumpyKernels()
    check_names(model.name, model.inputs, inputs)
    # kernels compiled here: all at once, before the first step (the host's layout kernels
    # only for a device that takes packed arrays: the cpu device runs on logical tensors)
    if callable(getattr(device, "prepare", None)):
        device.prepare(model)
    if callable(getattr(host, "prepare", None)):
        if _packers(host) is None:
            host.prepare(model)
        else:
            host.prepare(model, layouts=device is not None and not hasattr(device, "run_layers"))
    values = {}
    for name in model.inputs:
        spec = model.tensor(name)
        x = np.asarray(inputs[name])
        if x.shape != spec.shape or x.dtype.kind not in "fiu":
            raise DeviceError(
                f"input {name!r} is {x.dtype}{list(x.shape)}; model "
                f"{model.name!r} expects float {list(spec.shape)}"
            )
        if x.dtype.kind == "f" and not np.isfinite(x).all():  # quantized to nonsense, silently
            bad = int(x.size - np.count_nonzero(np.isfinite(x)))
            raise DeviceError(
                f"input {name!r} holds {bad:,} values that are NaN or infinite (of {x.size:,}); "
                f"the model takes finite numbers"
            )
        values[name] = x.astype(np.float32)
    reports = []
    for step in model.steps:
        start = time.perf_counter()
        if isinstance(step, HostStep):
            consts = model.host_constants.get(step.name, {})
            values[step.output] = host.run(step.op, [values[i] for i in step.inputs], consts)
            reports.append(StepReport(step.name, "host", time.perf_counter() - start))
            continue
        program = model.programs[step.program]
        logical = {b.buffer: _view(program, b.buffer, values[b.tensor]) for b in step.inputs}
        cycles = dram = None
        pack = 0.0
        if device is None or hasattr(device, "run_layers"):  # on logical tensors
            outs = _logical_outputs(program, step, logical, device, keep)
            for name in set(outs) - {b.buffer for b in step.outputs}:
                values[name] = outs[name]  # with keep, the tensors inside the chain too
        else:
            t0 = time.perf_counter()
            packed = pack_inputs(program, logical, _packers(host))
            t1 = time.perf_counter()
            result = device.run(program, packed)
            t2 = time.perf_counter()
            outs = unpack_outputs(program, result.outputs, _packers(host))
            pack = (t1 - t0) + (time.perf_counter() - t2)
            cycles = getattr(result.report, "cycles", None)
            moved = getattr(result.report, "dram_bytes", None)
            dram = sum(moved.values()) if isinstance(moved, dict) else None
        for b in step.outputs:
            values[b.tensor] = _as_tensor(model, b.tensor, outs[b.buffer])
        place = "cpu" if hasattr(device, "run_layers") else "accelerator"
        reports.append(
            StepReport(step.name, place, time.perf_counter() - start, cycles, dram, pack)
        )
    outputs = {name: values[name] for name in model.outputs}
    return ModelRun(outputs, reports, values if keep else {})


def _logical_outputs(program, step, logical: dict, device, keep: bool) -> dict:
    """A step's outputs from logical tensors: the integer reference (device None), or a
    device that computes on them (`cpu`: host kernels)."""
    if device is not None:
        return device.run_layers(program, step.layers, logical, every=keep and bool(step.layers))
    if step.layers:
        return expected_chain_outputs(program, step.layers, logical, every=keep)
    return expected_outputs(program, logical)


def _view(program, buffer: str, value: np.ndarray) -> np.ndarray:
    """A tensor as the program's buffer sees it: (N, C, 1, 1) and (N, C) are the same values
    (a flatten the compiler left out), so a reshape of the same size is taken as given."""
    layout = program.buffer(buffer).layout
    if (
        layout is not None
        and value.shape != tuple(layout.logical)
        and value.size == int(np.prod(layout.logical))
    ):
        return value.reshape(layout.logical)
    return value


def _as_tensor(model: CompiledModel, name: str, value: np.ndarray) -> np.ndarray:
    """A buffer's value as the model's tensor: a dense layer read through a Flatten stores
    (N, C, 1, 1) for the (N, C) tensor, the same values."""
    shape = model.tensor(name).shape
    if value.shape != tuple(shape) and value.size == int(np.prod(shape)):
        return value.reshape(shape)
    return value


def steady_host_seconds(
    model: CompiledModel, run: ModelRun, host: HostKernels | None = None, repeats: int = 25
) -> float:
    """The host work of `run` (made with `keep`) timed again, warm: each host step, and the
    packing and unpacking around each accelerator step, the fastest of `repeats` each. A first
    run's time includes numpy's one-off start-up costs, which a deployed model pays once. Five
    repeats left ResNet-18's 0.9 ms spread over 0.92-1.02 ms between calls (one bench run read
    1.43) on a shared 2-core machine; 25 keep it within 0.87-0.92 for about 25 ms more."""
    if not run.tensors:
        raise DeviceError("steady_host_seconds needs a run made with keep=True")
    host = host or NumpyKernels()
    values = run.tensors
    total = 0.0
    for step in model.steps:
        if isinstance(step, HostStep):
            consts = model.host_constants.get(step.name, {})
            args = [values[i] for i in step.inputs]
            total += _fastest(repeats, host.run, step.op, args, consts)
            continue
        program = model.programs[step.program]
        logical = {b.buffer: _view(program, b.buffer, values[b.tensor]) for b in step.inputs}
        total += _fastest(repeats, pack_inputs, program, logical, _packers(host))
        for b in step.outputs:
            layout = program.buffer(b.buffer).layout
            if layout is not None:
                packed = layout.pack(program.config, _view(program, b.buffer, values[b.tensor]))
                stored = {b.buffer: packed}
                total += _fastest(repeats, unpack_outputs, program, stored, _packers(host))
    return total


def _packers(host):
    """`host` where it packs and unpacks too (`HostStepKernels.packer`, `unpacker`), else
    None: numpy does."""
    return host if callable(getattr(host, "packer", None)) else None


def _fastest(repeats: int, work, *args) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        work(*args)
        best = min(best, time.perf_counter() - start)
    return best
