"""One unit of the accelerator routed on its own (`tilecraft hw timing --unit NAME`): a
minute's place-and-route that says whether the unit's own stages can meet the clock, where
the whole core's route takes most of an hour.

A unit alone routes short: nothing else competes for its region of the chip. Its Fmax is an
upper bound on what its paths reach inside the core, so a unit meant for 100 MHz wants a clear
margin here (benchmarks/TIMING.md has the requantization lane's routes, alone and in the
core). Copies of the unit side by side
stand for its lanes; their inputs come from a shift chain fed by one pin and their outputs
are registered and XOR-folded into one pin, as `ecp5.harness` does for the core, so nothing
is optimised away and no I/O path sits between two of the unit's registers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tilecraft.boards.flows.ecp5 import DEVICES, TimingReport, place_and_route
from tilecraft.errors import DeviceError
from tilecraft.hw.rtl.dsp import ECP5_DSP


def _requant_lane():
    from tilecraft.hw.rtl.requant import RequantLane

    return RequantLane(ECP5_DSP)


# a unit's name -> a factory of one copy, as the ECP5 flow builds it (its DSPs as instances)
UNITS: dict[str, Callable] = {"requant-lane": _requant_lane}
MAX_COPIES = 64


def unit_harness(unit: str, copies: int) -> str:
    """Verilog of `unit_harness`: `copies` of `unit`, every input bit from a one-pin shift
    chain, every output bit registered and XOR-folded into one pin."""
    _check(unit, copies)
    from amaranth import Cat, Module, Signal
    from amaranth.back import verilog
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    make = UNITS[unit]

    class Harness(wiring.Component):
        def __init__(self):
            super().__init__({"din": In(1), "dout": Out(1)})

        def elaborate(self, platform):
            m = Module()
            ins, outs = [], []
            for k in range(copies):
                m.submodules[f"unit{k}"] = dut = make()
                for _, member, value in dut.signature.flatten(dut):
                    (ins if member.flow == wiring.In else outs).append(value)
            chain = Signal(sum(len(x) for x in ins))
            m.d.sync += chain.eq(Cat(self.din, chain[:-1]))
            at = 0
            for x in ins:
                m.d.comb += x.eq(chain[at : at + len(x)])
                at += len(x)
            held = Signal(sum(len(x) for x in outs))
            fold = Signal()
            m.d.sync += [held.eq(Cat(*outs)), fold.eq(held.xor())]
            m.d.comb += self.dout.eq(fold)
            return m

    return verilog.convert(Harness(), name="unit_harness")


def unit_timing(
    unit: str,
    copies: int = 4,
    *,
    device: str = "85k",
    package: str = "CABGA381",
    speed: int = 6,
    target_mhz: float = 100.0,
    workdir: str | Path | None = None,
    route_timeout_s: float | None = None,
    seed: int | None = None,
) -> TimingReport:
    """Place and route `copies` of `unit` alone on an ECP5 and report their Fmax."""
    _check(unit, copies)
    if device not in DEVICES:
        raise DeviceError(f"unknown ECP5 device {device!r}; valid: {', '.join(DEVICES)}")
    name = f"{unit} x{copies}"
    work = Path(workdir or Path.cwd() / "build" / "timing" / f"{unit}-x{copies}-ecp5-{device}")
    return place_and_route(
        name,
        work,
        {"unit.v": unit_harness(unit, copies)},
        "unit_harness",
        device=device,
        package=package,
        speed=speed,
        target_mhz=target_mhz,
        route_timeout_s=route_timeout_s,
        seed=seed,
    )


def _check(unit: str, copies) -> None:
    if unit not in UNITS:
        raise DeviceError(f"unknown unit {unit!r} to route alone; valid: {', '.join(UNITS)}")
    if isinstance(copies, bool) or not isinstance(copies, int) or not 1 <= copies <= MAX_COPIES:
        raise DeviceError(
            f"{copies!r} copies of {unit}: give a whole number from 1 to {MAX_COPIES}"
        )
