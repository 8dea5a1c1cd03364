"""A readable disassembler: one line per instruction, one per micro-op."""

from __future__ import annotations

import numpy as np

from tilecraft.hw.isa.enums import AluOp, MemId, Opcode
from tilecraft.hw.isa.insns import FLAG_NAMES


def format_row(row) -> str:
    """One instruction-table row as text, e.g. `GEMM uop[0:9) loop 14x16 ... | pop_prev`."""
    get = row.__getitem__
    op = int(get("opcode"))
    flags = [name for name in FLAG_NAMES if get(name)]
    tail = f"  | {' '.join(flags)}" if flags else ""
    if op in (Opcode.LOAD, Opcode.STORE):
        mem = _name(MemId, get("mem"))
        to = "inp" if op == Opcode.STORE and get("to_inp") else "dram"  # `to_inp`: an INP row
        text = (
            f"{Opcode(op).name:6s} {mem:3s} sram={get('sram_base')} {to}={get('dram_base')} "
            f"y={get('y_size')} x={get('x_size')} stride={get('x_stride')}"
        )
        pads = [int(get(k)) for k in ("y_pad0", "y_pad1", "x_pad0", "x_pad1")]
        if any(pads):
            text += " pad(y0,y1,x0,x1)=({},{},{},{})".format(*pads)
            if op == Opcode.LOAD and int(get("pad_value")):
                text += f" value {int(get('pad_value'))}"
        if op == Opcode.LOAD and get("x_size") == 0:
            text += " (sync only)"
        if op == Opcode.STORE and get("requant"):
            text += f" requant params={get('param_base')}"
            text += " per row" if get("param_per_row") else ""
            text += f" residual inp={get('residual_base')}" if get("residual") else ""
        return text + tail
    if op in (Opcode.GEMM, Opcode.ALU):
        loop = (
            f"uop[{get('uop_bgn')}:{get('uop_end')}) loop {get('iter_out')}x{get('iter_in')} "
            f"dst({get('dst_out')},{get('dst_in')}) src({get('src_out')},{get('src_in')})"
        )
        if op == Opcode.GEMM:
            head = "GEMM   " + ("reset " if get("reset") else "")
            return head + loop + f" wgt({get('wgt_out')},{get('wgt_in')})" + tail
        operand = f"imm={get('imm')}" if get("use_imm") else "tensor"
        return f"ALU    {_name(AluOp, get('alu_op'))} {operand} " + loop + tail
    if op == Opcode.DEPTHWISE:
        return (
            f"DEPTHWISE acc={get('acc_base')} inp={get('inp_base')} wgt={get('wgt_base')} "
            f"plane={get('in_rows')}x{get('in_cols')} stride=({get('stride_y')},"
            f"{get('stride_x')})" + tail
        )
    if op == Opcode.FINISH:
        return "FINISH" + tail
    return f"<unknown opcode {op}>" + tail


def disassemble(table: np.ndarray, start: int = 0) -> list[str]:
    """Numbered lines for a decoded instruction table."""
    width = len(str(start + max(len(table) - 1, 0)))
    return [f"{start + i:{width}d}: {format_row(row)}" for i, row in enumerate(table)]


def format_uops(uops: np.ndarray, start: int = 0) -> list[str]:
    width = len(str(start + max(len(uops) - 1, 0)))
    return [
        f"uop {start + i:{width}d}: dst={u['dst']} src={u['src']} wgt={u['wgt']}"
        for i, u in enumerate(uops)
    ]


def _name(kind, value) -> str:
    try:
        return kind(int(value)).name
    except ValueError:
        return f"?{int(value)}"
