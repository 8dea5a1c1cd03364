"""A live RTL session: the generated Verilog under Verilator, answering register reads and
writes one at a time (`server.py` is the simulator's side), for hosts that drive the
accelerator through its registers as on a board (`sim.pynq_board` with `accelerator="rtl"`).

The simulator runs in a thread of this process (cocotb's runner waits for it there) and talks
over a Unix socket; every wait on it has a timeout, so a simulator that fails to start or
dies surfaces as a `DeviceError` with its log, never as a hang.
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import numpy as np

from tilecraft.errors import DeviceError
from tilecraft.hw.config import HwConfig
from tilecraft.progress import task
from tilecraft.sim.rtl.build import DRAM_BYTES, build, tail
from tilecraft.sim.rtl.device import read_hex, write_hex

START_SECONDS = 120.0  # for the simulator process to start and connect
REPLY_SECONDS = 600.0  # for one command (a run of millions of cycles included)
JOB_NUMBERS = (1 << 16) - 1  # hex files are numbered 1.. on the DRAM model's 16-bit job port


class RtlSession:
    """`with RtlSession(cfg) as rtl: rtl.read(offset); rtl.write(offset, value); ...`"""

    def __init__(self, config: HwConfig, *, latency: int | None = None):
        self.config = config
        self.latency = config.dram_latency if latency is None else latency
        self._jobs = 0
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    # ---- lifetime --------------------------------------------------------------------------
    def __enter__(self) -> RtlSession:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        runner, out = build(self.config)
        self._dir = Path(tempfile.mkdtemp(dir=out, prefix="session-"))
        self._log = self._dir / "run.log"
        sock_dir = Path(tempfile.mkdtemp(prefix="tc-"))  # short: socket paths are <108 bytes
        self._sock_dir = sock_dir
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(sock_dir / "s"))
        listener.listen(1)
        listener.settimeout(1.0)

        def simulate():
            try:
                runner.test(
                    hdl_toplevel="tb_top",
                    test_module="tilecraft.sim.rtl.server",
                    build_dir=out / "sim",
                    test_dir=self._dir,
                    plusargs=[f"+DRAM_IN={self._dir / 'in'}", f"+DRAM_OUT={self._dir / 'out'}"],
                    extra_env={
                        "TILECRAFT_RTL_SOCKET": str(sock_dir / "s"),
                        "TILECRAFT_RTL_LATENCY": str(self.latency),
                    },
                    log_file=self._log,
                )
            except BaseException as exc:  # reported by the next command that waits
                self._failure = exc

        self._thread = threading.Thread(target=simulate, name="rtl-session", daemon=True)
        with task(f"verilator: a live session on the {self.config.tag} model"):
            self._thread.start()
            waited = 0.0
            while True:
                try:
                    conn, _ = listener.accept()
                    break
                except TimeoutError:
                    waited += 1.0
                    died = not self._thread.is_alive()
                    if died or waited > START_SECONDS:
                        listener.close()
                        log = tail(self._log)
                        shutil.rmtree(sock_dir, ignore_errors=True)
                        shutil.rmtree(self._dir, ignore_errors=True)
                        self._thread = None
                        why = (
                            f"exited before it connected ({self._failure})"
                            if died
                            else f"did not connect within {START_SECONDS:.0f} s (it may still "
                            f"be starting: is the machine overloaded?)"
                        )
                        raise DeviceError(f"the RTL simulator {why}:\n{log}") from None
        listener.close()
        conn.settimeout(REPLY_SECONDS)
        self._conn = conn
        self._stream = conn.makefile("rw", encoding="utf-8")

    def close(self) -> None:
        if self._thread is None:
            return
        try:
            if self._thread.is_alive():
                self._command({"op": "quit"})
        except DeviceError:
            pass
        finally:
            self._stream.close()  # the socket closes only once its stream has
            self._conn.close()
            self._thread.join(timeout=30)
            self._thread = None
            shutil.rmtree(self._sock_dir, ignore_errors=True)
            shutil.rmtree(self._dir, ignore_errors=True)

    # ---- commands --------------------------------------------------------------------------
    def _command(self, cmd: dict) -> dict:
        if self._thread is None:
            raise DeviceError("the RTL session is closed")
        try:
            self._stream.write(json.dumps(cmd) + "\n")
            self._stream.flush()
            line = self._stream.readline()
        except (TimeoutError, OSError) as exc:
            line, why = "", str(exc)
        else:
            why = "the simulator closed the connection"
        if not line:
            raise DeviceError(
                f"the RTL simulator stopped answering ({why}) at {cmd['op']!r}"
                + (f" ({self._failure})" if self._failure else "")
                + f":\n{tail(self._log)}"
            )
        reply = json.loads(line)
        if "error" in reply:
            raise DeviceError(f"the RTL session refused {cmd!r}: {reply['error']}")
        return reply

    def read(self, offset: int) -> int:
        """One AXI4-Lite read of the register at byte `offset`."""
        return int(self._command({"op": "read", "offset": offset})["value"])

    def write(self, offset: int, value: int) -> None:
        """One AXI4-Lite write."""
        self._command({"op": "write", "offset": offset, "value": value & 0xFFFFFFFF})

    def reset(self) -> None:
        self._command({"op": "reset"})

    def load(self, base: int, image: np.ndarray) -> None:
        """Place `image` (bytes) at physical address `base` of the DRAM model (zeroing the rest)."""
        if image.size > DRAM_BYTES:
            raise DeviceError(
                f"{image.size:,} bytes of DRAM do not fit the RTL bench's {DRAM_BYTES:,}-byte "
                f"DRAM model"
            )
        self._jobs = self._jobs % JOB_NUMBERS + 1  # the DRAM model's job port is 16 bits
        path = self._dir / f"in.{self._jobs}.hex"
        write_hex(path, image, self.config.axi_bytes)
        self._command({"op": "load", "base": base, "job": self._jobs})
        path.unlink()

    def run(self, max_cycles: int) -> bool:
        """Clock the model until STATUS says DONE (True) or `max_cycles` pass (False)."""
        return bool(self._command({"op": "run", "max_cycles": max_cycles})["done"])

    def dump(self, nbytes: int) -> np.ndarray:
        """The first `nbytes` of the DRAM model (from the base of the last `load`)."""
        beats = -(-nbytes // self.config.axi_bytes)
        self._command({"op": "dump", "job": self._jobs, "beats": beats})
        path = self._dir / f"out.{self._jobs}.hex"
        image = read_hex(path, nbytes, self.config.axi_bytes)
        path.unlink()
        return image
