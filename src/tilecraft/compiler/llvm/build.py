"""IR -> machine code for a target: the kernels' module, LLVM's O2 pipeline (loop and SLP
vectorisation on), then an object file (position-independent) or assembly (PTX)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

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


def optimized(text: str, target: Target, loop_passes: bool = True):
    """The parsed, verified and O2-optimised module (O3 compiled a conv kernel a fifth slower
    for no speed the kernels' hand-written vectors and tiles could measure: the JIT's first
    run is its compile time); without `loop_passes`, no loop vectorisation or unrolling
    (`Spec.loop_passes`)."""
    b = llvm()
    mod = b.parse_assembly(text)
    mod.verify()
    tm = machine(target)
    options = b.create_pipeline_tuning_options(speed_level=2)
    options.loop_vectorization = loop_passes
    options.loop_unrolling = loop_passes
    options.slp_vectorization = True
    builder = b.create_pass_builder(tm, options)
    builder.getModulePassManager().run(mod, builder)
    return mod


def object_code(specs: Sequence[Spec], target: Target) -> bytes:
    """A relocatable, position-independent object file holding `specs`' kernels."""
    module = optimized(module_ir(specs, target), target, _loop_passes(specs))
    with _scheduling(target):
        return machine(target).emit_object(module)


def assembly(specs: Sequence[Spec], target: Target) -> str:
    """The target's assembly of `specs`' kernels (for reading, and for PTX)."""
    module = optimized(module_ir(specs, target), target, _loop_passes(specs))
    with _scheduling(target):
        return machine(target).emit_assembly(module)


def _loop_passes(specs: Sequence[Spec]) -> bool:
    """Whether a module of `specs` gets LLVM's loop passes: unless none of them wants them."""
    return any(s.loop_passes for s in specs)


_SCHEDULER = threading.Lock()  # LLVM's options are the process's: one emission at a time


@contextmanager
def _scheduling(target: Target) -> Iterator[None]:
    """Emit with the target's instruction scheduling (`Target.source_order`: the IR's order
    before register allocation), the process's default restored after."""
    if not target.source_order:
        yield
        return
    b = llvm()
    with _SCHEDULER:
        b.set_option("tilecraft", "-pre-RA-sched=source")
        try:
            yield
        finally:
            b.set_option("tilecraft", "-pre-RA-sched=default")
