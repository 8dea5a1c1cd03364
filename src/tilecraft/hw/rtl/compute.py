"""The compute stage: micro-op and accumulator loads, the GEMM and ALU units, FINISH.

Issue is in order. LOAD UOP/ACC and FINISH wait for both units to be idle. A GEMM or ALU
instruction first reads its first micro-op (one cycle) to learn which accumulator bank it
writes; it starts when its unit is free and, if the other unit is busy, only if the other
instruction's bank differs (the one-bit interlock the cycle model assumes). Tokens are popped
when an instruction starts and pushed when it completes, in program order per queue (so a
token vouches for its own instruction, not for an older one still running on the other unit:
the token pass knows, see compiler/analysis/completion.py).

Scratchpads held here: micro-ops (a read port per unit; LOAD UOP writes through the GEMM
unit's), the accumulator and its narrowed OUT copy, each split into two banks by the top index
bit (so the units can work on different banks at once); STORE reads OUT through its own port.
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, ResetSignal, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tilecraft.hw import regs
from tilecraft.hw.config import ACC_BANKS, HwConfig
from tilecraft.hw.isa import INSN_BITS, MemId, Opcode, isa_for
from tilecraft.hw.rtl.dsp import ECP5_DSP, ECP5_DSP_MODEL
from tilecraft.hw.rtl.layouts import insn_union, uop_layout
from tilecraft.hw.rtl.loader import LoadEngine
from tilecraft.hw.rtl.replicas import pick, replicated
from tilecraft.hw.rtl.requant_store import BankHold
from tilecraft.hw.rtl.signatures import (
    INDEX_BITS,
    NO_RW_CHECK,
    SRAM_READ_LATENCY,
    ErrorReport,
    ReadAddress,
    ReadPort,
    RunControl,
    command,
    read_registers,
    token,
)
from tilecraft.hw.rtl.units import AluUnit, GemmUnit


def delayed(m: Module, value, name: str, cycles: int = SRAM_READ_LATENCY):
    """`value` `cycles` cycles later (by default SRAM_READ_LATENCY: which bank a read's data
    comes from)."""
    for k in range(cycles):
        held = Signal(name=f"{name}_{k + 1}")
        m.d.sync += held.eq(value)
        value = held
    return value


def narrow(cfg: HwConfig, acc_row):
    """The OUT view of an accumulator row: the low out_bits of each lane."""
    lanes, ab, ob = cfg.batch * cfg.block_out, cfg.acc_bits, cfg.out_bits
    return Cat(*(acc_row[k * ab : k * ab + ob] for k in range(lanes)))


class Compute(wiring.Component):
    def __init__(self, cfg: HwConfig, packed: bool | str | None = None):
        self.cfg = cfg
        self.packed = packed
        spec = isa_for(cfg)
        self.bank_bits = spec.acc_idx_bits - 1
        dsp = packed if packed in (ECP5_DSP, ECP5_DSP_MODEL) else None
        self.loader = LoadEngine(cfg, (MemId.UOP, MemId.ACC), dsp)
        self.gemm = GemmUnit(cfg, packed)
        self.alu = AluUnit(cfg, dsp)
        super().__init__(
            {
                "cmd": In(command()),
                "pop_prev": In(token()),  # load -> compute
                "pop_next": In(token()),  # store -> compute
                "push_prev": Out(token()),  # compute -> load
                "push_next": Out(token()),  # compute -> store
                "run": In(RunControl()),
                "error": Out(ErrorReport()),
                "read": Out(ReadPort(cfg.axi_data_bits)),
                "inp": Out(ReadAddress(spec.inp_idx_bits, cfg.elem_bytes("inp") * 8)),
                "wgt": Out(ReadAddress(spec.wgt_idx_bits, cfg.elem_bytes("wgt") * 8)),
                "out": In(ReadAddress(spec.acc_idx_bits, cfg.elem_bytes("out") * 8)),
                "finished": Out(1),
                **(
                    {  # the requantization unit's reads, through the bank the store holds
                        "acc_store": In(ReadAddress(spec.acc_idx_bits, cfg.elem_bytes("acc") * 8)),
                        "bank_hold": In(BankHold()),
                    }
                    if cfg.requant_lanes
                    else {}
                ),
            }
        )
        self.tokens = {
            "pop_prev": self.pop_prev,
            "pop_next": self.pop_next,
            "push_prev": self.push_prev,
            "push_next": self.push_next,
        }

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        spec = isa_for(cfg)
        m.submodules.loader = loader = self.loader
        m.submodules.gemm = gemm = self.gemm
        m.submodules.alu = alu = self.alu
        units = {"gemm": gemm, "alu": alu}
        run = self.run
        wiring.connect(m, wiring.flipped(self.read), loader.read)
        wiring.connect(m, wiring.flipped(self.inp), gemm.inp)
        wiring.connect(m, wiring.flipped(self.wgt), gemm.wgt)
        m.d.comb += [loader.dram_base.eq(run.dram_base), loader.dram_size.eq(run.dram_size)]
        loads = loader.write
        uop_en = loads.en & (loader.mem == MemId.UOP)
        acc_en = loads.en & (loader.mem == MemId.ACC)

        # ---- micro-op memory: one read port per unit, written by LOAD UOP ----------------
        # NO_RW_CHECK: a read that meets LOAD UOP's write to its row is never used (the units
        # are idle through the load, and the word DECIDE reads is read after CHECK, after it);
        # yosys's old-data emulation put a LUT between each block RAM output and its register
        # (the 92.9 MHz route's uop_mem -> uop_gemm_q path, 5.8 ns of clock-to-out before it)
        m.submodules.uop_mem = uop_mem = Memory(
            shape=unsigned(cfg.uop_bytes * 8), depth=cfg.depth("uop"), init=[], attrs=NO_RW_CHECK
        )
        # LOAD UOP runs only while both units are idle, so its writes share the GEMM unit's
        # port: one named address signal lets yosys map a true dual-port BRAM (one copy, not
        # one per read port).
        uop_w = uop_mem.write_port()
        # an idle unit's port reads the micro-op CHECK names (the first of the instruction
        # being issued): PEEK waits for the unit to be idle, so the port's address is picked by
        # the unit's busy flip-flop alone, not by the issue FSM's state
        peek_addr = Signal(uop_w.addr.shape())
        peek_wait = Signal(range(SRAM_READ_LATENCY))  # PEEKED's cycles left
        uop_data = {}
        for n, unit in units.items():
            rp = uop_mem.read_port()
            addr = Signal(uop_w.addr.shape(), name=f"uop_{n}_addr")
            # SRAM_READ_LATENCY; a unit's stall holds the block RAM and its registers
            word = read_registers(m, rp.data, f"uop_{n}", en=rp.en)
            m.d.comb += [
                rp.en.eq(~unit.busy | unit.uop.en),
                rp.addr.eq(addr),
                addr.eq(Mux(unit.busy, unit.uop.addr, peek_addr)),
                unit.uop.data.eq(word),
            ]
            if n == "gemm":
                with m.If(uop_en):
                    m.d.comb += addr.eq(loads.addr)
                m.d.comb += [uop_w.addr.eq(addr), uop_w.data.eq(loads.data), uop_w.en.eq(uop_en)]
            uop_data[n] = uop_layout(spec)(word)

        # ---- accumulator and OUT banks ----------------------------------------------------
        bb = self.bank_bits
        held = Signal()  # the store holds bank_hold.bank (granted below, at issue)
        held_next = Signal()  # its value next cycle
        # a copy of `held` per bank, for the bank's read address alone (the 87.7 MHz route of
        # 1x8x8 with the unit: `held` into the banks' read addresses, 11.31 ns of fanned-out
        # routing); reset with it, so each copy equals it every cycle
        if cfg.requant_lanes:
            held_at = replicated(m, held_next & ~ResetSignal(), ACC_BANKS, "held_at", self.packed)
        acc_w_bits, out_w_bits = cfg.elem_bytes("acc") * 8, cfg.elem_bytes("out") * 8
        bank_rows = []  # each bank's read data
        for b in range(ACC_BANKS):
            # no NO_RW_CHECK here, though no read needs the memory's answer to a collision (a
            # bank is one unit's at a time, and the unit forwards its own writes): yosys's
            # old-data emulation registers the write, which the three writers' mux in front of
            # the port needs (without it, the 88.1 MHz route's worst paths were the compute
            # loader's write enable through that mux into the banks, 11.2-11.3 ns)
            acc = Memory(shape=unsigned(acc_w_bits), depth=cfg.acc_bank_rows, init=[])
            out = Memory(shape=unsigned(out_w_bits), depth=cfg.acc_bank_rows, init=[])
            m.submodules[f"acc{b}"], m.submodules[f"out{b}"] = acc, out
            aw, ow = acc.write_port(), out.write_port()
            # not transparent: each unit forwards its own recent writes (units.WriteHistory)
            ar, orp = acc.read_port(), out.read_port()
            ar_q = read_registers(m, ar.data, f"acc{b}")
            orp_q = read_registers(m, orp.data, f"out{b}")
            # writes: the GEMM unit, else the ALU unit, else LOAD ACC (when both are idle)
            writers = (
                (loads.addr, loads.data, acc_en),
                (alu.acc_write.addr, alu.acc_write.data, alu.acc_write.en),
                (gemm.acc_write.addr, gemm.acc_write.data, gemm.acc_write.en),
            )
            for addr, data, en in writers:
                with m.If(en & (addr[bb] == b)):
                    m.d.comb += [
                        aw.addr.eq(addr[:bb]),
                        aw.data.eq(data),
                        aw.en.eq(1),
                        ow.addr.eq(addr[:bb]),
                        ow.data.eq(narrow(cfg, data)),
                        ow.en.eq(1),
                    ]
            # reads: whichever unit reads this bank
            m.d.comb += ar.addr.eq(gemm.acc_read.addr[:bb])
            with m.If(alu.acc_read.en & (alu.acc_read.addr[bb] == b)):
                m.d.comb += ar.addr.eq(alu.acc_read.addr[:bb])
            if cfg.requant_lanes:  # the bank the store holds is the store's alone
                with m.If(held_at[b] & (self.bank_hold.bank == b)):
                    m.d.comb += ar.addr.eq(self.acc_store.addr[:bb])
            bank_rows.append(ar_q)
            m.d.comb += orp.addr.eq(self.out.addr[:bb])
            with m.If(delayed(m, self.out.addr[bb] == b, f"out_bank{b}_sel")):
                m.d.comb += self.out.data.eq(orp_q)

        if cfg.requant_lanes:
            m.d.comb += self.acc_store.data.eq(Mux(self.bank_hold.bank, bank_rows[1], bank_rows[0]))
        # each unit's read data from the bank its read went to: the select's last register
        # copied once per lane, each copy picking its lane (replicas.py)
        assert ACC_BANKS == 2
        lanes = cfg.batch * cfg.block_out
        for n, unit in units.items():
            sel = delayed(m, unit.acc_read.addr[bb], f"{n}_bank_sel", SRAM_READ_LATENCY - 1)
            copies = replicated(m, sel, lanes, f"{n}_bank_sel_{SRAM_READ_LATENCY}", self.packed)
            m.d.comb += unit.acc_read.data.eq(pick(copies, bank_rows[1], bank_rows[0]))

        # ---- issue ------------------------------------------------------------------------
        cmd = self.cmd
        insn_word, index = cmd.payload.insn, cmd.payload.index
        head = insn_union(spec)(insn_word)
        op = head.load.opcode
        cur = Signal(INSN_BITS)
        issue_start = {n: Signal(name=f"{n}_issue_start") for n in units}
        m.d.sync += [issue_start[n].eq(0) for n in units]  # a pulse: DECIDE sets it below
        cur_view = insn_union(spec)(cur)
        cur_index = Signal(INDEX_BITS)
        # per-unit in-flight bookkeeping: half written, pushes owed, issue order, index
        inflight = {
            n: {
                "half": Signal(name=f"{n}_half"),
                "push_prev": Signal(name=f"{n}_push_prev"),
                "push_next": Signal(name=f"{n}_push_next"),
                "index": Signal(INDEX_BITS, name=f"{n}_index"),
                "owed": Signal(name=f"{n}_owed"),  # completed, push not yet done
            }
            for n in ("gemm", "alu", "load")
        }
        # issue order, for push ordering: before[o, n] while o was issued before n (set at n's
        # issue: issue is in order, so n is then the youngest)
        pairs = [(o, n) for o in inflight for n in inflight if o != n]
        before = {(o, n): Signal(name=f"{o}_before_{n}") for o, n in pairs}

        def issued(n):
            return [before[o, n].eq(1) for o in inflight if o != n] + [
                before[n, o].eq(0) for o in inflight if o != n
            ]

        busy = {n: units[n].busy for n in units}
        busy["load"] = loader.busy
        blocked = Signal()  # a completed instruction still owes a push
        m.d.comb += blocked.eq(Cat(*(inflight[n]["owed"] for n in inflight)).any())

        error = self.error

        def fail(code, idx):
            m.d.sync += [error.code.eq(code), error.index.eq(idx), error.valid.eq(1)]

        pop = Signal()
        m.d.comb += [
            self.pop_prev.ready.eq(pop & cur_view.load.pop_prev),
            self.pop_next.ready.eq(pop & cur_view.load.pop_next),
        ]
        tokens_ok = (~cur_view.load.pop_prev | self.pop_prev.valid) & (
            ~cur_view.load.pop_next | self.pop_next.valid
        )
        target = Signal()  # 0: gemm, 1: alu
        # DEPTHWISE (configs with the depthwise mode) issues as a GEMM does, to the GEMM unit,
        # through the same states (its micro-op read is a wait: the model's issue cycles)
        unit_op = (op == Opcode.GEMM) | (op == Opcode.ALU)
        uop_range = None  # where CHECK checks the micro-op range: all but a DEPTHWISE
        if cfg.depthwise_window:
            unit_op |= op == Opcode.DEPTHWISE
            is_dw = cur_view.load.opcode == Opcode.DEPTHWISE
            uop_range = ~is_dw
        deciding = Signal()  # DECIDE issues this cycle, into deciding_half
        deciding_half = Signal()
        if cfg.requant_lanes:  # the store's hold, granted once no unit runs in the bank
            hold = self.bank_hold
            active = Cat(
                *(
                    (units[n].busy | issue_start[n]) & (inflight[n]["half"] == hold.bank)
                    for n in units
                )
            ).any()
            into = deciding & (deciding_half == hold.bank)  # the compute stage goes first
            m.d.comb += held_next.eq(hold.want & (held | (~active & ~into)))
            m.d.sync += held.eq(held_next)
            m.d.comb += hold.granted.eq(held)
        with m.FSM():
            with m.State("IDLE"), m.If(cmd.valid & ~run.halt & ~error.valid):
                m.d.comb += cmd.ready.eq(1)
                m.d.sync += [cur.eq(insn_word), cur_index.eq(index)]
                with m.If(unit_op):
                    m.d.sync += target.eq(op == Opcode.ALU)
                    m.next = "CHECK"
                with m.Elif(op == Opcode.FINISH):
                    m.next = "FINISH"
                with m.Else():
                    m.next = "LOAD"
            with m.State("CHECK"):  # micro-op range, then the first micro-op's half
                bgn, end = cur_view.gemm.uop_bgn, cur_view.gemm.uop_end
                bad_range = (bgn >= end) | (end > cfg.depth("uop"))
                with m.If(bad_range if uop_range is None else bad_range & uop_range):
                    fail(regs.ErrorCode.UOP_RANGE, cur_index)
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += peek_addr.eq(bgn)
                    m.next = "PEEK"
            with m.State("PEEK"):  # the unit's micro-op port is ours once the unit is idle
                own_free = Mux(
                    target,
                    ~alu.busy & ~inflight["alu"]["owed"],
                    ~gemm.busy & ~inflight["gemm"]["owed"],
                )
                with m.If(own_free):
                    m.d.sync += peek_wait.eq(SRAM_READ_LATENCY - 2)
                    m.next = "PEEKED"
            with m.State("PEEKED"):  # the word leaves the SRAM and its registers for DECIDE
                with m.If(peek_wait == 0):
                    m.next = "DECIDE"
                with m.Else():
                    m.d.sync += peek_wait.eq(peek_wait - 1)
            with m.State("DECIDE"):
                half = Signal()
                first_dst = Mux(target, uop_data["alu"].dst, uop_data["gemm"].dst)[bb]
                if cfg.depthwise_window:  # no micro-ops: its first output row's bank
                    first_dst = Mux(is_dw, cur_view.depthwise.acc_base[bb], first_dst)
                m.d.comb += half.eq(first_dst)
                other_busy = Mux(target, gemm.busy, alu.busy)
                other_half = Mux(target, inflight["gemm"]["half"], inflight["alu"]["half"])
                go = ~(other_busy & (other_half == half)) & tokens_ok & ~blocked
                if cfg.requant_lanes:  # not into the bank the store holds
                    go &= ~(held & (self.bank_hold.bank == half))
                    m.d.comb += [deciding.eq(go & ~run.halt), deciding_half.eq(half)]
                with m.If(go & ~run.halt):
                    m.d.comb += pop.eq(1)
                    for n, t in (("gemm", 0), ("alu", 1)):
                        with m.If(target == t):
                            m.d.sync += issue_start[n].eq(1)
                            m.d.sync += [
                                inflight[n]["half"].eq(half),
                                inflight[n]["push_prev"].eq(cur_view.load.push_prev),
                                inflight[n]["push_next"].eq(cur_view.load.push_next),
                                *issued(n),
                                inflight[n]["index"].eq(cur_index),
                            ]
                    m.next = "IDLE"
            with m.State("LOAD"):
                idle = ~gemm.busy & ~alu.busy & ~blocked
                with m.If(idle & tokens_ok & ~run.halt):
                    m.d.comb += [pop.eq(1), loader.start.eq(1)]
                    m.d.sync += [
                        inflight["load"]["push_prev"].eq(cur_view.load.push_prev),
                        inflight["load"]["push_next"].eq(cur_view.load.push_next),
                        *issued("load"),
                        inflight["load"]["index"].eq(cur_index),
                    ]
                    m.next = "LOADING"
            with m.State("LOADING"), m.If(loader.done):
                m.next = "IDLE"
            with m.State("FINISH"):
                idle = ~gemm.busy & ~alu.busy & ~blocked
                with m.If(idle & tokens_ok & ~run.halt):
                    m.d.comb += pop.eq(1)
                    m.next = "FINISHED"
            with m.State("FINISHED"):  # until the run has ended: then the next START's
                m.d.comb += self.finished.eq(1)
                with m.If(run.halt):
                    m.next = "IDLE"
        m.d.comb += loader.insn.eq(cur)
        m.d.comb += [gemm.insn.eq(cur), alu.insn.eq(cur)]
        # a unit starts the cycle after DECIDE, from a flip-flop (the issue decision's tokens,
        # halves and state never reach the loop sequencer's registers in one cycle); `cur`
        # still holds the instruction then (IDLE takes the next one a cycle later)
        m.d.comb += [units[n].start.eq(issue_start[n]) for n in units]

        # ---- completion: errors, then pushes in program order per queue --------------------
        done = {"gemm": gemm.done, "alu": alu.done, "load": loader.done}
        errs = {"gemm": gemm.error, "alu": alu.error, "load": loader.error != 0}
        codes = {
            "gemm": regs.ErrorCode.SRAM_RANGE,
            "alu": regs.ErrorCode.SRAM_RANGE,
            "load": loader.error,
        }
        for n in inflight:
            with m.If(done[n] & errs[n]):
                fail(codes[n], inflight[n]["index"])
            with m.Elif(done[n] & (inflight[n]["push_prev"] | inflight[n]["push_next"])):
                m.d.sync += inflight[n]["owed"].eq(1)
        # the units finish out of order, but each queue takes its tokens in program order: a
        # push waits for older instructions still running or owing a push to the same queue
        prev_pushes, next_pushes = [], []
        for n in inflight:
            me = inflight[n]
            older = []
            for o in inflight:
                if o == n:
                    continue
                you = inflight[o]
                same_queue = (me["push_prev"] & you["push_prev"]) | (
                    me["push_next"] & you["push_next"]
                )
                running = busy[o] & same_queue
                older.append((you["owed"] | running) & before[o, n])
            can = me["owed"] & ~Cat(*older).any()
            can &= (~me["push_prev"] | self.push_prev.ready) & (
                ~me["push_next"] | self.push_next.ready
            )
            with m.If(can):
                m.d.sync += me["owed"].eq(0)
            prev_pushes.append(can & me["push_prev"])
            next_pushes.append(can & me["push_next"])
        m.d.comb += [
            self.push_prev.valid.eq(Cat(*prev_pushes).any()),
            self.push_next.valid.eq(Cat(*next_pushes).any()),
        ]
        return m
