"""Word counts and bucketed counts, updated transactionally (Storm's TransactionalWords).

    statestream run examples/transactional_words.py --until-idle \\
        --set words.database=statestream-data/words.db

``spout`` emits words in batches from three in-memory partitions. ``count``
(a committer, fields grouping on ``word``, 4 tasks) counts each word of the
batch and, in the commit phase, adds the counts to a SQLite table storing
``(count, prev_count, txid)`` per word; it emits ``(id, word, count,
prev_count)``. ``bucketize`` (a basic bolt) turns a word's move from one
bucket of ``BUCKET_SIZE`` counts to the next into ``+1`` for the new bucket
and ``-1`` for the old one; ``buckets`` (a committer, fields grouping on
``bucket``) keeps how many words have a count in each bucket. Both
committers run in the commit phase in transaction order, ``buckets`` after
``count`` has finished the transaction, and each skips a txid it already
stored, so the tables are exact after any crash and restart (with a
durable state provider: ``--config config/local.yaml``).

With ``words.opaque=true`` the spout is opaque and a txid already stored is
recomputed from ``prev_count`` (each tuple is in exactly one committed
batch, but a replayed batch may differ from the first emission).

Keys under ``words.``:

* ``words.database``: the SQLite file (default
  ``statestream-data/transactional_words.db`` in the working directory, beside
  ``config/local.yaml``'s store; the run says where at its start)
* ``words.tuples``: how many words the spout emits (default 30000)
* ``words.take``: words per partition per batch (default 1000)
* ``words.opaque``: use the opaque spout (default false)
"""

from __future__ import annotations

import functools
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statestream import (
    BasicBolt,
    BasicOutputCollector,
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

PREFIX = "words"
PARTITIONS = 3
BUCKET_SIZE = 10

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
    return Path(conf.get(f"{PREFIX}.database") or "statestream-data/transactional_words.db")


def say_where(conf: Mapping[str, Any]) -> None:
    """Tell the user, once per process, where the result goes (the run prints no result)."""
    path = database_path(conf).resolve()
    if path not in _said:
        _said.add(path)
        print(f"{PREFIX}: the counts go to {path} (sqlite tables words, buckets)", file=sys.stderr)


def database(conf: Mapping[str, Any]) -> sqlite3.Connection:
    """The process's connection to the two tables (one per file)."""
    path = str(database_path(conf))
    conn = _connections.get(path)
    if conn is None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = _connections[path] = sqlite3.connect(path, isolation_level=None)
        _use_wal(conn)
        for table in ("words", "buckets"):
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (key PRIMARY KEY, count INTEGER NOT NULL, "
                "prev INTEGER, txid INTEGER NOT NULL)"
            )
    return conn


@functools.cache
def words(n: int) -> dict[int, list[list[str]]]:
    """``n`` words over the partitions, skewed so the counts spread over many buckets."""
    data: dict[int, list[list[str]]] = {p: [] for p in range(PARTITIONS)}
    for i in range(n):
        data[i % PARTITIONS].append([f"w{(i * 7919) % (1 + i % 400)}"])
    return data


def update(
    conn: sqlite3.Connection, table: str, deltas: Mapping[Any, int], txid: int, opaque: bool
) -> dict[Any, tuple[int, int | None]]:
    """Add ``deltas`` to ``table`` for transaction ``txid`` in one SQLite transaction.

    A key whose stored txid is ``txid`` was already updated by this
    transaction: kept as it is (transactional) or recomputed from its
    previous value (opaque). Returns each key's ``(count, prev_count)``.
    """
    out: dict[Any, tuple[int, int | None]] = {}
    conn.execute("BEGIN IMMEDIATE")
    try:
        for key, delta in deltas.items():
            row = conn.execute(
                f"SELECT count, prev, txid FROM {table} WHERE key = ?", (key,)
            ).fetchone()
            if row is None:
                count, prev = delta, None
            elif row[2] != txid:
                count, prev = row[0] + delta, row[0]
            elif opaque:
                count, prev = (row[1] or 0) + delta, row[1]
            else:
                count, prev = row[0], row[1]
            conn.execute(
                f"INSERT OR REPLACE INTO {table} (key, count, prev, txid) VALUES (?, ?, ?, ?)",
                (key, count, prev, txid),
            )
            out[key] = (count, prev)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return out


class WordSpout(PartitionedTransactionalSpout):
    """A memory spout made from the config: transactional, or opaque with ``words.opaque``."""

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


class KeyedCountUpdater(TransactionalBolt, Committer):
    """Counts words in the batch; in the commit phase adds them to the ``words`` table."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any, id: Any
    ) -> None:
        super().prepare(conf, context, collector, id)
        self.counts: Counter[str] = Counter()
        if context.task_index == 0:  # one task: one line, whatever the processes
            say_where(conf)

    def execute(self, tuple: Tuple) -> None:
        self.counts[tuple.values[1]] += 1

    def finish_batch(self) -> None:
        opaque = bool(self.conf.get(f"{PREFIX}.opaque"))
        stored = update(database(self.conf), "words", self.counts, self.id.transaction_id, opaque)
        for word, (count, prev) in stored.items():
            self.collector.emit([self.id, word, count, prev])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["id", "key", "count", "prev_count"])


class Bucketize(BasicBolt):
    """A word moving to another bucket: ``+1`` for the new bucket, ``-1`` for the old one."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        attempt, _, count, prev = tuple.values
        bucket = count // BUCKET_SIZE
        if prev is None:
            collector.emit([attempt, bucket, 1])
        elif bucket != prev // BUCKET_SIZE:
            collector.emit([attempt, bucket, 1])
            collector.emit([attempt, prev // BUCKET_SIZE, -1])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["attempt", "bucket", "delta"])


class BucketCountUpdater(TransactionalBolt, Committer):
    """Sums the deltas per bucket; in the commit phase adds them to the ``buckets`` table."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any, id: Any
    ) -> None:
        super().prepare(conf, context, collector, id)
        self.deltas: Counter[int] = Counter()

    def execute(self, tuple: Tuple) -> None:
        self.deltas[tuple.values[1]] += tuple.values[2]

    def finish_batch(self) -> None:
        opaque = bool(self.conf.get(f"{PREFIX}.opaque"))
        update(database(self.conf), "buckets", self.deltas, self.id.transaction_id, opaque)


def topology() -> Topology:
    builder = TransactionalTopologyBuilder(PREFIX, "spout", WordSpout(), PARTITIONS)
    builder.set_bolt("count", KeyedCountUpdater(), 4).fields_grouping("spout", ["word"])
    builder.set_bolt("bucketize", Bucketize()).none_grouping("count")
    builder.set_bolt("buckets", BucketCountUpdater(), 2).fields_grouping("bucketize", ["bucket"])
    return builder.build()
