"""x86-64 (this machine's CPU): kernels JIT-compiled through llvmlite's MCJIT, their objects
cached on disk (`cache.KernelCache`), each returned as a `runtime.kernels.NativeKernel`."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from tilecraft.compiler.llvm.build import object_code
from tilecraft.compiler.llvm.cache import KernelCache
from tilecraft.compiler.llvm.spec import Spec
from tilecraft.compiler.llvm.targets import Target, host, llvm, machine
from tilecraft.errors import KernelError
from tilecraft.runtime.kernels import NativeKernel


class Jit:
    """Compiles kernel records for this machine and keeps them loaded; `kernel(spec)` is
    memoised per record. A record whose code serves a family of shapes (`shared_code`: the
    dot-product convs) is compiled once per family and called with its own sizes. `cache`
    None uses the default folder; False turns it off."""

    def __init__(self, cache: KernelCache | None | bool = None, target: Target | None = None):
        b = llvm()
        b.initialize_native_target()
        b.initialize_native_asmprinter()
        self.target = target or host()  # another x86-64 level (AVX2 on an AVX-512 host)
        if self.target.triple.split("-")[0] != host().triple.split("-")[0]:
            raise KernelError(f"the JIT runs {host().triple} code here, not {self.target.triple}")
        self.cache = KernelCache() if cache is None else cache or None
        self._engine = b.create_mcjit_compiler(b.parse_assembly(""), machine(self.target))
        self._loaded: dict[str, NativeKernel] = {}
        self._addresses: dict[str, int] = {}  # loaded code, by the symbol it was built as
        self._sharing: set[str] = set()  # records that run their family's code (`_share`)
        self._built: dict[str, bytes] = {}  # compiled by `build`, not loaded yet (no cache)
        self.built = 0  # kernels compiled by this instance (not found in the cache)

    def build(self, specs, workers: int | None = None) -> None:
        """Compile every record of `specs` not yet loaded nor cached, in `workers` processes
        at once (the machine's cores by default; forked, where the system forks: llvmlite
        runs one LLVM call at a time in a process), so that a model's first run does not
        compile its kernels one after another."""
        specs = list(specs)
        self._share(specs)
        missing, seen = [], set()
        for spec in (self._code(s)[0] for s in specs):
            if spec.symbol in seen or spec.symbol in self._addresses or spec.symbol in self._built:
                continue
            seen.add(spec.symbol)
            if not (self.cache and self.cache.get(spec, self.target)):
                missing.append(spec)
        missing.sort(key=lambda s: -s.compile_cost)  # the longest first (stable otherwise)
        workers = min(len(missing), workers or os.cpu_count() or 1)
        if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("fork")  # the parent's llvmlite, no imports
            with ProcessPoolExecutor(workers, mp_context=context) as pool:
                objects = list(pool.map(_object_code, missing, [self.target] * len(missing)))
        else:
            objects = [object_code([s], self.target) for s in missing]
        for spec, obj in zip(missing, objects):
            self.built += 1
            if self.cache:
                self.cache.put(spec, self.target, obj)
            else:
                self._built[spec.symbol] = obj

    def kernel(self, spec: Spec) -> NativeKernel:
        found = self._loaded.get(spec.symbol)
        if found is not None:
            return found
        code, bound = self._code(spec)
        kernel = NativeKernel(spec.signature(), self._address(code), self._engine, bound)
        self._loaded[spec.symbol] = kernel
        return kernel

    def _share(self, specs: list[Spec]) -> None:
        """Mark the records of `specs` whose family (`shared_code`) has two or more of them
        to run the family's code: one compile serves them all. A family of one keeps code
        of its own, which compiles faster (its sizes are constants)."""
        families: dict[str, set[str]] = {}
        for spec in specs:
            shared = getattr(spec, "shared_code", None)
            made = shared(self.target) if shared else None
            if made is not None:
                families.setdefault(made[0].symbol, set()).add(spec.symbol)
        for members in families.values():
            if len(members) > 1:
                self._sharing |= members

    def _code(self, spec: Spec) -> tuple[Spec, tuple]:
        """The record to compile for `spec` and the arrays its calls add: its family's shared
        record and its sizes where `build` found the family shared (`_share`), else itself
        and none."""
        if spec.symbol not in self._sharing:
            return spec, ()
        code, dims = spec.shared_code(self.target)
        return code, (dims,)

    def _address(self, spec: Spec) -> int:
        """Where `spec`'s code lies, compiled (or found in the cache) and loaded once."""
        found = self._addresses.get(spec.symbol)
        if found is not None:
            return found
        obj = self._built.pop(spec.symbol, None)
        if obj is None and self.cache:
            obj = self.cache.get(spec, self.target)
        if obj is None:
            obj = object_code([spec], self.target)
            self.built += 1
            if self.cache:
                self.cache.put(spec, self.target, obj)
        b = llvm()
        self._engine.add_object_file(b.ObjectFileRef.from_data(obj))
        self._engine.finalize_object()
        address = self._addresses[spec.symbol] = self._engine.get_function_address(spec.symbol)
        return address


def _object_code(spec: Spec, target: Target) -> bytes:
    """One record's object code (a worker process's job in `Jit.build`)."""
    return object_code([spec], target)
