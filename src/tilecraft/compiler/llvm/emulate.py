"""Running a board's kernels here: the `unicorn` CPU emulator (from PyPI) loads a libc-free
shared object from `library.build_library` (its loadable segments, its relative
relocations), calls one kernel as the board would (a pointer to the argument array in r0/x0,
return to a stop address) and reads the outputs back. It also counts the instructions
executed, since ARM time cannot be measured here (every ARM and AArch64 instruction is 4
bytes, the kernels are compiled for the ARM state, never Thumb).

The emulated CPU is a Cortex-A9 (VFPv3 + NEON) or a Cortex-A53, with the FPU enabled as a
board's kernel enables it. The outputs are compared with the reference by the tests; timing
under emulation means nothing."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from tilecraft.errors import KernelError
from tilecraft.runtime.cpu import elf_target
from tilecraft.runtime.kernels import BufferSig

BASE, STACK, HEAP = 0x0010_0000, 0x0800_0000, 0x1000_0000
STACK_BYTES = 1 << 20
STOP = 0x0F00_0000  # the return address: execution ends when the kernel returns here
RELATIVE = {"armv7": 23, "aarch64": 1027}  # R_ARM_RELATIVE, R_AARCH64_RELATIVE
PAGE = 0x1000


def available() -> str | None:
    """None if the emulator can run here, else why not."""
    try:
        import elftools  # noqa: F401
        import unicorn  # noqa: F401
    except ImportError as exc:
        return f"the ARM emulator needs unicorn and pyelftools ({exc.name} is missing)"
    return None


@dataclass
class Run:
    outputs: list[np.ndarray]
    instructions: int


class Emulator:
    """One shared object, loaded into a fresh emulated address space."""

    def __init__(self, data: bytes):
        why = available()
        if why:
            raise KernelError(why)
        from elftools.elf.elffile import ELFFile
        from elftools.elf.relocation import RelocationSection
        from elftools.elf.sections import SymbolTableSection

        self.target = elf_target(data)
        if self.target not in RELATIVE:
            raise KernelError(f"the emulator runs ARM code, not {self.target}")
        elf = ELFFile(io.BytesIO(data))
        self.uc = self._cpu()
        top = 0
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD":
                top = max(top, seg["p_vaddr"] + seg["p_memsz"])
        self.uc.mem_map(BASE, _pages(top))
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD":
                self.uc.mem_write(BASE + seg["p_vaddr"], seg.data())
        self.symbols = {}
        for section in elf.iter_sections():
            if isinstance(section, RelocationSection):
                self._relocate(section)
            if isinstance(section, SymbolTableSection) and section.name == ".dynsym":
                for sym in section.iter_symbols():
                    if sym.name and sym["st_shndx"] == "SHN_UNDEF":
                        raise KernelError(
                            f"the shared object needs symbol {sym.name!r}, which "
                            f"a libc-free kernel library must not"
                        )
                    if sym.name and sym["st_info"]["type"] == "STT_FUNC":
                        self.symbols[sym.name] = BASE + sym["st_value"]
        self.uc.mem_map(STACK, STACK_BYTES)
        self.uc.mem_map(STOP, PAGE)
        self._heap = 0

    def _cpu(self):
        import unicorn
        from unicorn import arm64_const, arm_const

        if self.target == "armv7":
            uc = unicorn.Uc(unicorn.UC_ARCH_ARM, unicorn.UC_MODE_ARM)
            uc.ctl_set_cpu_model(arm_const.UC_CPU_ARM_CORTEX_A9)
            cpacr = uc.reg_read(arm_const.UC_ARM_REG_C1_C0_2)
            uc.reg_write(arm_const.UC_ARM_REG_C1_C0_2, cpacr | (0xF << 20))  # cp10, cp11
            uc.reg_write(arm_const.UC_ARM_REG_FPEXC, 0x4000_0000)  # FPU on
        else:
            uc = unicorn.Uc(unicorn.UC_ARCH_ARM64, unicorn.UC_MODE_ARM)
            uc.ctl_set_cpu_model(arm64_const.UC_CPU_ARM64_A53)
            uc.reg_write(arm64_const.UC_ARM64_REG_CPACR_EL1, 3 << 20)  # FP/SIMD on
        return uc

    def _relocate(self, section) -> None:
        width = 4 if self.target == "armv7" else 8
        for rel in section.iter_relocations():
            if rel["r_info_type"] != RELATIVE[self.target]:
                raise KernelError(
                    f"relocation type {rel['r_info_type']} in {section.name} is "
                    f"not supported by the emulator's loader"
                )
            at = BASE + rel["r_offset"]
            addend = (
                rel["r_addend"]
                if rel.is_RELA()
                else int.from_bytes(self.uc.mem_read(at, width), "little")
            )
            self.uc.mem_write(at, (BASE + addend).to_bytes(width, "little"))

    def _alloc(self, nbytes: int) -> int:
        at = HEAP + self._heap
        self._heap += -(-max(nbytes, 1) // 64) * 64
        return at

    def call(self, signature: dict, inputs: list[np.ndarray], limit: int = 500_000_000) -> Run:
        """Run kernel `signature` on `inputs`; its outputs and the instructions executed.
        `limit` bounds the instructions (a runaway kernel is an error, not a hang)."""
        from unicorn import UC_HOOK_BLOCK, arm64_const, arm_const

        buffers = [BufferSig.from_dict(b) for b in signature["buffers"]]
        given = iter(inputs)
        arrays = [
            np.ascontiguousarray(next(given), b.dtype)
            if b.role == "in"
            else np.zeros(b.shape, b.dtype)
            for b in buffers
        ]
        total = sum(-(-max(a.nbytes, 1) // 64) * 64 for a in arrays) + 64 * (len(arrays) + 1)
        self._heap = 0
        self.uc.mem_map(HEAP, _pages(total))
        try:
            width = 4 if self.target == "armv7" else 8
            table = self._alloc(width * len(arrays))
            where = []
            for a in arrays:
                at = self._alloc(a.nbytes)
                self.uc.mem_write(at, a.tobytes())
                where.append(at)
            self.uc.mem_write(table, b"".join(w.to_bytes(width, "little") for w in where))
            count = [0]

            def block(uc, address, size, user):
                count[0] += size // 4

            hook = self.uc.hook_add(UC_HOOK_BLOCK, block)
            if self.target == "armv7":
                regs = (arm_const.UC_ARM_REG_R0, arm_const.UC_ARM_REG_SP, arm_const.UC_ARM_REG_LR)
            else:
                regs = (
                    arm64_const.UC_ARM64_REG_X0,
                    arm64_const.UC_ARM64_REG_SP,
                    arm64_const.UC_ARM64_REG_LR,
                )
            for reg, value in zip(regs, (table, STACK + STACK_BYTES - 64, STOP)):
                self.uc.reg_write(reg, value)
            entry = self.symbols.get(signature["symbol"])
            if entry is None:
                raise KernelError(f"no kernel {signature['symbol']!r} in the shared object")
            self.uc.emu_start(entry, STOP, count=limit)
            self.uc.hook_del(hook)
            if self.uc.reg_read(_pc(self.target)) != STOP:
                raise KernelError(f"kernel {signature['symbol']} ran past {limit:,} instructions")
            outputs = []
            for b, a, at in zip(buffers, arrays, where):
                if b.role == "out":
                    raw = self.uc.mem_read(at, a.nbytes)
                    outputs.append(np.frombuffer(bytes(raw), b.dtype).reshape(b.shape))
            return Run(outputs, count[0])
        finally:
            self.uc.mem_unmap(HEAP, _pages(total))


def _pc(target: str) -> int:
    from unicorn import arm64_const, arm_const

    return arm_const.UC_ARM_REG_PC if target == "armv7" else arm64_const.UC_ARM64_REG_PC


def _pages(nbytes: int) -> int:
    return max(PAGE, -(-nbytes // PAGE) * PAGE)
