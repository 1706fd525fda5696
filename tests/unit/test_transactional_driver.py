"""What a driver that plays the coordinator reads: the layout of a built topology, settle()."""

from __future__ import annotations

import sys
from pathlib import Path

from statestream import TopologyBuilder, TransactionAttempt
from statestream._transactional.driver import layout, settle

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import transactional_global_count as global_count
import transactional_words as words_example


def test_layout_splits_the_phases_in_topological_order() -> None:
    gc = layout(global_count.topology())
    assert gc is not None
    assert (gc.emitter, gc.processing, gc.commit, gc.committers) == (
        "spout",
        ("spout", "partial-count"),
        ("sum",),
        ("sum",),
    )
    words = layout(words_example.topology())
    assert words is not None
    assert words.processing == ("spout",)
    assert words.commit == ("count", "bucketize", "buckets")
    assert words.committers == ("count", "buckets")


def test_an_ordinary_topology_has_no_layout() -> None:
    from statestream.testing import ListSpout

    builder = TopologyBuilder("plain")
    builder.set_spout("s", ListSpout([[1]], ["x"]))
    assert layout(builder.build()) is None


def test_settle_needs_every_task_to_have_finished_that_very_attempt() -> None:
    a1, a2 = TransactionAttempt(1, 7), TransactionAttempt(2, 8)
    tasks = [("e", 0), ("b", 0), ("b", 1)]
    reports = {("e", 0): {1: 7, 2: 8}, ("b", 0): {1: 7, 2: 8}, ("b", 1): {1: 7, 2: 5}}
    assert settle([a1, a2], tasks, reports) == {1: True, 2: False}  # an older attempt of 2
    assert settle([a1], tasks, {("e", 0): {1: 7}, ("b", 0): {1: 7}}) == {1: False}  # no report
    assert settle([a1], tasks, {t: {} for t in tasks}) == {1: False}
