"""What a Spark run says and counts while it starts, decided by pure functions (no
SparkSession here): the lines the driver says on ``statestream.status`` for each
step, and the spout tuples a committed batch acks without a message id on the
driver (ranges read on the executors, a fed DataFrame's rows). The lines in a
real run: tests/spark/test_spark_cli.py; the counts: test_spark_partitioned.py and
test_spark_source.py."""

from __future__ import annotations

import pytest

from statestream.runtime.spark.status import (
    batch_committed,
    batch_started,
    session_started,
    session_starting,
    transaction_committed,
    transactions_started,
    waiting_for_input,
)
from statestream.runtime.spark.tally import acked_by_commit

A, B = ("lines", 0), ("lines", 1)


@pytest.mark.parametrize(
    ("emitted", "on_driver", "acked"),
    [
        ({}, {}, {}),  # an empty batch
        ({A: 40}, {A: 40}, {}),  # all read on the driver: acked by message id
        ({A: 120}, {}, {A: 120}),  # all read on the executors (ranges), or fed rows
        ({A: 61, B: 30}, {A: 1}, {A: 60, B: 30}),  # a replay on the driver, ranges besides
        ({A: 0}, {A: 0}, {}),  # a task with nothing in the batch
        ({A: 3}, {A: 5}, {}),  # never negative
    ],
)
def test_what_a_commit_acks_beyond_the_drivers_message_ids(
    emitted: dict[tuple[str, int], int],
    on_driver: dict[tuple[str, int], int],
    acked: dict[tuple[str, int], int],
) -> None:
    assert acked_by_commit(emitted, on_driver) == acked


@pytest.mark.parametrize(
    ("records", "ranges", "end", "said"),
    [
        (
            {A: [1] * 40},
            [],
            False,
            "first batch: 40 tuples read on the driver from 1 spout task; running it as a "
            "Spark job (the first job also starts Spark's Python workers)",
        ),
        (
            {A: [1], B: []},
            [("lines", 0, "r0"), ("lines", 0, "r1"), ("lines", 1, "r2")],
            False,
            "first batch: 1 tuple read on the driver from 1 spout task and 3 ranges of 2 "
            "partitioned spout tasks for the executors to read; running it as a Spark job "
            "(the first job also starts Spark's Python workers)",
        ),
        (
            {A: [], B: []},
            [("lines", 1, "r0")],
            False,
            "first batch: 1 range of 1 partitioned spout task for the executors to read; "
            "running it as a Spark job (the first job also starts Spark's Python workers)",
        ),
        (
            {A: []},
            [],
            True,
            "first batch: the end of the input, for the windowed bolts; running it on Spark",
        ),
    ],
)
def test_the_first_batch_is_said_with_what_it_holds(
    records: dict[tuple[str, int], list[int]],
    ranges: list[tuple[str, int, object]],
    end: bool,
    said: str,
) -> None:
    assert batch_started(records, ranges, end) == said


def test_the_session_the_wait_and_the_commit_are_said() -> None:
    assert session_starting("local[2]") == (
        "starting Spark (master local[2]): the JVM and the SparkContext..."
    )
    assert session_started("local[2]", 1, 6.04) == (
        "Spark started in 6.0 s (master local[2], 1 core)"
    )
    assert waiting_for_input(1.0) == "no input yet: the spouts are read again every 1 s"
    assert batch_committed(12.34, 1) == (
        "first batch committed in 12.3 s (1 spout tuple acked); the counts grow one batch "
        "at a time: a batch's tuples are acked when it commits"
    )


def test_a_transactional_run_says_its_first_job_and_commit() -> None:
    assert transactions_started(1, 1, 1, 10_000) == (
        "first transactions: 1 batch (txid 1) processed as one Spark job (the first job "
        "also starts Spark's Python workers); each later job takes up to twice as many as "
        "the last, at most 10,000 (topology.max.spout.pending)"
    )
    assert transactions_started(3, 4, 6, 2).startswith(
        "first transactions: 3 batches (txids 4-6) processed as one Spark job "
    )
    assert transaction_committed(3, 2.0) == (
        "first transaction committed in 2.0 s (txid 3); each commits in a Spark job of "
        "its own, in txid order"
    )
