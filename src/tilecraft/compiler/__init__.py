"""The compiler, in rooms that follow the compile flow.

A layer: `mapping` (how an operator lands on the array) <- `analysis` (what a program does:
footprints, tokens, the verifier) <- `operator` (the operator pipeline: schedule space,
heuristic, lowering, assembly; `operator.conv2d` is its public entry) <- `programs` (pooling,
the scaled add, the example GEMM, random test programs, written by hand on the same builder).

A network: `frontend` (ONNX in, the graph IR, named passes, a float evaluator) <- `partition`
(each node's place, the public entry of `tilecraft partition`) <- `quant` (calibration and
int8 quantization) <- `graph` (each layer through the operator pipeline, chained into one
program per accelerator run; `graph.network.compile_network` is the public entry).

Beside them: `tune` (the XGBoost tuner, driving the operator pipeline) and `llvm` (the host's
kernels, generated with llvmlite). Which room may import which is written as import-linter
contracts in pyproject.toml."""
