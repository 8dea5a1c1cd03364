"""Tuning records: one JSON line per measurement (layer, config digest, schedule, cycles or the
error, the measurer and tool version, seconds), appended and flushed as each measurement ends,
so a killed run loses nothing and resumes without measuring anything twice.

Reading a records file keeps what applies: a truncated last line (a run killed mid-write) is
skipped with a warning; records of another config or another tool version are ignored and
counted; a malformed line elsewhere is an error naming its line."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from tilecraft import __version__
from tilecraft.errors import ArtifactError, PathError
from tilecraft.files import check_writable

FORMAT = 1


def tool_version(measurer: str) -> str:
    """What produced a measurement: the measurer and the tilecraft version (its cycle model)."""
    return f"{measurer}/tilecraft-{__version__}"


@dataclass(frozen=True)
class Record:
    task: str  # the layer (`Task.key`)
    config: str  # the config's digest
    schedule: str  # `task.schedule_key`
    cycles: int | None
    error: str | None
    tool: str
    seconds: float
    note: str = ""  # e.g. "retried on another worker"

    @property
    def ok(self) -> bool:
        return self.cycles is not None


def applied_records(path: str | Path, config: str) -> Records:
    """A records file given to apply what tuning found (`compile --records`): it must exist,
    where `tune --records` creates the file it names."""
    if not Path(path).is_file():
        raise PathError(
            f"records file {str(path)!r} does not exist (records are written by "
            f"tilecraft tune ... --records FILE)"
        )
    return Records(path, config, None)


class Records:
    """A records file for one config and tool (None: any tool, to apply what was found): what
    it already holds, and `append`."""

    def __init__(self, path: str | Path, config: str, tool: str | None):
        self.path, self.config, self.tool = Path(path), config, tool
        self.other_config = self.other_tool = self.truncated = 0
        self.records: list[Record] = []
        if self.path.exists():
            self._read()
        else:
            check_writable(self.path, "records")

    def _read(self) -> None:
        try:
            text = self.path.read_text()
        except OSError as exc:
            raise ArtifactError(f"cannot read records {str(self.path)!r}: {exc}") from None
        lines = text.split("\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            last = number == len(lines)  # no newline after it: the write may be cut short
            try:
                data = json.loads(line)
                if data.pop("format", None) != FORMAT:
                    raise ValueError("not a tuning record of format 1")
                record = Record(**data)
            except (ValueError, TypeError) as exc:
                if last:  # killed mid-write: dropped at the next append, and measured again
                    self.truncated = len(line.encode())
                    warnings.warn(
                        f"{self.path}: the last line is cut short and was skipped", stacklevel=2
                    )
                    continue
                raise ArtifactError(f"{self.path}:{number}: not a tuning record ({exc})") from None
            self._unterminated = last
            if record.config != self.config:
                self.other_config += 1
            elif self.tool is not None and record.tool != self.tool:
                self.other_tool += 1
            else:
                self.records.append(record)

    def append(self, record: Record) -> None:
        """Write `record` as one line and flush it to disk before returning."""
        if self.tool is None:
            raise ArtifactError("records opened for any tool are for reading")
        line = json.dumps({"format": FORMAT, **asdict(record)}, sort_keys=True)
        if self.truncated:  # drop the cut-short line first
            with open(self.path, "r+b") as f:
                f.truncate(max(0, f.seek(0, os.SEEK_END) - self.truncated))
            self.truncated = 0
        with open(self.path, "a") as f:
            if getattr(self, "_unterminated", False):
                f.write("\n")
                self._unterminated = False
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.records.append(record)

    def of(self, task_key: str) -> dict[str, Record]:
        """The task's records by schedule (the last one of each)."""
        return {r.schedule: r for r in self.records if r.task == task_key}

    def best(self, task_key: str) -> Record | None:
        done = [r for r in self.of(task_key).values() if r.ok]
        return min(done, key=lambda r: r.cycles) if done else None
