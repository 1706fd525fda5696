"""Poison tuples on the local runtime (issue 12): retries with backoff on the runtime's
clock, the dead-letter file, a run that always ends, exactly-once included.

On a fake clock. Tests that take ``local_runner`` run in one process and on two
worker processes (``topology.workers: 2``, each worker on its own copy of the
clock; the spout is task 0, in worker 0, the bolt it feeds in worker 1): what
they record goes to :class:`~runtime_harness.Records`. The word count over the
command line, on sqlite and redis, and the SIGKILL tests are in
tests/cli/test_cli_poison.py.
"""

from __future__ import annotations

import collections
import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest
from runtime_harness import Records, Runner, records

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    FailedException,
    FileSpout,
    KeyValueState,
    OutputFieldsDeclarer,
    StatefulBolt,
    TopologyBuilder,
    Tuple,
)
from statestream.runtime.local import LocalRuntime
from statestream.testing import FakeClock, ListSpout, RewindableListSpout

POISON = "poison"


def now_of(component: Any) -> float:
    return float(component.context.clock.monotonic())


class TimedSpout(ListSpout):
    """Logs ("emit" | "ack" | "fail" | "dead", index, clock time) to
    ``Records("events")``, which every process appends to."""

    def next_tuple(self) -> None:
        if self._replay:
            i = self._replay[0]
        elif self._next < len(self.items):
            i = self._next
        else:
            return
        Records("events").append(("emit", i, now_of(self)))
        super().next_tuple()

    def ack(self, msg_id: Any) -> None:
        Records("events").append(("ack", msg_id, now_of(self)))
        super().ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        Records("events").append(("fail", msg_id, now_of(self)))
        super().fail(msg_id)

    def dead_lettered(self, msg_id: Any) -> None:
        Records("events").append(("dead", msg_id, now_of(self)))
        super().dead_lettered(msg_id)


class TimedRewindableSpout(RewindableListSpout, TimedSpout):
    """A RewindableListSpout that logs as TimedSpout does."""


def times(kind: str, msg_id: int) -> list[float]:
    return [t for k, i, t in records("events") if k == kind and i == msg_id]


def told(kind: str) -> list[Any]:
    """The message ids the spout was told of (``kind``: "ack", "fail", "dead"), in order."""
    return [i for k, i, _ in records("events") if k == kind]


class Picky(Bolt):
    """Raises on the poison value (how depends on ``how``); collects the rest."""

    def __init__(self, how: str = "raise") -> None:
        self.how = how

    def execute(self, tuple: Tuple) -> None:
        if tuple[0] == POISON:
            if self.how == "raise":
                raise ValueError(f"cannot digest {tuple[0]!r}")
            if self.how == "failed":
                raise FailedException("refused on purpose")
            if self.how == "fail":
                self.collector.fail(tuple)
                return
            if self.how == "timeout":
                return  # never acked: times out
        Records("out").append(tuple[0])
        self.collector.ack(tuple)


def _topology(items: list[Any], how: str = "raise") -> Any:
    b = TopologyBuilder("poisoned")
    b.set_spout("src", TimedSpout(items, name="src"))
    b.set_bolt("picky", Picky(how)).shuffle_grouping("src")
    return b.build()


def _conf(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "statestream.deadletter.path": str(tmp_path / "dead.jsonl"),
        "topology.message.timeout.secs": 4,
    }
    conf.update(extra)
    return conf


def _run(
    runner: Runner, topology: Any, conf: dict[str, Any], *, coarse: bool = False, **kw: Any
) -> Any:
    """``runner.run`` on ``conf``; ``coarse``: on two workers, 10 ms of fake time per
    idle round (an idle round there costs a frame exchange), for tests that wait
    seconds of fake time and do not look at exact times."""
    if coarse and runner.workers:
        conf = {**conf, "topology.sleep.spout.wait.strategy.time.ms": 10}
    return runner.run(topology, runner.config(conf), **kw)


def dead_letters(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "dead.jsonl"
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


# -- the policy on the runtime's clock -----------------------------------------------------


def test_the_delays_between_attempts_follow_the_policy_then_the_message_is_dead_lettered(
    local_runner: Runner, tmp_path: Path
) -> None:
    items = ["a", POISON, "b", "c"]
    result = _run(local_runner, _topology(items), _conf(tmp_path))
    assert result.reason == "idle"
    emits = times("emit", 1)
    assert len(emits) == 5  # max.attempts 5: the first emission and four retries
    gaps = [b - a for a, b in itertools.pairwise(emits)]
    # 100 ms, x2 each time; the idle loop sleeps 1 ms of fake time per round.
    assert gaps == pytest.approx([0.1, 0.2, 0.4, 0.8], abs=0.003)
    # Each hand-back (Spout.fail) comes when its delay has passed, never before.
    fails = times("fail", 1)
    assert [f - e for e, f in zip(emits, fails, strict=False)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8], abs=0.003
    )
    # Given up on as its last attempt fails (on two workers the failure comes back
    # to the spout's worker a round, 1 ms, later).
    (dead_at,) = times("dead", 1)
    assert dead_at == pytest.approx(emits[-1], abs=None if local_runner.local else 0.003)
    # The other items went through at once, while the poison one waited.
    assert sorted(records("out")) == ["a", "b", "c"]
    assert times("emit", 3)[0] < emits[1]
    assert told("dead") == [1]
    assert 1 not in told("ack")
    m = result.components["src"]
    assert (m.failed, m.dead_lettered, m.retrying) == (5, 1, 0)
    assert result.counters["dead_lettered"] == 1


def test_max_attempts_0_retries_forever_as_storm_does(local_runner: Runner, tmp_path: Path) -> None:
    conf = _conf(
        tmp_path,
        **{"statestream.retry.max.attempts": 0, "statestream.retry.max.ms": 1000},
    )
    # On two workers a shorter run: an idle round there costs a frame exchange.
    duration = 60.0 if local_runner.local else 6.0
    result = _run(local_runner, _topology(["a", POISON]), conf, until_idle=False, duration=duration)
    assert result.reason == "duration"
    assert result.counters.get("worker_restarts", 0) == 0
    emits = times("emit", 1)
    gaps = [b - a for a, b in itertools.pairwise(emits)]
    # 0.1, 0.2, 0.4, 0.8, then capped at max.ms: 1 s, for as long as the run lasts.
    assert gaps[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8], abs=0.003)
    assert gaps[4:] == pytest.approx([1.0] * len(gaps[4:]), abs=0.003)
    assert len(emits) >= (55 if local_runner.local else 8)
    assert times("dead", 1) == [] and dead_letters(tmp_path) == []
    assert result.components["src"].retrying == 1  # waiting for its next retry at the end


def test_initial_0_replays_at_once(local_runner: Runner, tmp_path: Path) -> None:
    conf = _conf(tmp_path, **{"statestream.retry.initial.ms": 0})
    assert _run(local_runner, _topology([POISON]), conf).reason == "idle"
    assert times("emit", 0) == [0.0] * 5
    assert len(dead_letters(tmp_path)) == 1


@pytest.mark.parametrize(
    ("how", "error_type", "error"),
    [
        ("raise", "ValueError", "cannot digest 'poison'"),
        ("failed", "FailedException", "refused on purpose"),
        ("fail", "Failed", "failed by collector.fail()"),
        ("timeout", "Failed", "tuple tree not completed within 4 s (timed out)"),
    ],
)
def test_the_dead_letter_record_names_the_message_the_component_and_the_exception(
    local_runner: Runner, tmp_path: Path, how: str, error_type: str, error: str
) -> None:
    # On two workers the bolt that fails is in worker 1, the spout that writes
    # the record in worker 0: the cause crosses with the failure.
    conf = _conf(tmp_path, **{"statestream.retry.max.attempts": 2})
    result = _run(local_runner, _topology(["ok", POISON], how), conf, coarse=True)
    assert result.reason == "idle"
    (record,) = dead_letters(tmp_path)
    timestamp = record.pop("timestamp")
    assert timestamp[:2] == "20" and "T" in timestamp
    assert record == {
        "topology": "poisoned",
        "spout": "src",
        "task": 0,
        "msg_id": 1,
        "values": [POISON],
        "component": "(timeout)" if how == "timeout" else "picky",
        "error_type": error_type,
        "error": error,
        "attempts": 2,
        "stream": "default",
        "status": "dead",
        "repr_values": [],
        "msg_id_repr": False,
    }


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque thing>"


class OpaqueSpout(ListSpout):
    def _values(self, item: Any) -> list[Any]:
        return [item, _Opaque()]


class FailAll(Bolt):
    def execute(self, tuple: Tuple) -> None:
        raise RuntimeError("no")


def test_values_json_cannot_carry_are_written_as_their_repr(
    local_runner: Runner, tmp_path: Path
) -> None:
    # On two workers the opaque value crosses to the bolt's worker as a pickle.
    b = TopologyBuilder("opaque")
    b.set_spout("src", OpaqueSpout([{"k": 1}], fields=("a", "b")))
    b.set_bolt("fail", FailAll()).shuffle_grouping("src")
    conf = _conf(tmp_path, **{"statestream.retry.max.attempts": 1})
    assert _run(local_runner, b.build(), conf).reason == "idle"
    (record,) = dead_letters(tmp_path)
    assert record["values"] == [{"k": 1}, "<opaque thing>"]
    assert record["repr_values"] == [1]


def test_a_message_that_succeeds_on_a_retry_is_not_dead_lettered(
    local_runner: Runner, tmp_path: Path
) -> None:
    class FlakyTwice(Bolt):
        def execute(self, tuple: Tuple) -> None:
            Records("seen").append(tuple[0])
            if records("seen").count(tuple[0]) <= 2:
                raise ValueError("flaky")
            Records("out").append(tuple[0])
            self.collector.ack(tuple)

    b = TopologyBuilder("flaky")
    b.set_spout("src", TimedSpout(["x"], name="src"))
    b.set_bolt("flaky", FlakyTwice()).shuffle_grouping("src")
    result = _run(local_runner, b.build(), _conf(tmp_path))
    assert result.reason == "idle"
    assert records("out") == ["x"]
    assert dead_letters(tmp_path) == []
    assert told("ack") == [0]
    assert result.components["flaky"].last_error == "ValueError: flaky"


def test_the_file_spout_moves_past_a_dead_letter_and_a_restart_before_it_does_not_write_it_twice(
    local_runner: Runner, tmp_path: Path
) -> None:
    """The spout's acked prefix (resume=True) moves past the settled line. A restart
    from before it (as after a kill between the write and the saved position)
    retries the line, and the file still holds it once."""
    path = tmp_path / "in.txt"
    path.write_text("one\ntwo poison\nthree\n")

    class Words(BasicBolt):
        def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
            Records("seen").append(tuple[0])
            if POISON in tuple[1]:
                raise ValueError("poison line")
            Records("lines").append(tuple[1])

    def topo() -> Any:
        b = TopologyBuilder("lines")
        b.set_spout("file", FileSpout(path, resume=True))
        b.set_bolt("words", Words()).shuffle_grouping("file")
        return b.build()

    state = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    conf = _conf(tmp_path, **state)
    assert _run(local_runner, topo(), conf).reason == "idle"
    assert records("lines") == ["one", "three"]
    assert [r["values"] for r in dead_letters(tmp_path)] == [[1, "two poison"]]
    with open_sqlite(tmp_path) as kv:
        assert kv["position"]["line"] == 3  # past the dead letter

    # A restart from a position before it: retried to its last attempt, written once.
    Records("lines").clear()
    Records("seen").clear()
    with open_sqlite(tmp_path) as kv:
        kv["position"] = {"path": kv["position"]["path"], "line": 0}
    result = _run(local_runner, topo(), conf)
    assert result.reason == "idle"
    assert records("lines") == ["one", "three"]
    assert records("seen").count(1) == 5
    assert len(dead_letters(tmp_path)) == 1
    assert result.counters["dead_lettered"] == 1


class open_sqlite:
    """The FileSpout's stored position, read and written through the provider."""

    def __init__(self, tmp_path: Path) -> None:
        from statestream._registry import open_provider

        self.provider = open_provider("sqlite", {"path": str(tmp_path / "state.db")}, scope="lines")
        self.kv = self.provider.get_state("file-0")

    def __enter__(self) -> Any:
        return self

    def __getitem__(self, key: str) -> Any:
        return self.kv.get(key)

    def __setitem__(self, key: str, value: Any) -> None:
        self.kv.put(key, value)
        self.kv.commit(None)

    def __exit__(self, *exc: object) -> None:
        self.provider.close()


def test_the_progress_counts_tuples_waiting_for_a_retry(tmp_path: Path) -> None:
    clock = FakeClock()
    rt = LocalRuntime(_topology([POISON, "a"]), _conf(tmp_path), clock=clock)
    rt.open()
    for _ in range(5):
        rt.step()
    src = rt.metrics()["src"]
    assert (src.failed, src.retrying, src.dead_lettered) == (1, 1, 0)
    assert rt.metrics()["picky"].last_error == "ValueError: cannot digest 'poison'"
    assert not rt.idle()
    rt.close()


def test_a_traceback_is_logged_once_then_its_repeats_are_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conf = _conf(tmp_path, **{"statestream.retry.max.attempts": 12})
    conf["statestream.retry.max.ms"] = 100
    LocalRuntime(_topology([POISON]), conf, clock=FakeClock()).run(until_idle=True)
    tracebacks = [r for r in caplog.records if "Traceback" in r.getMessage()]
    assert len(tracebacks) == 1
    repeats = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
    assert repeats == ["picky[0] raised ValueError again: 10 times so far (traceback above)"]
    assert any(
        "picky[0] raised ValueError 12 times in all" in r.getMessage() for r in caplog.records
    )


# -- exactly-once -----------------------------------------------------------------------------


class Counter(StatefulBolt):
    def init_state(self, state: KeyValueState) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:
        if tuple[0] == POISON:
            raise ValueError("poison reached the counter")
        self.state.put(tuple[0], self.state.get(tuple[0], 0) + 1)
        self.collector.ack(tuple)


class CountSink(Bolt):
    def execute(self, tuple: Tuple) -> None:
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


@pytest.mark.parametrize("exactly_once", [True, False])
def test_a_stateful_count_around_poison_is_exact_and_the_run_ends(
    local_runner: Runner, tmp_path: Path, exactly_once: bool
) -> None:
    words = [f"w{i % 7}" for i in range(300)]
    for at in (17, 120, 121, 299):
        words[at] = POISON
    expected = collections.Counter(w for w in words if w != POISON)
    b = TopologyBuilder("eo")
    b.set_spout("src", TimedRewindableSpout(words, fields=("word",), name="src"))
    b.set_bolt("count", Counter(), 2).fields_grouping("src", ["word"])
    conf = _conf(
        tmp_path,
        **{
            "statestream.state.exactly.once": exactly_once,
            "topology.state.checkpoint.interval.ms": 50,
        },
    )
    conf = local_runner.config(conf)
    result = _run(local_runner, b.build(), conf)
    assert result.reason == "idle"
    dead = dead_letters(tmp_path)
    if exactly_once:
        # Retried where it failed: each poison tuple is dead-lettered itself,
        # at its bolt, so that a replay runs it there and nothing else twice.
        assert [(r["at"], r["source"], r["values"]) for r in dead] == [
            ("count", "src", [POISON])
        ] * 4
    else:
        assert sorted(r["msg_id"] for r in dead) == [17, 120, 121, 299]
    assert {(r["component"], r["error"], r["attempts"]) for r in dead} == {
        ("count", "poison reached the counter", 5)
    }
    from statestream.testing import committed_state

    assert committed_state(b.build(), conf, "count") == expected
    if exactly_once:
        # No rewind at all: one poison word costs its own five attempts.
        assert result.counters["rewinds"] == 0
        assert result.components["count"].failed == 4 * 5
        assert result.counters["dead_lettered"] == 4
    else:
        assert sorted(told("dead")) == [17, 120, 121, 299]


class SplitOrRaise(BasicBolt):
    """Splits a line into words; raises on a line holding the poison word, after
    emitting the words before it (so a failed line has effects to undo)."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for word in tuple[0].split():
            if word == POISON:
                raise ValueError("a poison line")
            collector.emit([word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])


def test_exactly_once_finds_the_failures_of_an_attempt_together(
    local_runner: Runner, tmp_path: Path
) -> None:
    """Issue 30: 40 poison lines in 2,000 cost a few rewinds, not one per line and
    attempt (before: each poison line was rewound to on its own, every attempt);
    the others are replayed without them, and the counts are exact."""
    lines = [f"w{i % 13} w{i % 7}" for i in range(2000)]
    poison = list(range(25, 2000, 50))
    for at in poison:
        lines[at] = f"w{at % 13} {POISON} w{at % 7}"
    expected = collections.Counter(
        w for i, line in enumerate(lines) if i not in poison for w in line.split()
    )
    b = TopologyBuilder("eo")
    b.set_spout("src", RewindableListSpout(lines, fields=("line",), name="src"))
    b.set_bolt("split", SplitOrRaise(), 2).shuffle_grouping("src")
    b.set_bolt("count", Counter(), 2).fields_grouping("split", ["word"])
    conf = _conf(
        tmp_path,
        **{
            "statestream.state.exactly.once": True,
            "statestream.retry.max.attempts": 3,
            "topology.state.checkpoint.interval.ms": 200,
        },
    )
    conf = local_runner.config(conf)
    result = _run(local_runner, b.build(), conf)
    assert result.reason == "idle"
    assert sorted(r["msg_id"] for r in dead_letters(tmp_path)) == poison
    from statestream.testing import committed_state

    assert committed_state(b.build(), conf, "count") == expected
    # Attempts 1 to 3 of every line failing in an attempt count together.
    assert result.counters["rewinds"] <= 12, result.counters["rewinds"]
