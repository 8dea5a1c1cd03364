"""The simulated board's error registers (sim/pynq_board.py): what the simulator raises, as the
ERROR_CODE the hardware reports, and back (runtime/status.py) as the same exception class."""

from __future__ import annotations

import numpy as np
import pytest

from tilecraft.errors import IllegalInstructionError
from tilecraft.hw import regs
from tilecraft.hw.config import preset
from tilecraft.hw.isa.requant import pack_clip, unpack_clip
from tilecraft.runtime import get_device
from tilecraft.runtime.status import raise_for_error
from tilecraft.sim.pynq_board import error_code

from harness import requant_rows, requant_store_program


@pytest.mark.parametrize(("row", "word"), [(9, 1 << 22), (10, None)])
def test_a_refused_parameter_row_is_reported_as_requant_params(row, word):
    """A scale below 2**23 or an empty clip: the simulator's IllegalInstructionError is
    REQUANT_PARAMS on the board, which the runtime raises as IllegalInstructionError again."""
    cfg = preset("1x8x8").replace(requant_lanes=8)
    acc, _ = requant_rows(cfg, np.random.default_rng(0), 8)
    if word is None:  # lo above hi
        zero, _, _ = unpack_clip(acc[10, 0, 2].astype(np.int64))
        word = pack_clip(zero, np.int64(3), np.int64(-3))
    acc[row, 0, 2] = np.array(word, np.int64).astype(np.int32)
    program = requant_store_program(cfg, acc, dict(x_size=8, x_stride=8, param_base=8))
    with pytest.raises(IllegalInstructionError) as raised:
        get_device("sim").run(program, {})
    assert error_code(raised.value) == regs.ErrorCode.REQUANT_PARAMS
    with pytest.raises(IllegalInstructionError, match="REQUANT_PARAMS") as again:
        raise_for_error(regs.ErrorCode.REQUANT_PARAMS, raised.value.index)
    assert again.value.index == raised.value.index == 1
