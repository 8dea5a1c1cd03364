"""The exception hierarchy: every domain error is a `TilecraftError`."""

from __future__ import annotations


class TilecraftError(Exception):
    """Base class of every error tilecraft raises on bad input or bad programs."""


class ConfigError(TilecraftError, ValueError):
    """A hardware configuration value is out of range or inconsistent."""


class EncodingError(TilecraftError, ValueError):
    """An instruction or micro-op field does not fit its encoding, or a word does not decode."""


class ScheduleError(TilecraftError, ValueError):
    """A schedule breaks a hardware limit (capacity, field width, ...)."""


class FormatError(TilecraftError, ValueError):
    """A stored record (an artifact's header, a layout, an operator) has a field that is
    missing, unknown, of the wrong type or out of range; the message names it by its path."""


class PathError(TilecraftError, ValueError):
    """A file to write cannot be: its folder does not exist, it is a folder, or the write
    failed (no permission, disk full). Nothing half-written is left behind."""


class ArtifactError(TilecraftError, ValueError):
    """An artifact file (a program, a compiled model, a kernel library's manifest) is
    unreadable, malformed, tampered with or of another format version."""


class ProgramError(ArtifactError):
    """A program artifact is malformed, truncated, tampered with or for another config."""


class DeviceError(TilecraftError, RuntimeError):
    """A device could not run a program."""


class ExecutionError(DeviceError):
    """An instruction did something illegal while running (bad opcode, address out of range).

    `index` is the instruction's position in the program, `insn` its disassembly.
    """

    def __init__(self, message: str, index: int | None = None, insn: str | None = None):
        where = f"instruction {index}" if index is not None else "program"
        text = f"{where}: {message}" + (f"\n    {insn}" if insn else "")
        super().__init__(text)
        self.message = message
        self.index = index
        self.insn = insn

    def __reduce__(self):  # made again from its fields (a compile worker's error comes back)
        return type(self), (self.message, self.index, self.insn)


class IllegalInstructionError(ExecutionError):
    """An instruction word with an opcode or field combination the hardware does not know."""


class AccessError(ExecutionError):
    """A scratchpad index or DRAM address outside the mapped range."""


class HazardError(ExecutionError):
    """Two stages touched the same scratchpad rows at overlapping times (a missing token)."""


class DeadlockError(DeviceError):
    """No stage can make progress; `stages` maps each stage to its blocked instruction."""

    def __init__(self, message: str, stages: dict | None = None, tokens: dict | None = None):
        super().__init__(message)
        self.stages = stages or {}
        self.tokens = tokens or {}

    def __reduce__(self):
        return type(self), (str(self), self.stages, self.tokens)


class VerifyError(ProgramError):
    """The static verifier found a program that would race, deadlock or go out of range.

    `rule` names the broken rule (token-balance, deadlock, raw, war, waw, range, dram),
    `index` the instruction, `insn` its disassembly.
    """

    def __init__(self, rule: str, message: str, index: int | None = None, insn: str | None = None):
        where = f"instruction {index}" if index is not None else "program"
        text = f"{rule}: {where}: {message}" + (f"\n    {insn}" if insn else "")
        super().__init__(text)
        self.rule = rule
        self.message = message
        self.index = index
        self.insn = insn

    def __reduce__(self):
        return type(self), (self.rule, self.message, self.index, self.insn)


class ModelError(TilecraftError, ValueError):
    """A network (an ONNX file, a compiled model) cannot be read or compiled: malformed, an
    opset too old, a dynamic dimension without a given shape, calibration data that does not
    fit, over the DRAM budget."""


class UnsupportedOperatorError(ModelError):
    """Operators nothing can run, all of them at once: `nodes` lists (op type, node name,
    whether the CPU fallback could take it)."""

    def __init__(self, message: str, nodes: list[tuple[str, str, bool]]):
        super().__init__(message)
        self.nodes = nodes

    def __reduce__(self):
        return type(self), (str(self), self.nodes)


class ModelWarning(UserWarning):
    """A network compiles, but not exactly as it states: e.g. a quantized model rounds where
    tilecraft's passes fuse (a BatchNormalization after a conv whose output it rounds)."""


class KernelError(TilecraftError, ValueError):
    """A host kernel cannot be built or loaded: an unsupported dtype or shape, an unknown
    target, or a shared object built for another target than the one loading it."""
