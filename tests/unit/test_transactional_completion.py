"""Count-based batch completion and the executors' routing (pure parts of transactional topologies)."""

from __future__ import annotations

from typing import Any

import pytest

from statestream import stable_hash
from statestream._errors import TupleError
from statestream._transactional.completion import BatchTracker, LogicalRoute, Router


def test_complete_once_every_upstream_task_reported_and_every_tuple_arrived() -> None:
    t = BatchTracker(upstream=3)
    t.report(10, 2)
    t.data()
    t.report(11, 0)
    assert not t.complete  # task 12 has not reported
    t.report(12, 1)
    assert not t.complete  # 3 reported, 1 arrived
    t.data()
    t.data()
    assert t.complete


def test_data_may_arrive_after_the_counts() -> None:
    t = BatchTracker(upstream=1)
    t.report(5, 2)
    assert not t.complete
    t.data()
    t.data()
    assert t.complete


def test_an_empty_batch_completes_on_zero_counts() -> None:
    t = BatchTracker(upstream=2)
    t.report(1, 0)
    t.report(2, 0)
    assert t.complete and t.expected == 0


def test_a_committer_also_needs_the_commit_tuple() -> None:
    t = BatchTracker(upstream=1, needs_commit=True)
    t.report(1, 0)
    assert not t.complete
    t.commit()
    assert t.complete


def test_a_repeated_report_counts_once() -> None:
    t = BatchTracker(upstream=2)
    t.report(1, 3)
    t.report(1, 3)
    assert len(t.reported) == 1 and t.expected == 3


def test_a_tracker_needs_an_upstream() -> None:
    with pytest.raises(ValueError, match="at least one upstream"):
        BatchTracker(upstream=0)


TASKS = {"a": [3, 4, 5], "b": [7], "c": [8, 9]}


def router(routes: dict[str, list[LogicalRoute]], start: int = 0) -> Router:
    return Router("src", routes, TASKS, start)


def test_groupings_pick_the_tasks_the_runtime_would() -> None:
    r = router(
        {
            "default": [
                LogicalRoute("a", "fields", (1,)),
                LogicalRoute("b", "global"),
                LogicalRoute("c", "all"),
            ],
            "pairs": [LogicalRoute("a", "fields", (1, 2))],
        }
    )
    values: list[Any] = ["attempt", "word", 7]
    assert r.targets("default", values) == [[3, 4, 5][stable_hash("word") % 3], 7, 8, 9]
    assert r.targets("pairs", values) == [[3, 4, 5][stable_hash(["word", 7]) % 3]]
    assert r.downstream_tasks() == [3, 4, 5, 7, 8, 9]


def test_shuffle_goes_round_robin_from_the_task_index() -> None:
    r = router({"default": [LogicalRoute("a", "shuffle")]}, start=1)
    assert [r.targets("default", [0])[0] for _ in range(4)] == [4, 5, 3, 4]


def test_custom_grouping_is_asked() -> None:
    class Last:
        def choose_tasks(self, values: Any, n: int) -> list[int]:
            return [n - 1]

    r = router({"default": [LogicalRoute("a", "custom", custom=Last())]})
    assert r.targets("default", [0]) == [5]


def test_direct_subscribers_get_only_direct_emits() -> None:
    r = router({"d": [LogicalRoute("c", "direct")]})
    assert r.targets("d", [0]) == []
    r.check_direct("d", 9)
    with pytest.raises(TupleError, match=r"emit_direct to task 3 .*subscribed tasks: \[8, 9\]"):
        r.check_direct("d", 3)
