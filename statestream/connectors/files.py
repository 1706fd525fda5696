"""``FileSink``: each tuple a JSON line of a file, cut back to the restored checkpoint.

A :class:`~statestream.connectors.TwoPhaseSink` (see there for the
protocol). Each task writes its own file (``path``, with ``{task}``
replaced by the task index; with parallelism above 1 a path without
``{task}`` gets ``-<task>`` before its suffix). Beside it, ``<file>.guard``
holds ``{"txid": t, "length": n}``: the checkpoint this task last wrote and
the file's length once it had. A COMMIT appends the rows, flushes and
fsyncs, then replaces the guard file (written aside, fsynced, renamed): so
the guard never claims bytes that are not on disk, and whatever a crash
left past the guard's length is cut off when the sink opens (at ``prepare``,
so at every start and restore) and before each append.

Each line is a JSON object of the input's fields (or ``fields=``), encoded
by orjson (UTF-8, no ASCII escapes; a float NaN or infinity is ``null``, an
integer beyond 64 bits is refused as a :class:`~statestream.SinkError`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from .._components import OutputCollector, TopologyContext
from .._errors import SinkError
from .sink import TwoPhaseSink, input_fields

__all__ = ["FileSink"]


class FileSink(TwoPhaseSink):
    """Appends each input tuple as a JSON line to ``path`` at each checkpoint's COMMIT."""

    kind = "FileSink"

    def __init__(self, path: str | os.PathLike[str], fields: Sequence[str] | None = None) -> None:
        super().__init__()
        self.path_template = str(path)
        self.fields = list(fields) if fields is not None else None
        self._file: BinaryIO | None = None

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        if self.fields is None:
            self.fields = input_fields(context, f"FileSink {context.component_id!r}")
        template = self.path_template
        if "{task}" not in template and context.parallelism > 1:
            p = Path(template)
            template = str(p.with_name(f"{p.stem}-{{task}}{p.suffix}"))
        self.path = Path(template.replace("{task}", str(context.task_index)))
        self.url = str(self.path)
        self.guard_path = self.path.with_name(self.path.name + ".guard")
        super().prepare(conf, context, collector)

    def _read_guard(self) -> dict[str, Any] | None:
        try:
            g: dict[str, Any] = json.loads(self.guard_path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise SinkError(f"{self.what}: cannot read {self.guard_path}: {exc}") from exc
        return g

    def _guard(self) -> tuple[int, int]:
        """``(txid, length)`` of the guard; ``(-1, 0)`` before the first write. A guard
        of another lineage (TwoPhaseSink.guard_key) keeps its length, the bytes its
        lineage committed (or fewer: the file emptied or removed since, which is
        the user's to do after ``state clear``), but none of its txids counts as
        written for this one."""
        g = self._read_guard()
        if g is None:
            return -1, 0
        if g.get("lineage", "") == (self.lineage or ""):
            return int(g["txid"]), int(g["length"])
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        return -1, min(int(g["length"]), size)

    def earlier_guards(self) -> list[tuple[str, int]]:
        g = self._read_guard()
        if g is None or g.get("lineage", "") == (self.lineage or ""):
            return []
        return [(str(g.get("lineage", "")), int(g["txid"]))]

    def guard(self) -> int:
        """The txid this task last wrote (-1 if none)."""
        return self._guard()[0]

    def open_target(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "ab")  # noqa: SIM115 - kept open until close_target
        try:
            self._cut(f, self._guard()[1])
        except BaseException:
            f.close()
            raise
        self._file = f

    def _cut(self, f: BinaryIO, length: int) -> None:
        """Cut the file back to what the guard says was committed."""
        size = os.fstat(f.fileno()).st_size
        if size < length:
            raise SinkError(
                f"{self.what}: {self.path} holds {size} bytes but its guard says {length} "
                "were committed: the file was cut or replaced outside the run"
            )
        if size > length:
            f.truncate(length)
            os.fsync(f.fileno())

    def close_target(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            f.close()

    def write(self, rows: list[list[Any]], txid: int) -> bool:
        f = self._file
        assert f is not None
        done, length = self._guard()
        if done >= txid:
            return False  # written before: a COMMIT sent again
        self._cut(f, length)
        names = self.fields
        assert names is not None
        if set(map(len, rows)) != {len(names)}:
            bad = next(row for row in rows if len(row) != len(names))
            raise SinkError(f"{self.what}: row {bad!r} does not have the values of {names}")
        # Each row a dict and an orjson call, all in C loops (map), joined once:
        # the standard library's json.dumps in a Python loop cost ~31,000
        # instructions a row, this ~2,500 (bench/RESULTS-connectors.md).
        try:
            data = b"\n".join(map(orjson.dumps, map(dict, map(zip, repeat(names), rows))))
        except TypeError as exc:  # orjson.JSONEncodeError
            raise SinkError(f"{self.what}: a row cannot be written as JSON: {exc}") from exc
        data += b"\n"
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
        tmp = self.guard_path.with_name(self.guard_path.name + ".tmp")
        with open(tmp, "w") as g:
            json.dump({"txid": txid, "length": length + len(data), "lineage": self.lineage}, g)
            g.flush()
            os.fsync(g.fileno())
        os.replace(tmp, self.guard_path)
        return True
