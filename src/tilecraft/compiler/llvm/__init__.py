"""Host kernels generated with llvmlite: what the accelerator does not run (fallback operators,
quantization, layout packing) as LLVM IR built once per shape, compiled for x86-64 (JIT, cached
on disk), the boards' ARM cores (shared objects built ahead of time) and NVPTX."""
