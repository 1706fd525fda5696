"""The two-phase sink conformance suite: every sink, the same scripted checkpoints.

Each test drives a sink through the checkpoint actions as a runtime does
(:func:`statestream._stateful.apply_action`), against the real target, and
reads back what the target holds. A crash is a sink instance and a state
provider abandoned; the restart is new ones over the same store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docs_pages import DOCS, section_code
from sink_cases import FIELDS, SinkCase, case_fixture, open_task, store

from statestream._checkpoint import Action
from statestream._stateful import apply_action
from statestream.connectors.sink import TwoPhaseSink
from statestream.testing import make_tuple

pytestmark = pytest.mark.redis


@pytest.fixture(
    params=["postgres", "redis", "file", pytest.param("kafka", marks=pytest.mark.kafka)]
)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SinkCase]:
    yield from case_fixture(request, tmp_path)


def feed(sink: TwoPhaseSink, rows: list[list[Any]]) -> None:
    for row in rows:
        sink.execute(make_tuple(row, FIELDS))


A = [["a", 1], ["b", 1], ["a", 2]]
B = [["c", 1], ["a", 3]]


def test_a_checkpoint_writes_its_rows_once(case: SinkCase, tmp_path: Path) -> None:
    sink, state = open_task(case, store(tmp_path))
    apply_action(sink, state, Action.INITSTATE, -1, False)
    feed(sink, A)
    apply_action(sink, state, Action.PREPARE, 0, True)
    assert case.rows() == []  # staged, not written, until COMMIT
    apply_action(sink, state, Action.COMMIT, 0, True)
    assert case.rows() == sorted(A)
    # A COMMIT sent again, to this instance and to a new one: the guard holds it.
    apply_action(sink, state, Action.COMMIT, 0, True)
    again, state2 = open_task(case, store(tmp_path))
    apply_action(again, state2, Action.COMMIT, 0, True)
    assert case.rows() == sorted(A)
    feed(sink, B)
    apply_action(sink, state, Action.PREPARE, 1, True)
    apply_action(sink, state, Action.COMMIT, 1, True)
    assert case.rows() == sorted(A + B)
    # A checkpoint with nothing received writes nothing and keeps the guard.
    apply_action(sink, state, Action.PREPARE, 2, True)
    apply_action(sink, state, Action.COMMIT, 2, True)
    assert case.rows() == sorted(A + B)


def test_a_crash_between_the_state_commit_and_the_target_write(
    case: SinkCase, tmp_path: Path
) -> None:
    sink, state = open_task(case, store(tmp_path))
    apply_action(sink, state, Action.INITSTATE, -1, False)
    feed(sink, A)
    apply_action(sink, state, Action.PREPARE, 0, True)
    state.commit(0)  # the state committed, then the process died: no post_commit
    assert case.rows() == []
    # Recovery from COMMITTING(0) re-sends COMMIT(0) to a new task, before INITSTATE.
    sink, state = open_task(case, store(tmp_path))
    apply_action(sink, state, Action.COMMIT, 0, True)
    assert case.rows() == sorted(A)
    apply_action(sink, state, Action.INITSTATE, 0, False)
    feed(sink, B)
    apply_action(sink, state, Action.PREPARE, 1, True)
    apply_action(sink, state, Action.COMMIT, 1, True)
    # A crash after the target write but before the COMMIT was acked: again.
    sink, state = open_task(case, store(tmp_path))
    apply_action(sink, state, Action.COMMIT, 1, True)
    apply_action(sink, state, Action.INITSTATE, 1, False)
    assert case.rows() == sorted(A + B)


def test_rollback_drops_the_stage(case: SinkCase, tmp_path: Path) -> None:
    sink, state = open_task(case, store(tmp_path))
    apply_action(sink, state, Action.INITSTATE, -1, False)
    feed(sink, A)
    apply_action(sink, state, Action.PREPARE, 0, True)
    apply_action(sink, state, Action.ROLLBACK, 0, True)
    apply_action(sink, state, Action.INITSTATE, -1, False)
    assert case.rows() == []
    feed(sink, B)  # what is replayed after the rollback
    apply_action(sink, state, Action.PREPARE, 0, True)
    apply_action(sink, state, Action.COMMIT, 0, True)
    assert case.rows() == sorted(B)
    # A crash after PREPARE: recovery rolls back; nothing of it is written.
    feed(sink, A)
    apply_action(sink, state, Action.PREPARE, 1, True)
    sink, state = open_task(case, store(tmp_path))
    apply_action(sink, state, Action.ROLLBACK, 1, True)
    apply_action(sink, state, Action.INITSTATE, 0, False)
    apply_action(sink, state, Action.PREPARE, 1, True)
    apply_action(sink, state, Action.COMMIT, 1, True)
    assert case.rows() == sorted(B)


def test_tasks_of_one_sink_keep_their_own_guards(case: SinkCase, tmp_path: Path) -> None:
    provider = store(tmp_path)
    one, s1 = open_task(case, provider, task=0)
    two, s2 = open_task(case, provider, task=1)
    for sink, state, rows in ((one, s1, A), (two, s2, B)):
        apply_action(sink, state, Action.INITSTATE, -1, False)
        feed(sink, rows)
        apply_action(sink, state, Action.PREPARE, 0, True)
    apply_action(one, s1, Action.COMMIT, 0, True)
    apply_action(two, s2, Action.COMMIT, 0, True)
    assert case.rows() == sorted(A + B)


def test_guard_says_the_last_txid_written_per_task(case: SinkCase, tmp_path: Path) -> None:
    provider = store(tmp_path)
    sink, state = open_task(case, provider)
    apply_action(sink, state, Action.INITSTATE, -1, False)
    feed(sink, A)
    apply_action(sink, state, Action.PREPARE, 0, True)
    apply_action(sink, state, Action.COMMIT, 0, True)
    assert sink.guard() == 0  # type: ignore[attr-defined]
    feed(sink, B)
    apply_action(sink, state, Action.PREPARE, 1, True)
    apply_action(sink, state, Action.COMMIT, 1, True)
    apply_action(sink, state, Action.PREPARE, 2, True)  # nothing received: no write
    apply_action(sink, state, Action.COMMIT, 2, True)
    assert sink.guard() == 1  # type: ignore[attr-defined]
    other, _ = open_task(case, provider, task=1)  # another task's guard is its own
    other.open_target()
    try:
        assert other.guard() == -1  # type: ignore[attr-defined]
    finally:
        other.close_target()


# -- the sink guide's own sink, run as written ------------------------------------------
def _readme_code(marker: str) -> str:
    """The Python block of docs/guides/connectors.md marked ``% doc-test: <marker>``."""
    return section_code(DOCS / "guides" / "connectors.md", marker)


def test_the_readme_sink_example_writes_every_update_once(tmp_path: Path) -> None:
    import sqlite3
    from collections import Counter

    from word_bolts import Count, Split

    from statestream import FileSpout, TopologyBuilder, run

    namespace: dict[str, Any] = {}
    exec(compile(_readme_code("exec own_sink"), "docs/guides/connectors.md", "exec"), namespace)
    lines = [f"w{i % 5} w{i % 3} same" for i in range(300)]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.db"
    b = TopologyBuilder("readme-sink")
    b.set_spout("lines", FileSpout(str(tmp_path / "in.txt")))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    b.set_bolt("out", namespace["SqliteSink"](str(out)), 2).fields_grouping("count", ["word"])
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    run(b.build(), conf, until_idle=True)
    run(b.build(), conf, until_idle=True)  # again: read to the end, nothing written twice
    db = sqlite3.connect(out)
    rows = sorted(db.execute("SELECT word, n FROM out").fetchall())
    db.close()
    counts = Counter(w for line in lines for w in line.split())
    assert rows == sorted((w, k) for w, n in counts.items() for k in range(1, n + 1))
