"""tilecraft: hardware-software co-design for VTA-style FPGA deep-learning accelerators.

Subpackages: `tilecraft.hw` (config, ISA, RTL), `tilecraft.sim` (behavioral simulator),
`tilecraft.compiler`, `tilecraft.runtime`, `tilecraft.boards`.
"""

from tilecraft.errors import (
    AccessError,
    ArtifactError,
    ConfigError,
    DeadlockError,
    DeviceError,
    EncodingError,
    ExecutionError,
    FormatError,
    HazardError,
    IllegalInstructionError,
    ProgramError,
    ScheduleError,
    TilecraftError,
)

__version__ = "0.1.0"

__all__ = [
    "AccessError",
    "ArtifactError",
    "ConfigError",
    "DeadlockError",
    "DeviceError",
    "EncodingError",
    "ExecutionError",
    "FormatError",
    "HazardError",
    "IllegalInstructionError",
    "ProgramError",
    "ScheduleError",
    "TilecraftError",
    "__version__",
]
