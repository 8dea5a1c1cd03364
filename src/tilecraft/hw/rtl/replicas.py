"""Flip-flops copied so that each copy drives a share of a wide select: a flag that picks
between two 256-bit rows is one net to 256 LUTs, routed across the chip (the ALU's bypass flag,
3.9 ns of routing in the 91.0 MHz route; the GEMM's forwarding flags into its sum in the 93.3 MHz
one). yosys merges equal flip-flops (the same input, clock and reset) back into one, `keep` on
their wires or not, so the ECP5 flows (`ECP5_DSP`) instantiate each copy as a TRELLIS_FF cell,
which it leaves apart; simulation and the other flows get plain registers (one, after yosys).
"""

from __future__ import annotations

from amaranth import Cat, ClockSignal, Const, Instance, Module, Mux, Signal, Value

from tilecraft.hw.rtl.dsp import ECP5_DSP


def replicated(m: Module, d, copies: int, name: str, dsp: str | None = None) -> list[Signal]:
    """`copies` registers, each `d` a cycle later (no reset: a value worked out every cycle); a
    `d` of several bits takes a flip-flop a bit in each copy."""
    d = Value.cast(d)
    width = len(d)
    out = []
    for k in range(copies):
        q = Signal(width, name=f"{name}_{k}", reset_less=True)
        if dsp == ECP5_DSP:
            for b in range(width):
                cell = f"{name}_ff{k}" if width == 1 else f"{name}_ff{k}_{b}"
                m.submodules[cell] = Instance(
                    "TRELLIS_FF",
                    p_GSR="DISABLED",
                    p_CEMUX="1",
                    p_CLKMUX="CLK",
                    p_LSRMUX="LSR",
                    p_REGSET="RESET",
                    p_SRMODE="LSR_OVER_CE",
                    i_CLK=ClockSignal(),
                    i_LSR=Const(0),
                    i_CE=Const(1),
                    i_DI=d[b],
                    o_Q=q[b],
                )
        else:
            m.d.sync += q.eq(d)
        out.append(q)
    return out


def pick(flags: list, when_set, otherwise) -> Value:
    """Per share of the rows, `when_set` where its copy of the flag is set, else `otherwise`:
    the rows are cut into len(flags) equal shares, the k-th picked by flags[k]."""
    width = len(Value.cast(otherwise))
    share = width // len(flags)
    assert share * len(flags) == width, (width, len(flags))
    parts = [
        Mux(flag, when_set[k * share : (k + 1) * share], otherwise[k * share : (k + 1) * share])
        for k, flag in enumerate(flags)
    ]
    return Cat(*parts)
