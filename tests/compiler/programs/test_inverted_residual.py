"""An inverted residual block as one program (STORE into INP): every tiling that fits verifies
and runs bit-exact against numpy on the simulator, on both strides, channel counts that are
not whole blocks, its weights all in WGT at once or loaded group by group; what it refuses."""

import numpy as np
import pytest

from tilecraft.compiler.analysis.verify import verify
from tilecraft.compiler.programs.inverted_residual import Band, Block, bands, build, output
from tilecraft.errors import ScheduleError
from tilecraft.hw.config import preset
from tilecraft.runtime import get_device

CFG = preset("default").replace(requant_lanes=8).with_depthwise_mode(3).with_store_to_inp()


@pytest.mark.parametrize(
    "block",
    [
        Block(size=10, cin=24, expand=32, cout=24, stride=1),
        Block(size=12, cin=16, expand=48, cout=40, stride=2),
        Block(size=4, cin=160, expand=960, cout=40, stride=1),  # weights group by group
    ],
    ids=str,
)
def test_every_tiling_of_a_block_is_numpys_block(block):
    tilings = bands(CFG, block)
    assert {t.project_each for t in tilings} >= {True} and len(tilings) >= 2
    for band in tilings:
        program, inputs, want = build(CFG, block, band, seed=band.rows)
        verify(program, dataflow=False)
        got = output(get_device("sim").run(program, inputs).outputs["y"], block.cout)
        np.testing.assert_array_equal(got, want, err_msg=str(band))
        assert (want > want.min()).mean() > 0.3  # not all one value


def test_what_a_block_program_refuses():
    block = Block(size=10, cin=24, expand=32, cout=24, stride=1)
    with pytest.raises(ScheduleError, match="needs square blocks, batch 1, the depthwise mode"):
        build(preset("default").replace(requant_lanes=8), block, Band(2, True, True))
    with pytest.raises(ScheduleError, match="does not fit"):
        build(CFG, Block(size=112, cin=64, expand=96, cout=24, stride=1), Band(60, False, True))
