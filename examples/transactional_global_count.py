"""The global count of a transactional topology (Storm's TransactionalGlobalCount).

    statestream run examples/transactional_global_count.py --until-idle \\
        --set global-count.database=statestream-data/count.db

``spout`` emits words in batches from three in-memory partitions (up to
``global-count.take`` per partition per batch); ``partial-count`` (a batch
bolt, 5 tasks, shuffle grouping) counts its share of each batch; ``sum`` (a
committer, global grouping) adds the partial counts and, in the commit
phase, strictly in transaction order, adds the batch's count to the one
stored in a SQLite file, with the txid beside it: a replayed transaction
whose txid is already stored is skipped, so the count is exact however often
the topology crashes and restarts (with a durable state provider, which
keeps the coordinator's state: ``--config config/local.yaml``).

With ``global-count.opaque=true`` the spout is opaque (every emission starts
where the previous batch ended, so a replay may differ) and the store keeps
``(count, prev_count, txid)``: a txid already stored is recomputed from
``prev_count``.

Keys under ``global-count.``:

* ``global-count.database``: the SQLite file of the count (default:
  ``statestream-data/transactional_global_count.db`` in the working directory,
  beside ``config/local.yaml``'s store; the run says where at its start)
* ``global-count.tuples``: how many words the spout emits in all (default 30000)
* ``global-count.take``: words per partition per batch (default 1000)
* ``global-count.opaque``: use the opaque spout (default false)
"""

from __future__ import annotations

import functools
import sqlite3
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statestream import (
    BatchBolt,
    Committer,
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
    OutputFieldsDeclarer,
    PartitionedTransactionalSpout,
    Topology,
    TopologyContext,
    TransactionalBolt,
    TransactionalTopologyBuilder,
    Tuple,
)

PREFIX = "global-count"
PARTITIONS = 3
KEY = "GLOBAL-COUNT"

_connections: dict[str, sqlite3.Connection] = {}
_said: set[Path] = set()


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the file to WAL once. The switch needs the file to itself and is not
    retried by sqlite's busy timeout, so tasks opening it at once (Spark's
    workers) retry here; WAL then stays with the file."""
    for attempt in range(50):
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError:
            if attempt == 49:
                raise
            time.sleep(0.1)


def database_path(conf: Mapping[str, Any]) -> Path:
    return Path(conf.get(f"{PREFIX}.database") or "statestream-data/transactional_global_count.db")


def say_where(conf: Mapping[str, Any]) -> None:
    """Tell the user, once per process, where the result goes (the run prints no result)."""
    path = database_path(conf).resolve()
    if path not in _said:
        _said.add(path)
        print(f"{PREFIX}: the count goes to {path} (sqlite table counts)", file=sys.stderr)


def database(conf: Mapping[str, Any]) -> sqlite3.Connection:
    """The process's connection to the count store (one per file)."""
    path = str(database_path(conf))
    conn = _connections.get(path)
    if conn is None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = _connections[path] = sqlite3.connect(path, isolation_level=None)
        _use_wal(conn)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS counts "
            "(key TEXT PRIMARY KEY, count INTEGER NOT NULL, prev INTEGER, txid INTEGER NOT NULL)"
        )
    return conn


@functools.cache
def words(n: int) -> dict[int, list[list[str]]]:
    """``n`` words spread over the partitions (the same words for the same ``n``)."""
    data: dict[int, list[list[str]]] = {p: [] for p in range(PARTITIONS)}
    for i in range(n):
        data[i % PARTITIONS].append([f"w{(i * 7919) % 1000}"])
    return data


class WordSpout(PartitionedTransactionalSpout):
    """A memory spout made from the config: transactional, or opaque with ``.opaque``."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["tx", "word"])

    def _spout(self, conf: Mapping[str, Any]) -> Any:
        data = words(int(conf.get(f"{PREFIX}.tuples") or 30000))
        take = int(conf.get(f"{PREFIX}.take") or 1000)
        kind = (
            OpaqueMemoryTransactionalSpout
            if conf.get(f"{PREFIX}.opaque")
            else MemoryTransactionalSpout
        )
        return kind(data, ["word"], take)

    def get_coordinator(self, conf: Mapping[str, Any], context: TopologyContext) -> Any:
        return self._spout(conf).get_coordinator(conf, context)

    def get_emitter(self, conf: Mapping[str, Any], context: TopologyContext) -> Any:
        return self._spout(conf).get_emitter(conf, context)


class BatchCount(BatchBolt[Any]):
    """Counts the tuples of the batch this task got; emits ``(id, count)`` at the end."""

    count = 0

    def execute(self, tuple: Tuple) -> None:
        self.count += 1

    def finish_batch(self) -> None:
        self.collector.emit([self.id, self.count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["id", "count"])


class UpdateGlobalCount(TransactionalBolt, Committer):
    """Sums the partial counts; in the commit phase adds them to the stored count."""

    total = 0

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any, id: Any
    ) -> None:
        super().prepare(conf, context, collector, id)
        say_where(conf)  # a global grouping: one task

    def execute(self, tuple: Tuple) -> None:
        self.total += tuple.values[1]

    def finish_batch(self) -> None:
        conn = database(self.conf)
        txid = self.id.transaction_id
        opaque = bool(self.conf.get(f"{PREFIX}.opaque"))
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(
                "SELECT count, prev, txid FROM counts WHERE key = ?", (KEY,)
            ).fetchone()
            count, prev, stored_txid = row if row is not None else (0, 0, 0)
            if stored_txid != txid:
                prev, count = count, count + self.total
            elif opaque:
                count = prev + self.total  # the replay may differ: recompute from before it
            # else: a transactional replay of a stored txid: already counted
            conn.execute(
                "INSERT OR REPLACE INTO counts (key, count, prev, txid) VALUES (?, ?, ?, ?)",
                (KEY, count, prev, txid),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.collector.emit([self.id, count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["id", "sum"])


def topology() -> Topology:
    builder = TransactionalTopologyBuilder(PREFIX, "spout", WordSpout(), PARTITIONS)
    builder.set_bolt("partial-count", BatchCount(), 5).shuffle_grouping("spout")
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial-count")
    return builder.build()
