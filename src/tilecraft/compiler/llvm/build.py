"""IR -> machine code for a target: the kernels' module, LLVM's O3 pipeline (loop and SLP
vectorisation on), then an object file (position-independent) or assembly (PTX)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from llvmlite import ir

from tilecraft.compiler.llvm.irgen import Kernel
from tilecraft.compiler.llvm.spec import Spec
from tilecraft.compiler.llvm.targets import Target, llvm, machine
from tilecraft.errors import KernelError


def module_ir(specs: Sequence[Spec], target: Target) -> str:
    """The LLVM IR text of `specs`' kernels for `target`, one function each."""
    mod = ir.Module(name="tilecraft_kernels")
    mod.triple = target.triple
    mod.data_layout = str(machine(target).target_data)
    seen = set()
    for spec in specs:
        if spec.symbol in seen:
            continue
        seen.add(spec.symbol)
        if target.name == "nvptx" and not spec.gpu:
            raise KernelError(
                f"no GPU kernel for {spec.kind} (its loops share scratch space); "
                f"the direct kernels (kernels.direct) run on GPUs"
            )
        k = Kernel(mod, target, spec.symbol, [b.name for b in spec.buffers()])
        spec.emit(k)
        k.finish()
    return _no_builtins(str(mod))


def _no_builtins(text: str) -> str:
    """Mark every kernel `nounwind` and "no-builtins": LLVM must not turn a loop into a call
    to memset/memcpy, which a libc-free shared object does not have (llvmlite cannot state
    string attributes, so they are added to the text)."""
    text = re.sub(r'^(define void @"tc_[^"]*"\(ptr noalias %"args"\))', r"\1 #0", text, flags=re.M)
    return text + '\nattributes #0 = { nounwind "no-builtins" }\n'


def optimized(text: str, target: Target):
    """The parsed, verified and O3-optimised module."""
    b = llvm()
    mod = b.parse_assembly(text)
    mod.verify()
    tm = machine(target)
    options = b.create_pipeline_tuning_options(speed_level=3)
    options.loop_vectorization = True
    options.slp_vectorization = True
    builder = b.create_pass_builder(tm, options)
    builder.getModulePassManager().run(mod, builder)
    return mod


def object_code(specs: Sequence[Spec], target: Target) -> bytes:
    """A relocatable, position-independent object file holding `specs`' kernels."""
    return machine(target).emit_object(optimized(module_ir(specs, target), target))


def assembly(specs: Sequence[Spec], target: Target) -> str:
    """The target's assembly of `specs`' kernels (for reading, and for PTX)."""
    return machine(target).emit_assembly(optimized(module_ir(specs, target), target))
