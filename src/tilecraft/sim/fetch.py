"""The fetch unit in the cycle model: it reads the program a burst at a time through the DRAM
port (the next burst once the previous one is dispatched, its address `fetch_request` cycles
later: the RTL's fetch re-enters REQUEST and its burst planner computes the address), streams
each instruction out as its own beats arrive, and routes one per `dispatch_ii` into its stage's
command queue, waiting while that queue is full: `cmd_queue_depth` entries and the register and
ready buffer behind them (`Timing.queue_extra`), an entry freed when its stage takes the
command (`takes`: the load and store stages take one as it starts, the compute stage as it
decodes it, once it has issued the one before)."""

from __future__ import annotations

from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import INSN_BYTES, Stage
from tilecraft.hw.timing import Timing
from tilecraft.sim.dram_port import FETCH_CLIENT, DramPort
from tilecraft.sim.plan import Plan

FETCH_KEY = "fetch"  # fetch's transfers on the port (the stages' are instruction indices)


class Fetch:
    def __init__(self, cfg: HwConfig, timing: Timing, plan: Plan, port: DramPort, insn_offset: int):
        """`insn_offset`: the program's byte offset in DRAM (where fetch's bursts fall)."""
        self.cfg, self.timing, self.plan, self.port = cfg, timing, plan, port
        self.insn_offset = insn_offset
        self.n = len(plan.stage)
        self.dispatched: list[int] = []  # when each instruction reached its command queue
        self.routed = dict.fromkeys(Stage, 0)
        self.free = timing.fetch_start
        self.chunk_first = 0  # the instruction at the head of the burst fetch holds
        self.chunk_data = 0  # when that burst's first beat arrives
        self.chunk_len = 0  # instructions in it (0: none read yet)
        self.chunk_bursts: list[int] = []  # its bursts' beats
        self.reading = False  # a burst of instruction words is on the way

    def ready(self, takes: dict[Stage, list[int]]) -> int | None:
        """When fetch can take its next step (`takes`: when each stage took each of its
        instructions out of its command queue), or None while it cannot."""
        f = len(self.dispatched)
        if f == self.n or self.reading:
            return None
        t = self.free
        if f == self.chunk_first + self.chunk_len:
            return t  # the next burst's request waits for no command queue (the RTL's REQUEST)
        t = max(t, self._arrival(f))
        s = self.plan.stage[f]
        m = self.routed[s] - self.cfg.cmd_queue_depth - self.timing.queue_extra
        if m >= 0:
            if m >= len(takes[s]):
                return None
            t = max(t, takes[s][m] + self.timing.queue_free)
        return t

    def step(self, t: int) -> None:
        """At cycle t: request the next burst of instructions, or dispatch the next one."""
        f = len(self.dispatched)
        if f == self.chunk_first + self.chunk_len:
            count = min(self.timing.fetch_chunk(), self.n - f)
            bursts = self.timing.bursts(self.insn_offset + f * INSN_BYTES, 1, count * INSN_BYTES, 0)
            self.port.request(FETCH_KEY, FETCH_CLIENT, bursts, t + self.timing.fetch_request)
            self.chunk_first, self.chunk_len, self.reading = f, count, True
            self.chunk_bursts = [beats for beats, _ in bursts]
            self.free = t
            return
        self.dispatched.append(t)
        self.routed[self.plan.stage[f]] += 1
        self.free = t + self.timing.dispatch_ii

    def arrived(self, first_beat: int) -> None:
        """The requested burst's first beat came at `first_beat`."""
        self.chunk_data = first_beat
        self.reading = False

    def _arrival(self, f: int) -> int:
        """When instruction f's last beat has arrived (fetch streams within its bursts, which
        hold AR together: each one's data follows the one before's after `burst_gap`)."""
        j = f - self.chunk_first + 1
        if not self.timing.fetch_streams:
            return self.chunk_data + self.timing.transfer(1, self.chunk_len * INSN_BYTES)
        beat = -(-j * INSN_BYTES // self.timing.axi_bytes) - 1  # its last beat, from 0
        gaps, seen = 0, 0
        for i, beats in enumerate(self.chunk_bursts):
            seen += beats
            if beat < seen:
                gaps = i * self.timing.burst_gap
                break
        return self.chunk_data + beat + gaps + 2
