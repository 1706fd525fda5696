"""Spark as a source: a topology fed by a streaming DataFrame (:meth:`Feed.run`).

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
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from ..._components import Spout
from ..._errors import ConfigError, RuntimeFailure
from ..plan import RuntimePlan
from .batches import BatchRunner
from .checkpoints import DriverCheckpoints
from .config import check_provider
from .executor import rows_partition
from .jobs import BatchJobs
from .sessions import SparkSessions
from .shared import root_cause
from .spouts import Batch
from .tally import RunControl, RunTally

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


class Feed:
    """The driver's ``feed()``: one transaction per micro-batch of a streaming DataFrame.

    Built with the plan, the run's Spark sessions (the DataFrame's is adopted),
    checkpoints, batch runner and jobs, the tally (``skipped``), the control (a
    stop ends a query that is not ``available_now``), and ``payload(sc)``, the
    broadcast of a run.
    """

    def __init__(
        self,
        plan: RuntimePlan,
        sessions: SparkSessions,
        checkpoints: DriverCheckpoints,
        runner: BatchRunner,
        jobs: BatchJobs,
        tally: RunTally,
        control: RunControl,
        payload: Callable[[Any], Any],
    ) -> None:
        self._plan = plan
        self._sessions = sessions
        self._checkpoints = checkpoints
        self._runner = runner
        self._jobs = jobs
        self._tally = tally
        self._control = control
        self._payload = payload

    def columns(self, df: Any, *, transactional: bool) -> tuple[str, list[str]]:
        """The fed spout and its fields, all columns of ``df``; ConfigError for a
        topology ``feed()`` cannot run (transactional, or another spout than one
        :class:`DataFrameSpout`) or a column ``df`` lacks."""
        topology = self._plan.topology
        spouts = self._plan.data_spouts
        if transactional:
            raise ConfigError(
                f"topology {topology.name!r} is transactional: its coordinator decides the "
                "batches, so it runs with run(), not feed()"
            )
        if len(spouts) != 1 or not isinstance(spouts[0].obj, DataFrameSpout):
            raise ConfigError(
                "feed() needs a topology whose only spout is a DataFrameSpout (found: "
                + ", ".join(f"{s.id!r} ({type(s.obj).__name__})" for s in spouts)
                + ")"
            )
        cid = spouts[0].id
        columns = spouts[0].obj.fields
        missing = [c for c in columns if c not in df.columns]
        if missing:
            raise ConfigError(
                f"DataFrameSpout {cid!r} declares the fields {columns}, but the DataFrame has "
                f"no column {missing[0]!r} (columns: {df.columns})"
            )
        return cid, columns

    def run(
        self,
        df: Any,
        *,
        checkpoint: str,
        available_now: bool = True,
        timeout: float | None = None,
        transactional: bool = False,
    ) -> None:
        """Run the topology over a streaming DataFrame: one micro-batch, one transaction
        (see :meth:`SparkRuntime.feed`). ``timeout`` is the streaming query's, in
        seconds that Spark waits (the query runs in Spark's own threads)."""
        cid, columns = self.columns(df, transactional=transactional)
        self._sessions.adopt(df.sparkSession)
        check_provider(self._plan.config, self._sessions.master)
        planned, _ = spark_checkpoint_batches(checkpoint)
        self._checkpoints.claim()
        try:
            stored = self._checkpoints.load().state
            if stored.txid > planned:
                raise ConfigError(
                    f"the state provider has transaction {stored} but the Spark checkpoint "
                    f"{checkpoint!r} has planned batches only up to {planned}: the checkpoint "
                    "was lost or belongs to another query, and its batches would be skipped as "
                    "already applied; restore the checkpoint, or start over with a fresh store"
                )
            sc = df.sparkSession.sparkContext
            token = uuid.uuid4().hex
            payload = self._payload(sc)
        except BaseException:
            self._checkpoints.close()
            raise
        query = None
        try:
            # Spark's offset log replays batches: no spout positions are stored.
            self._checkpoints.start(positions_needed=False)
            job = self._jobs.for_run(sc, token, payload)

            def on_batch(batch_df: Any, batch_id: int) -> None:
                state = self._checkpoints.driver.state
                if batch_id <= state.txid:
                    log.warning("batch %d was committed already; skipping its replay", batch_id)
                    self._tally.count("skipped")
                    return
                if batch_id != state.txid + 1:
                    raise RuntimeFailure(
                        f"Spark runs batch {batch_id} but the state provider last committed "
                        f"{state.txid}: batches {state.txid + 1}..{batch_id - 1} are missing "
                        "from the state; was the store reset under a running checkpoint?"
                    )
                rows = batch_df.select(*columns).rdd
                source = rows.mapPartitionsWithIndex(partial(rows_partition, token, payload, cid))
                self._runner.run(Batch(source=source), same_batch, job)

            writer = (
                df.writeStream.foreachBatch(on_batch)
                .option("checkpointLocation", checkpoint)
                .queryName(f"statestream-{self._plan.topology.name}-{token[:8]}")
            )
            writer = writer.trigger(availableNow=True) if available_now else writer
            query = writer.start()
            if available_now:
                query.awaitTermination(timeout)
            else:
                # Spark's time: the query's threads are Spark's, not on the runtime's clock.
                deadline = None if timeout is None else time.monotonic() + timeout
                while not self._control.stopped and query.isActive:
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
                self._checkpoints.close()
