"""The accelerator's status registers as exceptions: what the `rtl` and `pynq` devices raise
when the hardware stops on an error (the simulator raises the same classes directly)."""

from __future__ import annotations

from tilecraft.errors import AccessError, DeviceError, IllegalInstructionError
from tilecraft.hw import regs

ERRORS = {
    regs.ErrorCode.ILLEGAL_OPCODE: IllegalInstructionError,
    regs.ErrorCode.ILLEGAL_MEMORY: IllegalInstructionError,
    regs.ErrorCode.ILLEGAL_FLAGS: IllegalInstructionError,
    regs.ErrorCode.REQUANT_PARAMS: IllegalInstructionError,
    regs.ErrorCode.SRAM_RANGE: AccessError,
    regs.ErrorCode.DRAM_RANGE: AccessError,
    regs.ErrorCode.UOP_RANGE: AccessError,
}


def raise_for_error(code: int, index: int, then: str = "") -> None:
    """Raise the exception of ERROR_CODE `code` at instruction `index` (STATUS said ERROR);
    `then`, a sentence on what the device did about it, closes the message."""
    then = f"; {then}" if then else ""
    try:
        name = regs.ErrorCode(code).name
    except ValueError:
        raise DeviceError(
            f"the accelerator stopped with an unknown error code {code}{then}"
        ) from None
    cls = ERRORS.get(regs.ErrorCode(code), DeviceError)
    message = f"the accelerator stopped with {name}{then}"
    if issubclass(cls, AccessError | IllegalInstructionError):
        raise cls(message, index=index)
    raise cls(message)
