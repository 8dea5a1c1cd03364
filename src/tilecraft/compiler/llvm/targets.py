"""The targets a kernel is built for: triple, CPU, features, the vector width the kernels'
register tiles use, and the pointer size the calling convention passes."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from tilecraft.errors import KernelError


@dataclass(frozen=True)
class Target:
    name: str
    triple: str
    cpu: str
    features: str
    vector_width: int  # fp32 lanes of one SIMD register (AVX2 8, NEON 4)
    pointer_bytes: int
    registers: int = 16  # SIMD registers (register tiles are sized to them)
    tile_rows: int = 4  # output channels of a conv's register tile (two accumulators each)
    # int8 convs add two words' 16-bit products before widening them (dot_conv.DotConv2d's
    # `paired`), where the widening add is what bounds the tile: the A9 (0.43 -> 0.36
    # instructions per MAC); on the A53, whose sadalp keeps pace, the pairs' extra registers
    # cost more than they save (0.46 -> 0.48)
    paired_taps: bool = False
    # LLVM's instruction scheduler before register allocation keeps the IR's order: its
    # default for the Cortex-A9 (latency first) hoists a tile's loads past the 16 q
    # registers and spills them (an int8 3x3 conv's tap loop: 26 spill instructions, 0.49
    # instructions per MAC, against 0.43 in the source order)
    source_order: bool = False

    @property
    def is_host(self) -> bool:
        return self.name == "host"

    @property
    def fused_multiply_add(self) -> bool:
        """Whether float32 a * b + c rounded once is one instruction here (`llvm.fma`):
        x86-64-v3's FMA3, AArch64, PTX; not the Cortex-A9's VFPv3 (VFPv4 added it), where
        `llvm.fma` is a libm call a libc-free library cannot make."""
        if self.name == "host":
            return "+fma" in self.features.split(",") or self.triple.startswith("aarch64")
        return self.name in ("x86_64", "aarch64", "nvptx")


# The A9 spills a 6-row tile (NEON's multiply-accumulate needs temporaries); AVX2 holds 6
ARMV7 = Target(
    "armv7", "armv7a-unknown-linux-gnueabihf", "cortex-a9", "+neon,+vfp3", 4, 4, 16, 4, True, True
)
AARCH64 = Target("aarch64", "aarch64-unknown-linux-gnu", "cortex-a53", "+neon", 4, 8, 32, 8)
X86_64 = Target("x86_64", "x86_64-unknown-linux-gnu", "x86-64-v3", "", 8, 8, 16, 6)  # AVX2
NVPTX = Target("nvptx", "nvptx64-nvidia-cuda", "sm_80", "", 1, 8, 32, 1)  # CUDA >= 11 drivers
CROSS = {t.name: t for t in (ARMV7, AARCH64, X86_64, NVPTX)}
ZIG = {
    "armv7": ("arm-linux-gnueabihf", "cortex_a9"),  # the linker's names for each target
    "aarch64": ("aarch64-linux-gnu", "cortex_a53"),
    "x86_64": ("x86_64-linux-gnu", "x86_64_v3"),
}
BOARDS = {
    "pynq-z1": ARMV7,
    "pynq-z2": ARMV7,
    "ultra96-v2": AARCH64,
    "zcu104": AARCH64,
    "kv260": AARCH64,
}


def llvm():
    """llvmlite's binding, initialised once (a clear error if the `llvm` extra is missing)."""
    return _binding()


@cache
def _binding():
    try:
        import llvmlite.binding as binding
    except ImportError:
        raise KernelError("the host kernels need llvmlite: pip install 'tilecraft[llvm]'") from None
    binding.initialize_all_targets()
    binding.initialize_all_asmprinters()
    return binding


@cache
def host() -> Target:
    """This machine, with its own CPU name and features (AVX2 gives 8 fp32 lanes)."""
    b = llvm()
    features = b.get_host_cpu_features()
    wide = bool(features.get("avx512f"))
    width = 16 if wide else 8 if features.get("avx2") else 4
    return Target(
        "host",
        b.get_process_triple(),
        b.get_host_cpu_name(),
        features.flatten(),
        width,
        8,
        32 if wide else 16,
        8 if wide else 6,
    )


def target(name: str) -> Target:
    """A target by name: "host", "armv7", "aarch64", or a board ("pynq-z1", ...)."""
    if name == "host":
        return host()
    found = CROSS.get(name) or BOARDS.get(name)
    if found is None:
        valid = ", ".join(["host", *CROSS, *BOARDS])
        raise KernelError(f"unknown kernel target {name!r}; valid: {valid}")
    return found


def machine(t: Target):
    """The LLVM target machine for `t`: position-independent code, full optimisation."""
    b = llvm()
    return b.Target.from_triple(t.triple).create_target_machine(
        cpu=t.cpu, features=t.features, opt=3, reloc="pic", codemodel="default"
    )
