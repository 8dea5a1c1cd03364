"""A program's outputs checked against the reference (`tilecraft.ops.reference`): the program's
`Computation` says what it computes; its logical inputs and its constants (unpacked through
their layouts) are the reference's tensors."""

from __future__ import annotations

import numpy as np

from tilecraft.errors import DeviceError, ProgramError
from tilecraft.ops import reference
from tilecraft.runtime.program import Program


def expected_outputs(program: Program, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference's outputs for `inputs` (logical tensors, by buffer name)."""
    if program.computation is None:
        raise ProgramError(
            f"program {program.name!r} does not say what it computes (no computation), so the "
            f"reference cannot check it"
        )
    tensors = dict(inputs)
    for name, stored in program.constants.items():
        layout = program.buffer(name).layout
        if layout is not None:
            tensors[name] = layout.unpack(program.config, stored)
    return reference.outputs(program.computation, tensors)


def expected_chain_outputs(
    program: Program, layers, inputs: dict, every: bool = False
) -> dict[str, np.ndarray]:
    """The reference's outputs of a chained program: each layer (`runtime.model.ChainLayer`) in
    order on the tensors the earlier ones made, `inputs` and the program's constants. With
    `every`, also each tensor the layers hand over inside the program."""
    return chain_outputs(program, layers, inputs, reference.outputs, every)


def logical_constants(program: Program) -> dict[str, np.ndarray]:
    """The program's constants (weights, epilogue vectors) as logical tensors, unpacked from
    the layouts they are stored in."""
    values = {}
    for name, stored in program.constants.items():
        layout = program.buffer(name).layout
        values[name] = layout.unpack(program.config, stored) if layout is not None else stored
    return values


def chain_outputs(
    program: Program, layers, inputs: dict, compute, every: bool = False, constants=None
) -> dict[str, np.ndarray]:
    """`expected_chain_outputs` with each computation run by `compute(computation, tensors)`
    (the reference, or host kernels); no `layers` means the program's own computation.
    `constants`: the program's `logical_constants`, when the caller keeps them between runs."""
    if not layers:
        if program.computation is None:
            raise ProgramError(f"program {program.name!r} does not say what it computes")
        layers = [_Whole(program)]
    values = dict(inputs)
    values.update(logical_constants(program) if constants is None else constants)
    for layer in layers:
        local = {b.buffer: values[b.tensor] for b in layer.buffers if b.tensor in values}
        shape = getattr(layer.computation.op, "input_shape", None)
        x = local.get("input")
        if shape is not None and x is not None and x.shape != shape and x.size == np.prod(shape):
            local["input"] = x.reshape(shape)  # a flatten left out: the same values
        names = {b.buffer: b.tensor for b in layer.buffers}
        for buffer, value in compute(layer.computation, local).items():
            values[names[buffer]] = value
    if every:
        inner = {b.name for b in program.buffers if b.role.value in ("output", "scratch")}
        return {k: v for k, v in values.items() if k in inner}
    return {b.name: values[b.name] for b in program.outputs}


class _Whole:
    """A program's own computation as the one layer of a chain, its buffers by their names."""

    def __init__(self, program: Program):
        self.computation = program.computation
        self.buffers = [_Same(b.name) for b in program.buffers]


class _Same:
    def __init__(self, name: str):
        self.buffer = self.tensor = name


def check_outputs(program: Program, inputs: dict, outputs: dict) -> tuple[bool, str]:
    """(ok, message) comparing every output bit-exactly with the reference; `inputs` and
    `outputs` are logical tensors (runtime.layout.unpack_outputs)."""
    expected = expected_outputs(program, inputs)
    missing = sorted(set(expected) - set(outputs or {}))
    if missing:
        raise DeviceError(
            f"outputs of {program.name!r} lack {missing} (unpack_outputs(program, result.outputs) "
            f"gives them all)"
        )
    lines, ok = [], True
    for name, want in expected.items():
        got = np.asarray(outputs[name])
        if got.shape != want.shape:
            ok = False
            lines.append(f"check {name}: shape {got.shape}, the reference's {want.shape}")
            continue
        bad = int(np.count_nonzero(got != want))
        ok &= bad == 0
        lines.append(
            f"check {name}: "
            + ("bit-exact vs the reference" if not bad else f"{bad} of {want.size} values differ")
        )
    return ok, "\n".join(lines)
