"""Program artifacts and the Device API. Needs only numpy (and pynq on a board)."""

from tilecraft.runtime.device import (
    Device,
    RunResult,
    SimDevice,
    check_inputs,
    check_program,
    device_names,
    get_device,
)
from tilecraft.runtime.program import BufferSpec, Program

__all__ = [
    "BufferSpec",
    "Device",
    "Program",
    "RunResult",
    "SimDevice",
    "check_inputs",
    "check_program",
    "device_names",
    "get_device",
]
