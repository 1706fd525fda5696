"""examples/stream_to_postgres.py with its two sinks fused into the count task: a bound.

Run by ``bench/bench_connectors.py --part bound``; not a pattern for users. The
count task (examples/wordcount.py's ``WordCount``) holds the example's two
``PostgresSink`` instances itself and hands each ``(word, count)`` row straight to
their buffers, so no tuple, queue or held ack carries a row to a sink. That is
the most any chaining of the sinks into the task that feeds them (Flink's
operator chains) could save, so this topology's rate bounds what that runtime
work could give the example. The sinks' checkpoint work is theirs, driven from the
count's own hooks: each stages in the count's state under its own key prefix,
and writes its target with its own guard table (two sinks in one task would
share a guard row otherwise).

``FUSED_MODE`` picks what the sinks do with their rows:

* ``keep``: everything ``TwoPhaseSink`` does (durable stage, then the target
  write at COMMIT, overlapped with the next checkpoint as on the local runtime);
* ``mem``: the stage kept in memory and never put in the state store (NOT
  exactly-once across a crash: what the durable stage costs is ``keep`` minus
  this), both tables written;
* ``mem-updates`` / ``mem-totals``: as ``mem``, only the append table
  (``word_updates``) or only the upsert table (``word_totals``) written;
* ``drop``: the rows buffered, then dropped at each PREPARE: no stage, no write;
* ``copy``: as ``keep``, but the append table written by ``COPY ... (FORMAT csv)``
  from the stage decoded and formatted by Python's csv module, not by one
  ``INSERT ... SELECT`` over the stage's JSON text: less of PostgreSQL's CPU, more
  of this process's (csv cannot tell None from "": not a general path).
"""

from __future__ import annotations

import csv
import io
import os
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import stream_to_postgres as example
from wordcount import WordCount

from statestream import (
    KeyValueState,
    OutputCollector,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
    connectors,
)
from statestream.connectors.sink import last_of_each

MODES = ("keep", "mem", "mem-updates", "mem-totals", "drop", "copy")


class _Prefixed:
    """The count's state as one sink sees it: its keys under a prefix of its own."""

    def __init__(self, state: KeyValueState, prefix: str) -> None:
        self.state, self.prefix = state, prefix

    def get(self, key: str, default: Any = None) -> Any:
        return self.state.get(self.prefix + key, default)

    def put(self, key: str, value: Any) -> None:
        self.state.put(self.prefix + key, value)


class _MemStage(connectors.PostgresSink):
    """A PostgresSink whose stage lives in memory only (modes ``mem*`` and ``drop``)."""

    writes = True  # False: the rows are staged in memory, never written
    _mem: dict[str, Any] | None = None

    def pre_prepare(self, txid: int) -> None:
        self._settle()
        rows, self._buffer = self._buffer, []
        self._mem = None
        if not rows or MODE == "drop":
            return
        if self.keep_last_by is not None:
            rows = last_of_each(rows, self.keep_last_by)
        self._mem = {"txid": txid, "json": orjson.dumps(rows).decode()}

    def post_commit(self, txid: int, state: KeyValueState) -> None:
        self._settle()
        stage, self._mem = self._mem, None
        if stage is None or not self.writes:
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1)
        self._writing = self._writer.submit(self._write_stage, stage)


class _CsvCopy(connectors.PostgresSink):
    """A PostgresSink (append) writing its stage by COPY in CSV (mode ``copy``)."""

    def write_json(self, rows_json: str, txid: int) -> bool:
        rows = orjson.loads(rows_json)

        def put() -> None:
            text = io.StringIO()
            csv.writer(text).writerows(rows)
            sql = self._sql
            statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
                self._ident(self.table), self._columns_sql(self.columns)
            )
            with self._conn.cursor().copy(statement) as copy:
                copy.write(text.getvalue())

        return self._write(txid, put, lambda: rows)


MODE = os.environ.get("FUSED_MODE", "keep")
if MODE not in MODES:
    raise SystemExit(f"FUSED_MODE={MODE!r}: use one of {', '.join(MODES)}")


class FusedCount(WordCount):
    """The example's count with its two sinks inside (module docstring)."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        dsn = os.environ.get("POSTGRES_DSN", example.DEFAULT_DSN)
        self.sinks = [
            connectors.PostgresSink(example.UPDATES, ["word", "count"], dsn=dsn),
            connectors.PostgresSink(
                example.TOTALS,
                ["word", "count"],
                dsn=dsn,
                mode="upsert",
                key=["word"],
                guard_table="statestream_sink_guard_totals",
            ),
        ]
        if MODE == "copy":
            self.sinks[0].__class__ = _CsvCopy
        for i, sink in enumerate(self.sinks):
            if MODE not in ("keep", "copy"):
                sink.__class__ = _MemStage
                sink.writes = MODE in ("mem", ("mem-updates", "mem-totals")[i])  # type: ignore[attr-defined]
            sink.overlap_commits()
            sink.prepare(conf, context, collector)

    def _rebind(self) -> None:
        # A sink's buffer is a new list after each PREPARE and ROLLBACK.
        self.to_updates = self.sinks[0]._buffer.append
        self.to_totals = self.sinks[1]._buffer.append

    def init_state(self, state: KeyValueState) -> None:
        super().init_state(state)
        for i, sink in enumerate(self.sinks):
            sink.init_state(_Prefixed(state, f"$fused{i}."))  # type: ignore[arg-type]
        self._rebind()

    def execute(self, tuple: Tuple) -> None:
        word = tuple.values[0]
        count = self.state.get(word, 0) + 1
        self.state.put(word, count)
        row = [word, count]
        self.to_updates(row)
        self.to_totals(row)
        self.collector.ack(tuple)

    def pre_prepare(self, txid: int) -> None:
        for sink in self.sinks:
            sink.pre_prepare(txid)
        self._rebind()

    def pre_rollback(self) -> None:
        for sink in self.sinks:
            sink.pre_rollback()
        self._rebind()

    def post_commit(self, txid: int, state: KeyValueState) -> None:
        for i, sink in enumerate(self.sinks):
            sink.post_commit(txid, _Prefixed(state, f"$fused{i}."))  # type: ignore[arg-type]

    def cleanup(self) -> None:
        for sink in self.sinks:
            sink.cleanup()
        super().cleanup()


def topology() -> Topology:
    url = os.environ.get("LINES_URL", example.DEFAULT_URL)
    stream = os.environ.get("LINES_STREAM", "lines")
    builder = TopologyBuilder("stream-to-postgres")
    builder.set_spout("lines", example.source(url, stream))
    builder.set_bolt("split", example.Split(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", FusedCount(), 2).fields_grouping("split", ["word"])
    return builder.build()
