"""The concurrent-stage engine: fetch, load, compute and store advance in simulated time.

Each stage runs its own in-order queue. An instruction starts when its stage is free, fetch has
routed it, and every token it pops is there; it runs (functionally, in one step) and its pushes
are sent when it completes, stalling the stage while a target token queue is full. Fetch routes
instructions into command queues of `cmd_queue_depth` entries. Events are taken in time order.
A LOAD or STORE hands its bursts to the DRAM port (`dram_port.py`, arbitrated burst by burst as
the RTL does) and completes once its data has passed. When nothing can move and the program is
not done, `DeadlockError` lists every stage's blocked instruction and the tokens.

The compute stage has two execution units, the GEMM core and the vector ALU. It issues in
order, one instruction per cycle at most; an instruction waits for its own unit, and also for
the other unit's in-flight instruction unless their first micro-ops write different halves of
the accumulator (the interlock the hardware can afford: one bit per unit), and nothing issues
while the other unit's finished instruction owes its push. LOAD UOP/ACC and FINISH wait for
both units. Tokens pushed into one queue keep program order: a push waits for an older
instruction on the other unit that pushes to the same queue. Per-instruction facts come from
`plan.py`, the fetch unit's model from `fetch.py`, the DRAM port's from `dram_port.py`.

A requantizing STORE (configs with the unit) reads its accumulator rows through their bank's
read port, which the GEMM and ALU units also read through, so it holds that bank: it asks as it
starts (its address and bursts go ahead), and is granted the bank `Timing.hold_grant` cycles
later, or once no GEMM/ALU instruction whose first micro-op is in the bank runs (its unit then
reads `Timing.unit_release` cycles after that instruction's end); until then the
compute stage may still issue into the bank (in a cycle where both could go, it goes first),
after it nothing issues into the bank until `Timing.hold_release` cycles after the STORE's end.
The STORE ends once the DRAM has taken the beats its unit gives from the grant on
(`requant_pace.py`). One into INP (`to_inp`) ends once its unit's last row is written into INP
(`last_inp_write`); INP has one write port, so such a STORE starts only while no INP LOAD is in
flight, and an INP LOAD only while no STORE into INP is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator

from tilecraft.errors import DeadlockError, ExecutionError
from tilecraft.hw.config import HwConfig
from tilecraft.hw.isa import (
    BARRIER,
    STAGE_OF,
    Opcode,
    Stage,
    TokenQueue,
    Unit,
    format_row,
)
from tilecraft.hw.timing import Timing
from tilecraft.sim.dram_port import COMPUTE_CLIENT, LOAD_CLIENT, STORE_CLIENT, Done, DramPort
from tilecraft.sim.fetch import FETCH_KEY, Fetch
from tilecraft.sim.plan import Plan
from tilecraft.sim.requant_pace import burst_ends, last_beat, last_inp_write

FETCH = 3  # actor id of the fetch unit, after the three stages
PORT = 4  # actor id of the DRAM port
PORT_CLIENT = {Stage.LOAD: LOAD_CLIENT, Stage.COMPUTE: COMPUTE_CLIENT, Stage.STORE: STORE_CLIENT}
STAGE_NAMES = {Stage.LOAD: "load", Stage.COMPUTE: "compute", Stage.STORE: "store", FETCH: "fetch"}


OTHER_UNIT = {Unit.GEMM: Unit.ALU, Unit.ALU: Unit.GEMM}


class _Hold:
    """A requantizing STORE's hold on a bank: asked for at `asked`, granted at `granted`; once
    its bursts' addresses are through, the STORE's end as they set it (`port_end`) and their
    `Done` (when the DRAM takes its data)."""

    __slots__ = ("bank", "k", "asked", "granted", "port_end", "done")

    def __init__(self, bank: int, k: int, asked: int):
        self.bank, self.k, self.asked = bank, k, asked
        self.granted: int | None = None
        self.port_end: int | None = None
        self.done: Done | None = None


class Engine:
    def __init__(
        self,
        cfg: HwConfig,
        timing: Timing,
        plan: Plan,
        execute: Callable,
        half: Callable[[int], int] | None = None,
        insn_offset: int = 0,
        waits: Callable[[int], int] | None = None,
    ):
        """`execute(k, stage, start, end, overlaps)` runs instruction k (`overlaps`: the other
        compute unit's instruction still in flight, or None); `half(k)` is the accumulator
        half a GEMM/ALU instruction's first micro-op writes (None: the units never overlap);
        `insn_offset`: the program's byte offset in DRAM (where fetch's bursts fall);
        `waits(k)`: cycles a GEMM/ALU instruction adds to its busy ones from the micro-ops it
        runs (read as it starts: the ALU's hazards)."""
        self.cfg, self.timing, self.plan, self.execute = cfg, timing, plan, execute
        self.waits = waits
        self.queue_latency = timing.queue_latency
        self.half = half if timing.dual_issue else None
        self.bank_of = half if cfg.requant_lanes else None  # a GEMM/ALU instruction's bank
        # the requantizing STORE holding (or asking for) a bank's read port, and each bank's
        # release
        self.store_hold: _Hold | None = None
        self.bank_free = [0, 0]
        # INP's write port: the last INP LOAD's and STORE into INP's ends (`_inp_port`)
        self.inp_free = {Stage.LOAD: 0, Stage.STORE: 0}
        self.unit_free = dict.fromkeys(Unit, 0)
        self.unit_last: dict[Unit, int | None] = dict.fromkeys(Unit)
        self.after_barrier = False  # the compute stage's last instruction was a LOAD/FINISH
        self.issued = False  # the compute stage is free `issue_ii` after its last issue
        self.last_push = dict.fromkeys(TokenQueue, 0)
        n = len(plan.stage)
        self.n = n
        self.queues = {s: [k for k in range(n) if plan.stage[k] == s] for s in Stage}
        self.pos = dict.fromkeys(Stage, 0)
        self.free = dict.fromkeys(Stage, 0)
        self.pending: dict[Stage, tuple[int, int] | None] = dict.fromkeys(Stage)
        self.starts: dict[Stage, list[int]] = {s: [] for s in Stage}
        # when each stage took each of its commands out of its queue (what frees an entry for
        # fetch): the load and store stages as they start one, the compute stage as it decodes
        # one, which it does once it has issued the one before (after a compute LOAD, once that
        # LOAD is done): its first, at once
        self.takes: dict[Stage, list[int]] = {s: [] for s in Stage}
        self.takes[Stage.COMPUTE].append(0)
        self.push_t: dict[TokenQueue, list[int]] = {q: [] for q in TokenQueue}
        self.pop_t: dict[TokenQueue, list[int]] = {q: [] for q in TokenQueue}
        self.port = DramPort(timing)
        self.port.pace = self._pace
        self.fetch = Fetch(cfg, timing, plan, self.port, insn_offset)
        self.dispatch_t = self.fetch.dispatched
        self.in_flight: dict[Stage, tuple[int, int] | None] = dict.fromkeys(Stage)
        self.start = [0] * n
        self.end = [0] * n
        self.stall = dict.fromkeys(Stage, 0)

    # ---- one event per call: pick the earliest actor that can move -------------------------
    def run(self) -> None:
        # the DRAM port goes last in a cycle, so that it sees every request made in it; a burst
        # acceptance that completes no transfer changes nothing the other actors wait on, so the
        # port takes every acceptance due before their next step in one go
        actors = (FETCH, Stage.COMPUTE, Stage.LOAD, Stage.STORE)
        while True:
            best, best_t = None, math.inf
            for a in actors:
                t = self._ready(a)
                if t is not None and t < best_t:
                    best, best_t = a, t
            port_t = self.port.next_time()
            if port_t is not None and port_t < best_t:
                self._accept(best_t)
                continue
            if best is None:
                if all(self.pos[s] == len(self.queues[s]) and not self.pending[s] for s in Stage):
                    return
                self._deadlock()
            if best == FETCH:
                self.fetch.step(best_t)
            elif self.in_flight[best]:  # a requantizing STORE's grant
                self._grant(best_t)
            elif self.pending[best]:
                self._push(best, best_t)
            else:
                self._exec(best, best_t)

    def _ready(self, a) -> int | None:
        """Time actor `a` can take its next step, or None while it is blocked."""
        if a == FETCH:
            return self.fetch.ready(self.takes)
        if self.in_flight[a]:  # its transfer is not yet through the DRAM port
            hold = self.store_hold
            if hold is not None and hold.granted is None and a == Stage.STORE:
                return self._bank_ready(hold.k, hold.asked)
            return None
        if self.pending[a]:
            k, done = self.pending[a]
            return self._push_ready(k, done)
        if self.pos[a] == len(self.queues[a]):
            return None
        k = self.queues[a][self.pos[a]]
        if k >= len(self.dispatch_t):
            return None
        t = self._free(a, k)
        routed = self.dispatch_t[k] + self.queue_latency
        if routed > t:
            t = routed
        for q in self.plan.pops[k]:  # the hot loop: plain comparisons, no max() calls
            m, pushed = len(self.pop_t[q]), self.push_t[q]
            if m >= len(pushed):
                return None
            if pushed[m] > t:
                t = pushed[m]
        if a == Stage.COMPUTE:
            t, _ = self._unit_ready(k, t)
            if t is None:
                return None
        elif self.plan.inp_writer[k]:
            return self._inp_port(a, t)
        return t

    def _inp_port(self, a: Stage, t: int) -> int | None:
        """When INP LOAD or STORE into INP k of stage a may start at or after t: once the
        other stage's INP writer is done (None while it is in flight)."""
        other = Stage.STORE if a == Stage.LOAD else Stage.LOAD
        flight = self.in_flight[other]
        if flight is not None and self.plan.inp_writer[flight[0]]:
            return None
        free = self.inp_free[other]
        return free if free > t else t

    def _store_bank(self, k: int) -> int:
        return self.cfg.acc_bank(int(self.plan.rows[k]["sram_base"]))

    def _bank_ready(self, k: int, t: int) -> int:
        """When requantizing STORE k may be granted its bank at or after t: once no GEMM/ALU
        instruction in the bank is running."""
        bank = self._store_bank(k)
        for j in self.unit_last.values():
            if j is not None and self.bank_of(j) == bank and self.end[j] > t:
                t = self.end[j]
        return t

    def _free(self, s: Stage, k: int) -> int:
        """When stage s could start instruction k, ignoring tokens and units. After a LOAD or
        FINISH the compute stage decodes afresh: a barrier starts `barrier_restart` cycles
        after, a GEMM/ALU instruction only when its issue pipeline has refilled."""
        if s != Stage.COMPUTE:
            return self.free[s]
        t = self.timing
        if self.after_barrier:
            gap = t.barrier_restart if self.plan.unit[k] == BARRIER else t.issue_ii - 1
            return self.free[s] + gap
        if self.plan.unit[k] == BARRIER and self.issued:  # no micro-op to peek at
            return self.free[s] - t.issue_ii + t.barrier_issue
        return self.free[s]

    def _unit_ready(self, k: int, t: int) -> tuple[int, int | None]:
        """Earliest start of compute instruction k at or after t, and the other unit's
        instruction it would overlap (None if it waits for it)."""
        unit = self.plan.unit[k]
        if unit != BARRIER and self.bank_of is not None:  # a requantizing STORE's bank
            bank = self.bank_of(k)
            hold = self.store_hold
            if hold is not None and hold.bank == bank and hold.granted is not None:
                return None, None
            t = max(t, self.bank_free[bank])
        if unit == BARRIER or self.half is None:
            return max(t, *self.unit_free.values()), None
        other = OTHER_UNIT[unit]
        if self.unit_last[unit] is not None:
            t = max(t, self.unit_free[unit] + self.timing.unit_handoff)
        j = self.unit_last[other]
        if j is not None and self.plan.pushes[j]:
            # while the other unit's instruction owes its push, nothing issues
            owed = self.end[j]
            if owed <= t < owed + self.timing.push_hold:
                t = owed + self.timing.push_hold
        if j is None or self.unit_free[other] <= t:
            return t, None
        if self.half(k) == self.half(j):
            return self.unit_free[other], None
        return t, j

    def _push_ready(self, k: int, done: int) -> int | None:
        t = done
        for q in self.plan.pushes[k]:
            m = len(self.push_t[q]) - self.cfg.dep_queue_depth
            if m >= 0:
                if m >= len(self.pop_t[q]):
                    return None
                t = max(t, self.pop_t[q][m])
        return t

    def _exec(self, s: Stage, t: int) -> None:
        k = self.queues[s][self.pos[s]]
        ready = max(self._free(s, k), self.dispatch_t[k] + self.timing.queue_latency)
        overlaps = None
        if s == Stage.COMPUTE:  # waiting for a unit is work, not a stall on tokens
            overlaps = self._unit_ready(k, t)[1]
            ready = min(self._unit_ready(k, ready)[0], t)
        self.stall[s] += t - ready
        for q in self.plan.pops[k]:
            self.pop_t[q].append(t)
        self.starts[s].append(t)
        if s != Stage.COMPUTE:
            self.takes[s].append(t)
        elif self.plan.unit[k] is not BARRIER:
            self.takes[s].append(t)  # it decodes the next command as this one issues
        self.pos[s] += 1
        if self.plan.unit_shape[k] is not None:
            self.store_hold = _Hold(self._store_bank(k), k, t + self.timing.hold_grant)
        bursts = self.plan.bursts[k]
        if not bursts and self.plan.unit_shape[k] is not None:  # a STORE into INP: no DRAM
            self.store_hold.port_end = t + self.plan.busy[k]
            self.in_flight[s] = (k, t)
            return
        if bursts:  # it ends once its data has passed the DRAM port
            lead = self.plan.lead[k]
            self.port.request(k, PORT_CLIENT[s], bursts, t + lead, drain=self.plan.drain[k])
            self.in_flight[s] = (k, t)
            return
        busy = self.plan.busy[k]
        if self.waits is not None and self.plan.unit[k] is not None:
            busy += self.waits(k)
        self._complete(s, k, t, t + busy, overlaps)

    def _accept(self, limit: float) -> None:
        """The DRAM port accepts the bursts due before `limit`, up to one that completes a
        transfer, which finishes its instruction."""
        done = self.port.advance(limit)
        if done is None:
            return
        if done.key == FETCH_KEY:
            self.fetch.arrived(done.first)
            return
        k = done.key
        s = STAGE_OF[self.plan.stage[k]]
        _, t = self.in_flight[s]
        tail = self.timing.store_tail if self.plan.rows[k]["opcode"] == Opcode.STORE else 1
        end = max(
            t + self.plan.busy[k],
            done.free + tail + self.plan.post[k],
            t + self.plan.box[k],
            done.first + self.plan.writes[k],
        )
        if self.plan.unit_shape[k] is not None:  # and its unit's reads, from the grant on
            hold = self.store_hold
            hold.port_end, hold.done = end, done
            if hold.granted is None:
                return
            end = self._unit_end(t, hold)
        self.in_flight[s] = None
        self._complete(s, k, t, end, None)

    def _grant(self, g: int) -> None:
        """The asking STORE is granted its bank at g; it ends now if its bursts are through."""
        hold = self.store_hold
        hold.granted = g
        if hold.port_end is not None:
            _, t = self.in_flight[Stage.STORE]
            self.in_flight[Stage.STORE] = None
            self._complete(Stage.STORE, hold.k, t, self._unit_end(t, hold), None)

    def _pace(self, key) -> Generator[int | None, int, None] | None:
        """Requantizing STORE `key`'s beats burst by burst (`burst_ends`), for the DRAM port
        as it accepts its first burst: from its grant, or before the grant from the soonest it
        can come (once the GEMM/ALU instructions running in its bank are done), which the
        beats never precede: the bursts the DRAM takes after it wait at least that long, as
        on the RTL, whose DRAM serves them in order."""
        hold = self.store_hold
        if hold is None or hold.k != key:
            return None
        _, t = self.in_flight[Stage.STORE]
        granted = hold.granted if hold.granted is not None else self._bank_ready(key, hold.asked)
        reads = self._reads_from(t, hold, granted)
        return burst_ends(self.timing, self.plan.unit_shape[key], self.plan.bursts[key], reads)

    def _reads_from(self, t: int, hold: _Hold, granted: int) -> int:
        """When the unit of the requantizing STORE started at t and granted its bank at
        `granted` reads: once it has its bank (`unit_release` cycles later where the grant
        waited for an instruction in the bank) and its plan and checks are through."""
        if granted > hold.asked:
            granted += self.timing.unit_release
        return max(granted, t + self.timing.requant_start)

    def _unit_end(self, t: int, hold: _Hold) -> int:
        """The end of requantizing STORE hold.k, started at t: once the DRAM has taken the
        last beat its unit gave (which holds the DRAM's data bus that long)."""
        timing, k, done = self.timing, hold.k, hold.done
        reads = self._reads_from(t, hold, hold.granted)
        shape, bursts = self.plan.unit_shape[k], self.plan.bursts[k]
        if not bursts:  # into INP
            return max(hold.port_end, last_inp_write(timing, shape, reads) + timing.store_tail)
        last = last_beat(timing, shape, bursts, reads, done.firsts)
        free = last + 1 + timing.burst_gap
        self.port.data_free = max(self.port.data_free, free)
        return max(hold.port_end, free + timing.store_tail)

    def _complete(self, s: Stage, k: int, t: int, end: int, overlaps: int | None) -> None:
        """Instruction k of stage s ran from t to end: execute it, free its unit, push."""
        self.start[k], self.end[k] = t, end
        if self.plan.inp_writer[k]:
            self.inp_free[s] = end
        if self.store_hold is not None and self.store_hold.k == k:  # the bank is free again
            self.bank_free[self.store_hold.bank] = end + self.timing.hold_release
            self.store_hold = None
        if s == Stage.COMPUTE and self.plan.unit[k] is BARRIER:
            self.takes[s].append(end)  # a compute LOAD holds the stage until it is done
        self.execute(k, s, t, end, overlaps)
        unit = self.plan.unit[k]
        if s == Stage.COMPUTE:
            self.after_barrier = unit == BARRIER
            self.issued = False
        if unit in self.unit_free:  # a push owed holds the stage one more cycle
            end = self._retire(k, unit, end)
            owed = self.timing.push_hold if self.plan.pushes[k] else 0
            self.unit_free[unit], self.unit_last[unit] = end + owed, k
        if self._push_ready(k, end) is not None and not self._must_wait(k):
            self._send(k, end)
            # the compute stage issues the next instruction while this one runs on its unit
            if unit in self.unit_free and self.half:
                self.free[s] = t + self.timing.issue_ii
                self.issued = True
            else:  # LOAD and STORE stages push from a state of their own
                self.free[s] = end + self._push_hold(s, k)
        else:
            self.pending[s] = (k, end)

    def _retire(self, k: int, unit: str, end: int) -> int:
        """When GEMM/ALU instruction k, done at `end`, may push: tokens of one queue go in
        program order, so not before an older instruction on the other unit that pushes to the
        same queue has pushed."""
        other = OTHER_UNIT[unit]
        j = self.unit_last[other]
        if j is None or not set(self.plan.pushes[k]) & set(self.plan.pushes[j]):
            return end
        return max(end, self.unit_free[other])

    def _push_hold(self, s: Stage, k: int) -> int:
        return self.timing.push_hold if s != Stage.COMPUTE and self.plan.pushes[k] else 0

    def _must_wait(self, k: int) -> bool:
        return any(
            len(self.push_t[q]) - len(self.pop_t[q]) >= self.cfg.dep_queue_depth
            for q in self.plan.pushes[k]
        )

    def _push(self, s: Stage, t: int) -> None:
        k, done = self.pending[s]
        self.stall[s] += t - done
        self._send(k, t)
        self.pending[s] = None
        self.free[s] = t + self._push_hold(s, k)

    def _send(self, k: int, t: int) -> None:
        for q in self.plan.pushes[k]:
            # tokens of one queue arrive in program order, token_latency after completion
            t_q = max(t + self.timing.token_latency, self.last_push[q])
            self.last_push[q] = t_q
            self.push_t[q].append(t_q)

    # ---- diagnosis --------------------------------------------------------------------------
    def _deadlock(self) -> None:
        stages, lines = {}, []
        for s in Stage:
            name = STAGE_NAMES[s]
            if self.pending[s]:
                k = self.pending[s][0]
                why = "done, waiting to push a token into a full queue"
            elif self.pos[s] < len(self.queues[s]):
                k = self.queues[s][self.pos[s]]
                if k >= len(self.dispatch_t):
                    why = "not yet fetched (fetch is blocked on a full command queue)"
                else:
                    missing = [
                        q.name
                        for q in self.plan.pops[k]
                        if len(self.pop_t[q]) >= len(self.push_t[q])
                    ]
                    why = "waiting for a token on " + ", ".join(missing)
            else:
                lines.append(f"  {name}: finished")
                continue
            text = f"{k}: {format_row(self.plan.rows[k])}"
            stages[name] = {"index": k, "insn": text, "reason": why}
            lines.append(f"  {name}: blocked at instruction {text}\n      ({why})")
        tokens = {q.name: len(self.push_t[q]) - len(self.pop_t[q]) for q in TokenQueue}
        lines.append(
            "  tokens in flight: " + ", ".join(f"{name}={v}" for name, v in tokens.items())
        )
        raise DeadlockError(
            "deadlock: no stage can make progress\n" + "\n".join(lines), stages, tokens
        )

    def check_finish(self) -> int:
        """Cycle at which `done` rises; every STORE to DRAM (the only DRAM writer) must be done
        by then."""
        compute = self.queues[Stage.COMPUTE]
        if not compute or self.plan.rows[compute[-1]]["opcode"] != Opcode.FINISH:
            raise ExecutionError(
                "the program does not end with FINISH on the compute stage, so done would "
                "never rise"
            )
        k = compute[-1]
        done = max(self.end[i] for i in compute)
        stores = self.queues[Stage.STORE]
        late = [i for i in stores if self.end[i] > done and not self.plan.inp_writer[i]]
        if late:
            i = late[0]
            raise ExecutionError(
                f"completes at cycle {self.end[i]}, after FINISH (instruction {k}) raised done "
                f"at cycle {done}: the host would read DRAM before it is written; make FINISH "
                f"wait for it with a token",
                index=i,
                insn=format_row(self.plan.rows[i]),
            )
        return done
