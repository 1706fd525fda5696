"""Spark as a source: a topology fed by a streaming DataFrame (:meth:`FeedDriver.feed`).

The topology's spout is a :class:`DataFrameSpout`; ``foreachBatch`` makes
each micro-batch one transaction, txid = Spark's batch id (Spark's offset log
replays an unfinished batch with the same id and data, so no spout positions
are stored), a replayed batch at or below the committed txid skipped, and a
refusal to start when the store's txid is ahead of the checkpoint's offset
log. Its phases go through the same coordinator and record as any batch.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Sequence
from functools import partial
from typing import Any

from ..._components import (
    Spout,
)
from ..._errors import ConfigError, RuntimeFailure
from ..._results import RunResult
from .batches import BatchDriver
from .config import check_provider
from .executor import rows_partition
from .shared import root_cause
from .spouts import Batch

log = logging.getLogger("statestream")


class DataFrameSpout(Spout):
    """A spout that Spark feeds: each micro-batch of a streaming DataFrame is one transaction.

    Declares ``fields`` (column names of the DataFrame) on the default stream.
    Use it in place of a spout and start the topology with
    :meth:`SparkRuntime.feed`; the spout is never opened or polled.
    """

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = list(fields)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(self.fields)

    def next_tuple(self) -> None:
        raise RuntimeFailure(
            "DataFrameSpout is fed by Spark: start the topology with SparkRuntime.feed()"
        )


def spark_checkpoint_batches(location: str) -> tuple[int, int]:
    """``(last batch with offsets, last committed batch)`` in a Structured Streaming
    checkpoint on a local file system, -1 for none."""
    root = location.removeprefix("file://")

    def last(sub: str) -> int:
        try:
            names = os.listdir(os.path.join(root, sub))
        except FileNotFoundError:
            return -1
        return max((int(n) for n in names if n.isdigit()), default=-1)

    return last("offsets"), last("commits")


def same_batch(batch: Batch) -> Batch:
    """A Spark-fed batch after a rollback: the same source again (Spark's data is fixed)."""
    return batch


class FeedDriver(BatchDriver):
    """The driver's ``feed()``: one transaction per micro-batch of a streaming DataFrame."""

    def feed(
        self,
        df: Any,
        *,
        checkpoint: str,
        available_now: bool = True,
        timeout: float | None = None,
    ) -> RunResult:
        """Run the topology over a streaming DataFrame: one micro-batch, one transaction.

        The topology's one spout must be a :class:`DataFrameSpout` whose fields
        are columns of ``df``. The transaction id is Spark's batch id, and
        ``checkpoint`` is the query's checkpoint location (a local path), whose
        offset log makes Spark replay an unfinished batch with the same id and
        data. A batch whose id is at or below the provider's committed txid
        was applied already (the driver died after committing it, before
        Spark logged it) and is skipped. Refuses to start (ConfigError) when
        the provider's txid is ahead of what the checkpoint has planned, e.g.
        a lost or foreign checkpoint: every batch would be skipped.

        ``available_now``: process what is available, then stop; otherwise run
        until :meth:`stop` or ``timeout`` seconds.
        """
        if self.transactional is not None:
            raise ConfigError(
                f"topology {self.topology.name!r} is transactional: its coordinator decides the "
                "batches, so it runs with run(), not feed()"
            )
        if len(self.spouts) != 1 or self.fed != [self.spouts[0].id]:
            raise ConfigError(
                "feed() needs a topology whose only spout is a DataFrameSpout (found: "
                + ", ".join(f"{s.id!r} ({type(s.obj).__name__})" for s in self.spouts)
                + ")"
            )
        cid = self.spouts[0].id
        columns = self.spouts[0].obj.fields  # type: ignore[union-attr]
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise ConfigError(
                f"DataFrameSpout {cid!r} declares the fields {columns}, but the DataFrame has "
                f"no column {missing[0]!r} (columns: {df.columns})"
            )
        self._spark = df.sparkSession
        check_provider(self.config, self.master)
        start_time = time.monotonic()
        planned, _ = spark_checkpoint_batches(checkpoint)
        self._claim_store()
        try:
            stored = self._load().state
            if stored.txid > planned:
                raise ConfigError(
                    f"the state provider has transaction {stored} but the Spark checkpoint "
                    f"{checkpoint!r} has planned batches only up to {planned}: the checkpoint "
                    "was lost or belongs to another query, and its batches would be skipped as "
                    "already applied; restore the checkpoint, or start over with a fresh store"
                )
            sc = self._spark.sparkContext
            token = uuid.uuid4().hex
            payload = self._payload(sc, self.exactly_once)
        except BaseException:
            self._close_provider()
            raise
        query = None
        try:
            # Spark's offset log replays batches: no spout positions are stored.
            self._start_checkpoints(positions_needed=False)

            def on_batch(batch_df: Any, batch_id: int) -> None:
                state = self.checkpoints.state
                if batch_id <= state.txid:
                    log.warning("batch %d was committed already; skipping its replay", batch_id)
                    self._counters["skipped"] = self._counters.get("skipped", 0) + 1
                    return
                if batch_id != state.txid + 1:
                    raise RuntimeFailure(
                        f"Spark runs batch {batch_id} but the state provider last committed "
                        f"{state.txid}: batches {state.txid + 1}..{batch_id - 1} are missing "
                        "from the state; was the store reset under a running checkpoint?"
                    )
                rows = batch_df.select(*columns).rdd
                source = rows.mapPartitionsWithIndex(partial(rows_partition, token, payload, cid))
                self._transaction(sc, token, payload, Batch(source=source), same_batch)

            writer = (
                df.writeStream.foreachBatch(on_batch)
                .option("checkpointLocation", checkpoint)
                .queryName(f"statestream-{self.topology.name}-{token[:8]}")
            )
            writer = writer.trigger(availableNow=True) if available_now else writer
            query = writer.start()
            if available_now:
                query.awaitTermination(timeout)
            else:
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._stop and query.isActive:
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                    query.awaitTermination(0.2)
        except ConfigError:
            raise
        except Exception as exc:  # StreamingQueryException and py4j errors
            raise RuntimeFailure(
                f"the streaming query failed; restart it on the same checkpoint to replay the "
                f"unfinished batch: {str(exc).splitlines()[0][:500]} ({root_cause(exc)})"
            ) from exc
        finally:
            try:
                if query is not None and query.isActive:
                    query.stop()
                payload.unpersist()
            finally:
                self._close_provider()
        return self._result(start_time, "fed")
