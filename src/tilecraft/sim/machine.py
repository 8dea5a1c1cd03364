"""The simulated machine's state: DRAM as a byte space and the four scratchpads.

OUT is not a separate memory: it is the narrowed view of ACC that STORE reads.
"""

from __future__ import annotations

import numpy as np

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import IsaSpec, isa_for

_INT = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def int_dtype(bits: int) -> np.dtype:
    return np.dtype(_INT[bits])


def exact_float(cfg: HwConfig) -> np.dtype:
    """A float dtype in which one micro-op's dot product (BLOCK_IN products) is exact."""
    bits = cfg.inp_bits + cfg.wgt_bits - 1 + cfg.log_block_in
    if bits <= 24:
        return np.dtype(np.float32)
    if bits <= 53:
        return np.dtype(np.float64)
    raise AssertionError(f"no exact float for {bits}-bit dot products")  # configs forbid it


def exact_uops(cfg: HwConfig) -> int:
    """How many micro-ops' dot products one sum in `exact_float` holds exactly: every partial
    sum of that many products stays within the float's significand."""
    product = cfg.inp_bits + cfg.wgt_bits - 1
    return 1 << (np.finfo(exact_float(cfg)).nmant + 1 - product - cfg.log_block_in)


class Machine:
    """DRAM bytes plus scratchpads shaped (depth, rows, lanes) in their element dtypes."""

    def __init__(self, config: HwConfig, dram: np.ndarray, plans: list | None = None):
        if dram.dtype != np.uint8 or dram.ndim != 1:
            raise TypeError("dram must be a 1-D uint8 array")
        c = config
        self.config = c
        self.spec: IsaSpec = isa_for(c)
        self.dram = dram
        b, bi, bo = c.batch, c.block_in, c.block_out
        self.inp = np.zeros((c.depth("inp"), b, bi), int_dtype(c.inp_bits))
        self.wgt = np.zeros((c.depth("wgt"), bo, bi), int_dtype(c.wgt_bits))
        self.acc = np.zeros((c.depth("acc"), b, bo), int_dtype(c.acc_bits))
        self.uop_words = np.zeros(c.depth("uop"), np.dtype(f"<u{c.uop_bytes}"))
        # Decoded micro-op columns, kept in step with uop_words on every UOP load.
        self.uop_dst = np.zeros(c.depth("uop"), np.int64)
        self.uop_src = np.zeros(c.depth("uop"), np.int64)
        self.uop_wgt = np.zeros(c.depth("uop"), np.int64)
        # Float mirrors of inp/wgt so GEMM runs on BLAS; exact (see exact_float).
        self.fdtype = exact_float(c)
        self.exact_uops = exact_uops(c)  # micro-ops a GEMM may sum in one matmul
        # GEMM/ALU loops' plans (semantics), one dict per span between micro-op loads; `plans`,
        # another run's of the same program, kept while its micro-op loads match (`uops_loaded`)
        self.plans: list = [] if plans is None else plans
        self._epoch, self._plans_hold = 0, True
        if not self.plans:
            self.plans.append((None, None, {}))
        self.loop_plans: dict = self.plans[0][2]
        self.inp_f = np.zeros(self.inp.shape, self.fdtype)
        self.wgt_f = np.zeros(self.wgt.shape, self.fdtype)
        self.out_dtype = int_dtype(c.out_bits)

    def uops_loaded(self, base: int, count: int) -> None:
        """Micro-ops `base`.. were loaded: the loop plans made before no longer hold. The next
        span's plans from the run `plans` came from are taken while every micro-op load so far
        loaded the same words there."""
        self._epoch += 1
        words = self.uop_words[base : base + count]
        plans = self.plans
        if self._plans_hold and self._epoch < len(plans):
            at, kept, loop_plans = plans[self._epoch]
            if at == base and np.array_equal(kept, words):
                self.loop_plans = loop_plans
                return
        self._plans_hold = False
        self.loop_plans = {}
        del plans[self._epoch :]
        plans.append((base, words.copy(), self.loop_plans))

    def sram(self, mem_name: str) -> np.ndarray:
        return {"inp": self.inp, "wgt": self.wgt, "acc": self.acc, "uop": self.uop_words}[mem_name]
