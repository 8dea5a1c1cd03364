"""Program artifacts and the Device API. Needs only numpy (and pynq on a board)."""

from tilecraft.runtime.buffers import BufferSpec, Role
from tilecraft.runtime.device import (
    Device,
    RunResult,
    check_inputs,
    check_program,
    device_names,
    get_device,
    register_device,
)
from tilecraft.runtime.program import Program

__all__ = [
    "BufferSpec",
    "Device",
    "Program",
    "Role",
    "RunResult",
    "register_device",
    "check_inputs",
    "check_program",
    "device_names",
    "get_device",
]
