"""The cycle model against the RTL across the schedule space (tier `rtl`): random layers (odd
channel counts, non-square maps, kernels 1-7, strides 1-3, padding, every epilogue option)
under random legal schedules (both loop orders, single and double buffering, 2 and 4
accumulator slots, ragged last tiles; compiler/programs/random_schedules.py), each run on the
generated Verilog and on the simulator: outputs bit for bit, cycles within 0.5%.

Both run with the test command: the quick draw (12 schedules a config) and the long sweep (the
next 188 a config, about a minute each: with the quick draw, the 200 that `tilecraft bench
rtl-speed` measures and records; TILECRAFT_SCHEDULES=N for another size, 0 for none)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from tiers import require_rtl

from tilecraft.benchmarks.rtl_speed import MAX_SCHEDULE_ERROR, MIN_EXACT_SHARE, drawn_schedules
from tilecraft.compiler.operator.conv2d import conv2d
from tilecraft.compiler.operator.params import random_params
from tilecraft.hw.config import preset
from tilecraft.ops import Conv2d, ConvSchedule, Epilogue, LoopOrder
from tilecraft.runtime import get_device
from tilecraft.runtime.layout import pack_inputs, random_inputs

pytestmark = [pytest.mark.rtl, pytest.mark.slow]  # Verilator models take minutes to build

require_rtl()

CONFIGS = ["default", "1x8x8", "2x16x16"]
QUICK = 12  # drawn schedules a config in the quick draw
LONG = int(os.environ.get("TILECRAFT_SCHEDULES", "188") or 0)  # the long sweep's size a config


def _check(sweep: dict, share: float) -> None:
    where = f"on {sweep['config']}"
    assert not sweep["differ"], f"outputs differ from the simulator's {where}: {sweep['differ']}"
    worst = sweep["worst"]
    assert sweep["max_cycle_error"] <= MAX_SCHEDULE_ERROR, (
        f"cycle model {worst['error']:+.3%} off the RTL {where} ({worst['model']:,} cycles "
        f"against {worst['rtl']:,}), {worst['schedule']}"
    )
    off = [
        f"seed {s}: {e:+.3%}" for s, e in enumerate(sweep["errors"], sweep["first_seed"]) if e != 0
    ]
    assert sweep["exact_share"] >= share, (
        f"{sweep['exact_share']:.0%} of the drawn schedules cycle-exact {where} (at least "
        f"{share:.0%} expected); off: {', '.join(off)}"
    )


@pytest.mark.parametrize("config", CONFIGS)
def test_drawn_schedules_agree_with_the_rtl(config):
    # a model a cycle off everywhere would show as none exact: half is the quick draw's floor
    _check(drawn_schedules(preset(config), QUICK), share=0.5)


@pytest.mark.skipif(
    not LONG,
    reason="TILECRAFT_SCHEDULES=0 turns the long sweep off",
)
@pytest.mark.parametrize("config", CONFIGS)
def test_long_sweep_of_drawn_schedules(config):
    _check(drawn_schedules(preset(config), LONG, first_seed=QUICK), share=MIN_EXACT_SHARE)


def test_the_schedules_the_model_once_got_wrong():
    # a 3x3 conv of 33 channels over 9x13: single-buffered (the model was 1.28% slow), and
    # spatial-outer with 4 accumulator slots, ragged tiles and a residual (2.75% slow)
    cfg = preset("default")
    op = Conv2d(1, 33, 9, 13, 33, 3, 1, 1)
    cases = [
        (Epilogue(bias=True, relu=True, shift=8), ConvSchedule(1, 1, 1, 13, double_buffer=False)),
        (
            Epilogue(bias=True, shift=8, residual=True),
            ConvSchedule(1, 1, 2, 5, LoopOrder.SPATIAL_OUTER, True, 4),
        ),
    ]
    rng = np.random.default_rng(0)
    jobs = []
    for epilogue, schedule in cases:
        p = conv2d(cfg, op, epilogue, schedule=schedule, **random_params(op, epilogue, rng))
        jobs.append((p, pack_inputs(p, random_inputs(p, rng))))
    from tilecraft.sim.rtl.device import RtlDevice

    for (p, inputs), (_, schedule), rtl in zip(jobs, cases, RtlDevice(cfg).run_many(jobs)):
        model = get_device("sim").run(p, inputs)
        for name, want in model.outputs.items():
            assert np.array_equal(rtl.outputs[name], want), f"{schedule.describe()}: {name}"
        error = (model.report.cycles - rtl.report.cycles) / rtl.report.cycles
        assert abs(error) <= MAX_SCHEDULE_ERROR, (
            f"{schedule.describe()}: model {model.report.cycles:,}, RTL {rtl.report.cycles:,}"
        )


def test_rtl_speed_bench_reports_the_sweep(tmp_path, capsys):
    import json

    from tilecraft.cli import main

    out, plot = tmp_path / "rtl_speed.json", tmp_path / "sweep.png"
    args = ["bench", "rtl-speed", "--config", "1x8x8", "--schedules", "3"]
    assert main([*args, "--json", str(out), "--plot", str(plot)]) == 0
    (sweep,) = json.loads(out.read_text())["schedules"]
    assert sweep["config"] == preset("1x8x8").tag and sweep["schedules"] == 3
    assert sweep["bit_exact"] == 3 and len(sweep["errors"]) == 3
    assert sweep["exact_cycles"] == sum(e == 0 for e in sweep["errors"])
    assert sweep["max_cycle_error"] == max(abs(e) for e in sweep["errors"])
    assert plot.stat().st_size > 0
    assert "3 drawn schedules on 1x8x8" in capsys.readouterr().out


def test_rtl_speed_plot_needs_the_sweep(capsys):
    from tilecraft.cli import main

    assert main(["bench", "rtl-speed", "--plot", "x.png"]) != 0
    assert "give --schedules N" in capsys.readouterr().err
