"""One JIT per test session, its kernel cache in a temp folder (never the user's)."""

import pytest

pytest.importorskip("llvmlite", reason="the host kernels need llvmlite (the llvm extra)")


@pytest.fixture(scope="session")
def jit(tmp_path_factory):
    from tilecraft.compiler.llvm.cache import KernelCache
    from tilecraft.compiler.llvm.jit import Jit

    return Jit(KernelCache(tmp_path_factory.mktemp("kernels")))
