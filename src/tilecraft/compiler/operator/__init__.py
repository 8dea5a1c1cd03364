"""The operator pipeline, one way: a conv2d or dense layer -> channel blocks (`mapping`) ->
micro-op tensorization (`tensorize`) -> the legal schedule space (`schedule`) ranked by the
analytic estimate (`heuristic`, `tile_work`) -> parameters checked (`params`) -> instructions
(`lowering`, with the epilogue's ALU passes of `epilogue` and reusable micro-op `kernels`) ->
tokens and verification (`analysis`) -> assembly (`builder`) -> a Program (`pipeline`; the
public entry points in `conv2d`). Each module imports only the steps before it."""
