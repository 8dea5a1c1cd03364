"""The accelerator's epilogue (`ops.reference.epilogue`) as IR: int32 accumulators, scalar or
vector, to int8, every step wrapping at 32 bits exactly as the reference and the ALU do; a
FLOAT32 epilogue in float32 as onnxruntime computes it (the requantization unit's)."""

from __future__ import annotations

from llvmlite import ir

from tilecraft.compiler.llvm.irgen import F32, I8, I32, Kernel, vec
from tilecraft.compiler.llvm.spec import Buffer
from tilecraft.ops.operators import Epilogue, Multiplier


def vector_buffers(ep: Epilogue, channels: int, offset_input: bool = False) -> list[Buffer]:
    """The per-channel int32 vectors `ep` reads, in calling order (a per-tensor multiplier is
    one value); with `offset_input`, then the offset (one int32: `emit`'s)."""
    names = []
    if ep.acc_bounds:
        names += ["acc_lo", "acc_hi"]
    if ep.bias:
        names.append("bias")
    if ep.multiplier != Multiplier.NONE:
        names.append("multiplier")
    if ep.pre_shift:
        names.append("multiplier2")
    return [
        Buffer(
            n,
            (1 if n == "multiplier" and ep.multiplier == Multiplier.TENSOR else channels,),
            "float32" if n == "multiplier" and ep.on_unit else "int32",
        )
        for n in names
    ] + ([Buffer("offset", (1,), "int32")] if offset_input else [])


def emit(
    k: Kernel,
    ep: Epilogue,
    x: ir.Value,
    channel: ir.Value,
    residual: ir.Value | None = None,
    offset_input: bool = False,
) -> ir.Value:
    """int8 result(s) of `ep` on int32 `x` (a scalar or a vector) of output channel `channel`;
    `residual` is the int8 residual value(s) shaped like `x`; with `offset_input` the offset
    is the `offset` input's value (`ep`'s is 0), not a constant."""
    b = k.b
    lanes = x.type.count if isinstance(x.type, ir.VectorType) else None

    def const(v: int):
        c = ir.Constant(I32, v)
        return ir.Constant(vec(I32, lanes), [v] * lanes) if lanes else c

    def vector(name: str, index=None):
        v = k.load(k.arg[name], I32, channel if index is None else index)
        return k.splat(v, lanes) if lanes else v

    if ep.acc_bounds:
        x = k.clamp(x, vector("acc_lo"), vector("acc_hi"))
    if ep.bias:
        x = b.add(x, vector("bias"))
    if ep.on_unit:
        return _float32(k, ep, x, channel, lanes)
    if ep.multiplier == Multiplier.CHANNEL:
        x = b.mul(x, vector("multiplier"))
    elif ep.multiplier == Multiplier.TENSOR:
        x = b.mul(x, vector("multiplier", k.i(0)))
    if ep.pre_shift:
        x = b.mul(b.ashr(x, const(ep.pre_shift)), vector("multiplier2"))
    if ep.shift:
        x = b.ashr(b.add(x, const(1 << (ep.shift - 1))), const(ep.shift))
    if ep.residual:
        x = b.add(x, b.sext(residual, x.type))
    if offset_input:
        x = b.add(x, vector("offset", k.i(0)))
    elif ep.offset:
        x = b.add(x, const(ep.offset))
    if ep.final_clip:
        x = k.clamp(x, const(ep.low), const(ep.high))
    return b.trunc(x, vec(I8, lanes) if lanes else I8)


def _float32(k: Kernel, ep: Epilogue, x: ir.Value, channel: ir.Value, lanes: int | None):
    """onnxruntime's requantization (`ops.requant`): float32(x) times the channel's float32
    scale, clipped in float to the clip less the zero point, rounded to even (exact: the clip
    keeps it far below 2**22), plus the zero point. Every step rounds as IEEE 754's defaults
    do on each target, so the float32 values are onnxruntime's."""
    b = k.b
    ft = vec(F32, lanes) if lanes else F32
    scale = k.load(k.arg["multiplier"], F32, channel)
    f = b.fmul(b.sitofp(x, ft), k.splat(scale, lanes) if lanes else scale)
    f = k.fmin(k.fmax(f, k.fconst(ft, ep.low - ep.offset)), k.fconst(ft, ep.high - ep.offset))
    y = b.fptosi(k.roundeven(f), x.type)
    y = b.add(y, ir.Constant(x.type, [ep.offset] * lanes) if lanes else ir.Constant(I32, ep.offset))
    return b.trunc(y, vec(I8, lanes) if lanes else I8)
