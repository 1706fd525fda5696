"""What the Spark driver says while a run gets going: one line per step.

A Spark run is quiet for its first seconds: the JVM and the SparkContext
start, then the first batch's job starts Spark's Python workers, and until
that batch commits every count of the table is 0 (Spark has no per-tuple
acking: a batch's tuples are counted, and acked, when it commits). So the
driver says each step once, on the ``statestream.status`` logger at INFO,
which ``statestream run`` prints as ``statestream: ...`` lines (above the
live table on a terminal). The lines are made here, by pure functions of
what the driver knows, so that their wording is tested apart from Spark.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from ..._text import count

__all__ = [
    "STATUS",
    "batch_committed",
    "batch_started",
    "session_started",
    "session_starting",
    "transaction_committed",
    "transactions_started",
    "waiting_for_input",
]

#: The run's steps, for people: shown by ``statestream run``, silent by default
#: elsewhere (INFO, below logging's default WARNING).
STATUS = logging.getLogger("statestream.status")


def session_starting(master: str) -> str:
    """Before the SparkSession is built (the JVM starts: seconds)."""
    return f"starting Spark (master {master}): the JVM and the SparkContext..."


def session_started(master: str, cores: int, seconds: float) -> str:
    """Once it is built: how long it took and the parallelism batches are cut for."""
    return f"Spark started in {seconds:.1f} s (master {master}, {count(cores, 'core')})"


def batch_started(
    records: Mapping[tuple[str, int], Sequence[object]],
    ranges: Sequence[tuple[str, int, object]],
    end_of_input: bool = False,
) -> str:
    """The first batch, read and about to run as one Spark job: what it holds.

    ``records``: per spout task, what the driver read from it; ``ranges``: the
    ranges of partitioned sources its executors will read.
    """
    if end_of_input:
        return "first batch: the end of the input, for the windowed bolts; running it on Spark"
    read = sum(len(r) for r in records.values())
    parts = []
    if read or not ranges:
        tasks = sum(1 for r in records.values() if r)
        parts.append(f"{count(read, 'tuple')} read on the driver from {count(tasks, 'spout task')}")
    if ranges:
        tasks = len({(cid, index) for cid, index, _ in ranges})
        parts.append(
            f"{count(len(ranges), 'range')} of {count(tasks, 'partitioned spout task')} "
            "for the executors to read"
        )
    return (
        f"first batch: {' and '.join(parts)}; running it as a Spark job (the first job "
        "also starts Spark's Python workers)"
    )


def waiting_for_input(interval: float) -> str:
    """The first read found nothing (a broker's stream still empty, say)."""
    return f"no input yet: the spouts are read again every {interval:g} s"


def batch_committed(seconds: float, tuples: int) -> str:
    """The first batch committed: how long it took, and what the counts mean from now on."""
    return (
        f"first batch committed in {seconds:.1f} s ({count(tuples, 'spout tuple')} acked); "
        "the counts grow one batch at a time: a batch's tuples are acked when it commits"
    )


def transactions_started(batches: int, first: int, last: int, pending: int) -> str:
    """A transactional topology's first processing job: its batches, and how later
    jobs grow (``pending``: ``topology.max.spout.pending``; see
    :func:`.transactional.job_size`)."""
    txids = f"txid {first}" if first == last else f"txids {first}-{last}"
    return (
        f"first transactions: {count(batches, 'batch', 'batches')} ({txids}) processed as one "
        "Spark job (the first job also starts Spark's Python workers); each later job takes "
        f"up to twice as many as the last, at most {pending:,} (topology.max.spout.pending)"
    )


def transaction_committed(txid: int, seconds: float) -> str:
    """The first transaction committed, ``seconds`` after its processing job started."""
    return (
        f"first transaction committed in {seconds:.1f} s (txid {txid}); each commits in a "
        "Spark job of its own, in txid order"
    )
