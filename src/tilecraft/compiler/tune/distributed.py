"""Measuring on a Dask cluster (`distributed`): a `LocalCluster` of worker processes by
default, or a fleet at `scheduler` where each board's worker advertises `--resources FPGA=1`
(with `fpga`, each measurement takes one, so a board runs one at a time). A tuner batch is
split into one chunk per worker (Dask's per-task overhead is about 8 ms: cheap cycle-model
measurements go in chunks). Work travels as plain data (the config, operator, epilogue and
schedules as JSON) to an importable function, never as closures. A chunk whose worker dies is
resubmitted once, and its records say so. With `timeout_s`, a chunk not back within that many
seconds per schedule is recorded as timed out (its task cancelled), and the run goes on."""

from __future__ import annotations

from tilecraft.compiler.tune.measure import MEASURERS, Result, measurer
from tilecraft.compiler.tune.task import Task
from tilecraft.errors import TilecraftError
from tilecraft.jobs import dask_client
from tilecraft.serial import from_json, to_json

RETRIED = "retried: the first worker died"
TIMED_OUT = "timed out"


def measure_chunk(
    measure: str,
    config: dict,
    op: dict,
    epilogue: dict,
    fold,
    schedules: list[dict],
    options: dict | None = None,
) -> list[tuple]:
    """On a worker: (cycles, error, seconds) of each schedule (plain data in and out)."""
    from tilecraft.hw.config import HwConfig
    from tilecraft.ops import Conv2d, ConvSchedule, Dense, Epilogue

    kind = Dense if op.get("kind") == "dense" else Conv2d
    task = Task(
        HwConfig.from_dict(config), from_json(kind, op), from_json(Epilogue, epilogue), fold
    )
    meter = measurer(measure, **(options or {}))
    out = []
    for s in schedules:
        r = meter.measure(task, from_json(ConvSchedule, s))
        out.append((r.cycles, r.error, r.seconds))
    return out


class DaskMeasurer:
    """`measure_many` on a cluster; `name` is the wrapped measurer's (the records' tool)."""

    def __init__(
        self,
        measure: str = "sim",
        workers: int = 2,
        scheduler: str | None = None,
        fpga: bool = False,
        timeout_s: float | None = None,
        options: dict | None = None,
    ):
        try:
            import dask
            from distributed import Client, LocalCluster
        except ImportError:
            raise TilecraftError(
                "distributed measurement needs dask: pip install 'tilecraft[tune]'"
            ) from None
        if timeout_s is not None and not timeout_s > 0:
            raise TilecraftError(f"a measurement timeout must be positive, not {timeout_s}")
        self.measure_name = measure
        self.options = options or {}
        self.timeout_s = timeout_s
        if measure not in MEASURERS:
            raise TilecraftError(f"unknown measurer {measure!r}; valid: {', '.join(MEASURERS)}")
        self.name = MEASURERS[measure].name  # made on the workers (a board's has its bitstream)
        self.resources = {"FPGA": 1} if fpga else None
        self._cluster = None
        if scheduler:
            self.client = dask_client(scheduler)
        else:
            if workers < 1:
                raise TilecraftError(f"--workers must be at least 1, not {workers}")
            with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
                self._cluster = LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",  # a free port: at None it takes 8787, or warns
                    scheduler_kwargs={"dashboard": False},
                    host="127.0.0.1",
                )
            self.client = Client(self._cluster)
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})) or workers)

    def measure(self, task: Task, schedule) -> Result:
        return self.measure_many(task, [schedule])[0]

    def measure_many(self, task: Task, schedules: list) -> list[Result]:
        plain = (
            self.measure_name,
            task.config.to_dict(),
            to_json(task.op),
            to_json(task.epilogue),
            task.mapped.folded,
        )
        size = -(-len(schedules) // self.workers)
        chunks = [schedules[i : i + size] for i in range(0, len(schedules), size)]
        futures = [self._submit(plain, chunk) for chunk in chunks]
        results = []
        for chunk, future in zip(chunks, futures):
            note = ""
            limit = None if self.timeout_s is None else self.timeout_s * len(chunk)
            try:
                rows = future.result(timeout=limit)
            except TimeoutError:
                future.cancel()
                rows = [(None, f"{TIMED_OUT} after {self.timeout_s:g} s", limit)] * len(chunk)
            except Exception as exc:  # the worker died (KilledWorker), or the link did
                if type(exc).__name__ not in ("KilledWorker", "CommClosedError", "OSError"):
                    raise
                note = RETRIED
                try:
                    rows = self._submit(plain, chunk).result()
                except Exception as again:
                    rows = [(None, f"the worker died twice: {type(again).__name__}", 0.0)] * len(
                        chunk
                    )
            results += [Result(c, e, s, note) for c, e, s in rows]
        return results

    def _submit(self, plain, chunk):
        return self.client.submit(
            measure_chunk,
            *plain,
            [to_json(s) for s in chunk],
            self.options,
            pure=False,
            resources=self.resources,
        )

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()
