"""A thin layer over llvmlite's IR builder for writing kernels: the calling convention (one
argument, an array of buffer pointers in the signature's order), counted loops with constant
bounds, scalars and vectors of the kernels' types, and the intrinsics they use.

Kernels keep loop-carried values (accumulators, register tiles) in `alloca`s; LLVM's SROA
turns them into registers. Shapes are constants, so LLVM sees every trip count; a kernel
whose code serves a family of shapes reads them from an input instead (`Dims`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from llvmlite import ir

from tilecraft.compiler.llvm.targets import Target

F32 = ir.FloatType()
F64 = ir.DoubleType()
I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()
VOID = ir.VoidType()
DTYPES = {"int8": I8, "uint8": I8, "int16": I16, "int32": I32, "int64": I64, "float32": F32}


def vec(t: ir.Type, n: int) -> ir.VectorType:
    return ir.VectorType(t, n)


class Kernel:
    """One kernel function in `module`; `self.arg[name]` is the pointer to each buffer.

    On a CPU the function is `void name(ptr *args)`, the buffers' pointers loaded from the
    argument array in `buffers` order. On a GPU (NVPTX) it is a `ptx_kernel` taking one global
    pointer per buffer, and `parallel` loops are spread over threads."""

    def __init__(self, module: ir.Module, target: Target, name: str, buffers: list[str]):
        self.module, self.target = module, target
        self.idx = ir.IntType(8 * target.pointer_bytes)  # index arithmetic in pointer width
        self.gpu = target.name == "nvptx"
        self.arg = {}
        if self.gpu:
            global_ptr = ir.PointerType(addrspace=1)
            self.fn = ir.Function(module, ir.FunctionType(VOID, [global_ptr] * len(buffers)), name)
            self.fn.calling_convention = "ptx_kernel"
            for arg, buf in zip(self.fn.args, buffers):
                arg.name = buf
                arg.add_attribute("noalias")
                self.arg[buf] = arg
            self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
            self._entry = self.b.block
            return
        self.fn = ir.Function(module, ir.FunctionType(VOID, [PTR]), name)
        self.fn.args[0].name = "args"
        self.fn.args[0].add_attribute("noalias")
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self._entry = self.b.block
        for i, buf in enumerate(buffers):
            slot = self.b.gep(self.fn.args[0], [self.i(i)], source_etype=PTR)
            self.arg[buf] = self.b.load(slot, name=buf, typ=PTR)

    # ---- constants and memory --------------------------------------------------------------
    def i(self, value: int) -> ir.Constant:
        """An index constant."""
        return ir.Constant(self.idx, int(value))

    def const(self, t: ir.Type, value) -> ir.Constant:
        return ir.Constant(t, value)

    def splat(self, value: ir.Value, n: int) -> ir.Value:
        """A vector of `n` copies of the scalar `value`."""
        b = self.b
        undef = ir.Constant(vec(value.type, n), ir.Undefined)
        one = b.insert_element(undef, value, ir.Constant(I32, 0))
        return b.shuffle_vector(one, undef, ir.Constant(vec(I32, n), [0] * n))

    def at(self, base: ir.Value, t: ir.Type, index: ir.Value | int) -> ir.Value:
        """The address of element `index` of a `t` array at `base`."""
        index = self.i(index) if isinstance(index, int) else index
        return self.b.gep(base, [index], source_etype=t, inbounds=True)

    def load(self, base, t: ir.Type, index, align: int | None = None) -> ir.Value:
        """Element `index` of the `t` array at `base` (a vector type loads whole lanes at
        `index` counted in scalars)."""
        scalar = t.element if isinstance(t, ir.VectorType) else t
        return self.b.load(self.at(base, scalar, index), typ=t, align=align or _size(scalar))

    def store(self, value: ir.Value, base, index) -> None:
        t = value.type
        scalar = t.element if isinstance(t, ir.VectorType) else t
        self.b.store(value, self.at(base, scalar, index), align=_size(scalar))

    def fill(self, base, count: ir.Value, value: int, lanes: int) -> None:
        """`count` bytes at `base` set to the byte `value`, `lanes` at a time, then the rest
        one at a time: vectorised by hand, for a kernel compiled without LLVM's loop passes."""
        b = self.b
        chunks = b.udiv(count, self.i(lanes))
        with self.loop(chunks, name="fillv") as i:
            self.store(ir.Constant(vec(I8, lanes), [value] * lanes), base, b.mul(i, self.i(lanes)))
        with self.loop(count, start=b.mul(chunks, self.i(lanes)), name="fill") as i:
            self.store(ir.Constant(I8, value), base, i)

    def copy(self, dst, dst_at, src, src_at, count: ir.Value) -> None:
        """`count` bytes from `src` + `src_at` to `dst` + `dst_at` (not overlapping), 16 at a
        time, the rest as one more 16 ending at the last byte (the bytes it copies again are
        the same); fewer than 16 as two 8s or two 4s that overlap, or a byte at a time."""
        b = self.b

        def move(width: int, at) -> None:
            v = self.load(src, vec(I8, width), b.add(src_at, at))
            self.store(v, dst, b.add(dst_at, at))

        chunks = b.udiv(count, self.i(16))
        with self.loop(chunks, name="copyv") as i:
            move(16, b.mul(i, self.i(16)))
        with b.if_else(b.icmp_signed(">=", count, self.i(16))) as (wide, narrow):
            with wide, b.if_then(b.icmp_signed("!=", b.urem(count, self.i(16)), self.i(0))):
                move(16, b.sub(count, self.i(16)))
            with narrow, b.if_else(b.icmp_signed(">=", count, self.i(8))) as (eight, less):
                with eight:
                    move(8, self.i(0))
                    move(8, b.sub(count, self.i(8)))
                with less, b.if_else(b.icmp_signed(">=", count, self.i(4))) as (four, few):
                    with four:
                        move(4, self.i(0))
                        move(4, b.sub(count, self.i(4)))
                    with few, self.loop(count, name="copy") as i:
                        move(1, i)

    def transpose16(self, rows: list[ir.Value]) -> list[ir.Value]:
        """The 16 x 16 byte matrix whose rows are `rows` (16 vectors of 16 x i8), transposed:
        four rounds of interleaving row i with row i + 8 (a perfect shuffle; x86's
        punpck{l,h}bw, NEON's vzip), each round's pairs from the round before."""
        b = self.b
        low = ir.Constant(vec(I32, 16), [i // 2 + 16 * (i % 2) for i in range(16)])
        high = ir.Constant(vec(I32, 16), [8 + i // 2 + 16 * (i % 2) for i in range(16)])
        for _ in range(4):
            rows = [
                b.shuffle_vector(rows[i], rows[i + 8], mask)
                for i in range(8)
                for mask in (low, high)
            ]
        return rows

    def local(self, t: ir.Type, count: int = 1, name: str = "") -> ir.Value:
        """Stack space in the entry block (so SROA can promote it to registers)."""
        with self.b.goto_block(self._entry):
            self.b.position_at_start(self._entry)
            return self.b.alloca(t, size=count if count > 1 else None, name=name)

    # ---- control flow ----------------------------------------------------------------------
    @contextmanager
    def loop(
        self, stop: int | ir.Value, start: int | ir.Value = 0, step: int = 1, name: str = "i"
    ) -> Iterator:
        """`for i in range(start, stop, step)`, the body written inside the `with`; yields
        the index (pointer-width integer). `start` and `stop` are constants or index values."""
        b = self.b
        start = self.i(start) if isinstance(start, int) else start
        stop = self.i(stop) if isinstance(stop, int) else stop
        pre = b.block
        head = self.fn.append_basic_block(f"{name}.head")
        body = self.fn.append_basic_block(f"{name}.body")
        done = self.fn.append_basic_block(f"{name}.done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(self.idx, name=name)
        i.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", i, stop), body, done)
        b.position_at_end(body)
        yield i
        i.add_incoming(b.add(i, self.i(step)), b.block)
        b.branch(head)
        b.position_at_end(done)

    @contextmanager
    def parallel(self, count: int, name: str = "i") -> Iterator:
        """`for i in range(count)` whose iterations are independent: a loop on a CPU, one
        GPU thread per iteration (blockIdx.x * blockDim.x + threadIdx.x, guarded)."""
        if not self.gpu:
            with self.loop(count, name=name) as i:
                yield i
            return
        b = self.b
        sreg = {}
        for reg in ("ctaid.x", "ntid.x", "tid.x"):
            full = f"llvm.nvvm.read.ptx.sreg.{reg.replace('.x', '')}.x"
            fn = self.module.globals.get(full) or ir.Function(
                self.module, ir.FunctionType(I32, []), full
            )
            sreg[reg] = b.zext(b.call(fn, []), self.idx)
        i = b.add(b.mul(sreg["ctaid.x"], sreg["ntid.x"]), sreg["tid.x"], name=name)
        with b.if_then(b.icmp_unsigned("<", i, self.i(count))):
            yield i

    def finish(self) -> None:
        self.b.ret_void()

    # ---- arithmetic ------------------------------------------------------------------------
    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        """Call `llvm.<name>.<type suffix>` (declared on first use; by hand, since llvmlite
        cannot declare vector intrinsics)."""
        full = f"llvm.{name}.{_suffix(ret if name not in ('fptosi.sat',) else args[0].type)}"
        if name == "fptosi.sat":
            full = f"llvm.fptosi.sat.{_suffix(ret)}.{_suffix(args[0].type)}"
        fn = self.module.globals.get(full)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, [a.type for a in args]), full)
        return self.b.call(fn, args)

    def smin(self, a, c):
        return self.intrinsic("smin", a.type, [a, c])

    def smax(self, a, c):
        return self.intrinsic("smax", a.type, [a, c])

    def clamp(self, a, lo, hi):
        return self.smin(self.smax(a, lo), hi)

    def fmuladd(self, a, c, d):
        """a * c + d as a multiply and an add that may contract: a fused multiply-add where
        the target has one (AVX2, AArch64), NEON's multiply-accumulate on the Cortex-A9
        (`llvm.fmuladd` became a separate multiply and add there, and `llvm.fma` a libcall)."""
        contract = ("contract",)
        return self.b.fadd(self.b.fmul(a, c, flags=contract), d, flags=contract)

    def fma32(self, x, y, z):
        """x * y + z for float32 scalars rounded once, as an FMA instruction (or onnxruntime's
        x86 QLinearAdd) rounds it, on any target: the instruction where the target has one
        (`Target.fused_multiply_add`); elsewhere (the Cortex-A9) the double product of two
        float32, which is exact, and the double sum's error (TwoSum) deciding a round-to-odd
        of it, a double that rounds to float32 correctly (53 >= 24 + 2 bits). No libcall
        (`fma32` in ops.requant is the same in numpy). The instruction took an int8 add of
        200,704 elements from 0.28 ms to 0.05 ms on x86-64 (AVX-512)."""
        if self.target.fused_multiply_add:
            return self.intrinsic("fma", x.type, [x, y, z])
        b = self.b
        p = b.fmul(b.fpext(x, F64), b.fpext(y, F64))
        zd = b.fpext(z, F64)
        s = b.fadd(p, zd)
        zz = b.fsub(s, p)
        err = b.fadd(b.fsub(p, b.fsub(s, zz)), b.fsub(zd, zz))
        bits = b.bitcast(s, I64)
        even = b.icmp_unsigned("==", b.and_(bits, ir.Constant(I64, 1)), ir.Constant(I64, 0))
        inexact = b.fcmp_unordered("!=", err, ir.Constant(F64, 0.0))
        zero = ir.Constant(F64, 0.0)
        away = b.icmp_unsigned(  # the exact value lies beyond s, away from zero
            "==", b.fcmp_ordered(">", err, zero), b.fcmp_ordered(">", s, zero)
        )
        step = b.select(away, ir.Constant(I64, 1), ir.Constant(I64, -1))
        odd = b.select(b.and_(inexact, even), b.add(bits, step), bits)
        return b.fptrunc(b.bitcast(odd, F64), F32)

    def roundeven(self, a):
        """Round half to even, without a libcall on any target (the Cortex-A9 has no
        rounding instruction): adding and subtracting 1.5 * 2**23 rounds in the FPU's
        default mode. Exact for |a| < 2**22; larger values come back as they are (within
        one half; every kernel that rounds saturates to int8 afterwards)."""
        b = self.b
        magic, limit = self.fconst(a.type, 12582912.0), self.fconst(a.type, 4194304.0)
        rounded = b.fsub(b.fadd(a, magic), magic)
        small = b.fcmp_ordered("<", self.intrinsic("fabs", a.type, [a]), limit)
        return b.select(small, rounded, a)

    def fmax(self, a, c):
        """max(a, c) by compare and select (`llvm.maxnum` is a libcall on ARMv7)."""
        return self.b.select(self.b.fcmp_ordered(">", a, c), a, c)

    def fmin(self, a, c):
        return self.b.select(self.b.fcmp_ordered("<", a, c), a, c)

    def fconst(self, t: ir.Type, value: float) -> ir.Constant:
        """A float constant of type `t`, splatted when `t` is a vector type."""
        if isinstance(t, ir.VectorType):
            return ir.Constant(t, [float(value)] * t.count)
        return ir.Constant(t, float(value))


def _size(t: ir.Type) -> int:
    return {F32: 4, F64: 8, I8: 1, I16: 2, I32: 4, I64: 8}.get(t, 8)


def _suffix(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_suffix(t.element)}"
    if t == F32:
        return "f32"
    if t == F64:
        return "f64"
    return f"i{t.width}"


class Dims:
    """The integers a kernel's code is written with (a shape's sizes and what follows from
    them), by name: constants in a kernel made for one shape; with `shared`, loaded from its
    `dims` input (int64, in `values`' order) as the kernel starts, so that one compiled
    kernel serves every shape of a family (the caller passes each shape's `values`)."""

    def __init__(self, k: Kernel, values: dict[str, int], shared: bool = False):
        self.values, self.shared = values, shared
        if shared:
            loaded = [k.load(k.arg["dims"], I64, i) for i in range(len(values))]
            self._held = {
                name: v if k.idx == I64 else k.b.trunc(v, k.idx) for name, v in zip(values, loaded)
            }
        else:
            self._held = {name: k.i(v) for name, v in values.items()}

    def __getitem__(self, name: str) -> ir.Value:
        return self._held[name]

    def none(self, name: str) -> bool:
        """Whether `name` is known to be 0 (a constant), so the code it counts is left out; a
        shared kernel keeps that code, its loops running no times."""
        return not self.shared and self.values[name] == 0
