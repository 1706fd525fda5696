"""The spark runtime: same answers as the local runtime, exactly-once under faults.

Every behaviour test runs through the ``run_topology`` fixture on both
runtimes (local, spark) over the same state provider, and reads the result
back through the provider, as ``statestream state dump`` does.
"""

from __future__ import annotations

import collections
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    ConfigError,
    FileSpout,
    KeyValueState,
    OutputFieldsDeclarer,
    StatefulBolt,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from statestream._registry import open_provider, stored_topologies
from statestream._results import RunResult
from statestream._routing import task_for_key
from statestream.runtime.local import LocalRuntime
from statestream.runtime.spark import SparkRuntime
from statestream.testing import ListSpout, SimulatedCrash

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import wordcount

pytestmark = pytest.mark.spark

REDIS_URL = "redis://127.0.0.1:6379/0"


# --------------------------------------------------------------------------- providers


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def provider_conf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A fresh store: a sqlite file in tmp_path, or a unique key prefix in Redis."""
    if request.param == "sqlite":
        yield {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        }
        return
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip("no Redis on 127.0.0.1:6379")
    prefix = f"sstest-{uuid.uuid4().hex[:12]}:"
    yield {
        "topology.state.provider": "redis",
        "topology.state.provider.config": {"url": REDIS_URL, "key_prefix": prefix},
    }
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


def read_state(conf: Mapping[str, Any], namespace: str) -> dict[Any, Any]:
    """The committed entries of ``namespace`` of the one topology the store holds."""
    with open_provider(
        conf["topology.state.provider"], conf["topology.state.provider.config"]
    ) as provider:
        found = stored_topologies(provider.namespaces())
        if not found:
            return {}
        (topology,) = found
        return dict(provider.get_state(f"{topology}/{namespace}").items())


# --------------------------------------------------------------------------- runners

Runner = Callable[..., RunResult]


@pytest.fixture(params=["local", "spark"])
def run_topology(request: pytest.FixtureRequest) -> Runner:
    """Run a topology until idle on the runtime of the parameter."""
    if request.param == "local":

        def run_local(topology: Topology, conf: Mapping[str, Any], **_: Any) -> RunResult:
            conf = {"topology.state.checkpoint.interval.ms": 50, **conf}
            return LocalRuntime(topology, conf).run(until_idle=True)

        return run_local
    spark = request.getfixturevalue("spark_session")

    def run_spark(topology: Topology, conf: Mapping[str, Any], batch_size: int = 1000) -> RunResult:
        return SparkRuntime(topology, conf, spark=spark, batch_size=batch_size).run(until_idle=True)

    return run_spark


# --------------------------------------------------------------------------- word count


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def sentences(n: int) -> list[str]:
    return [" ".join(f"w{(i * 7 + j * 13) % 41}" for j in range(i % 9 + 1)) for i in range(n)]


def word_counts(conf: Mapping[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in range(2):
        part = read_state(conf, f"count-{i}")
        assert not set(part) & set(counts), "a word counted by two tasks"
        counts.update(part)
    return counts


def test_wordcount_equals_counter(
    run_topology: Runner, provider_conf: dict[str, Any], tmp_path: Path
) -> None:
    corpus = write_lines(tmp_path / "in.txt", sentences(120))
    conf = {**provider_conf, "wordcount.input": str(corpus)}
    result = run_topology(wordcount.topology(), conf, batch_size=50)
    assert result.reason == "idle"
    assert word_counts(conf) == collections.Counter(corpus.read_text().split())


def test_wordcount_resumes_after_more_input(
    spark_session: Any, tmp_path: Path, provider_conf: dict[str, Any]
) -> None:
    """A second run over a grown file reads only the new lines (positions are stored)."""
    corpus = write_lines(tmp_path / "in.txt", sentences(30))
    conf = {**provider_conf, "wordcount.input": str(corpus)}
    SparkRuntime(wordcount.topology(), conf, spark=spark_session).run(until_idle=True)
    with corpus.open("a") as f:
        f.write("".join(s + "\n" for s in sentences(45)[30:]))
    result = SparkRuntime(wordcount.topology(), conf, spark=spark_session).run(until_idle=True)
    assert result.counters["batches"] == 1
    assert result.components["sentences"].emitted == 15
    assert word_counts(conf) == collections.Counter(corpus.read_text().split())


# --------------------------------------------------------------------------- all groupings


class Parse(BasicBolt):
    """``(offset, line)`` -> ``(n, mod)`` on default, and ``(n,)`` direct to ``n % tasks``."""

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        super().prepare(conf, context)
        self.direct_tasks = context.component_tasks("direct_sink")

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["n", "mod"])
        declarer.declare_stream("direct", ["n"], direct=True)

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        n = int(tuple.values[1])
        collector.emit([n, n % 5])
        collector.emit_direct(self.direct_tasks[n % len(self.direct_tasks)], [n], "direct")


class Double(BasicBolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["n"])

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        collector.emit([tuple["n"] * 2])


class Tally(StatefulBolt):
    """Adds ``value_field`` (or 1) under the key ``key_field`` (or ``"all"``), per tuple."""

    def __init__(self, key_field: str | None = None, value_field: str | None = None) -> None:
        self.key_field = key_field
        self.value_field = value_field

    def init_state(self, state: KeyValueState) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:
        key = tuple[self.key_field] if self.key_field else "all"
        value = tuple[self.value_field] if self.value_field else 1
        self.state.put(key, self.state.get(key, 0) + value)
        self.collector.ack(tuple)


def groupings_topology(path: Path) -> Topology:
    b = TopologyBuilder("groupings")
    b.set_spout("numbers", FileSpout(path))
    b.set_bolt("parse", Parse(), 2).shuffle_grouping("numbers")
    b.set_bolt("bcast", Tally(), 3).all_grouping("parse")
    b.set_bolt("byres", Tally("mod", "n"), 3).fields_grouping("parse", ["mod"])
    b.set_bolt("direct_sink", Tally("n"), 2).direct_grouping("parse", "direct")
    b.set_bolt("double", Double(), 2).none_grouping("parse")
    b.set_bolt("total", Tally(None, "n"), 2).global_grouping("double")
    return b.build()


def test_all_global_fields_direct_groupings(
    run_topology: Runner, tmp_path: Path, provider_conf: dict[str, Any]
) -> None:
    n = 200
    numbers = write_lines(tmp_path / "numbers.txt", [str(i) for i in range(n)])
    conf = dict(provider_conf)
    result = run_topology(groupings_topology(numbers), conf, batch_size=70)
    assert result.reason == "idle"
    for task in range(3):  # all: every task saw every tuple
        assert read_state(conf, f"bcast-{task}") == {"all": n}
    by_mod: dict[int, dict[int, int]] = collections.defaultdict(dict)
    for i in range(n):
        by_mod[task_for_key(i % 5, 3)][i % 5] = by_mod[task_for_key(i % 5, 3)].get(i % 5, 0) + i
    for task in range(3):  # fields: each key on the task the stable hash names
        assert read_state(conf, f"byres-{task}") == by_mod.get(task, {})
    for task in range(2):  # direct: n went to task n % 2
        assert read_state(conf, f"direct_sink-{task}") == {i: 1 for i in range(task, n, 2)}
    # global: everything on task 0
    assert read_state(conf, "total-0") == {"all": sum(2 * i for i in range(n))}
    assert read_state(conf, "total-1") == {}


# --------------------------------------------------------------------------- faults


class FlakyTally(Tally):
    """Task 0 raises at its first ``fail_times`` attempts (counted in a file shared by processes)."""

    def __init__(self, flag: str, fail_times: int) -> None:
        super().__init__("word")
        self.flag = flag
        self.fail_times = fail_times

    def execute(self, tuple: Tuple) -> None:
        if self.context.task_index == 0 and not getattr(self, "_checked", False):
            self._checked = True
            attempts = Path(self.flag)
            seen = len(attempts.read_text()) if attempts.exists() else 0
            if seen < self.fail_times:
                with attempts.open("a") as f:
                    f.write("x")
                raise RuntimeError(f"injected failure {seen + 1}")
        super().execute(tuple)


class Words(BasicBolt):
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["word"])

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for word in tuple.values[-1].split():
            collector.emit([word])


def flaky_topology(corpus: Path, flag: Path, fail_times: int) -> Topology:
    b = TopologyBuilder("flaky")
    b.set_spout("lines", FileSpout(corpus))
    b.set_bolt("split", Words(), 2).shuffle_grouping("lines")
    b.set_bolt("count", FlakyTally(str(flag), fail_times), 2).fields_grouping("split", "word")
    return b.build()


@pytest.mark.parametrize(
    ("fail_times", "replays"),
    [(1, 0), (2, 1)],
    ids=["spark-retries-the-task", "driver-replays-the-batch"],
)
def test_bolt_failure_is_retried_exactly_once(
    spark_session: Any,
    tmp_path: Path,
    provider_conf: dict[str, Any],
    fail_times: int,
    replays: int,
) -> None:
    """One failure: Spark's task retry (local[2,2]) absorbs it. Two: Spark gives up on
    the job, the driver rolls the batch back and replays it. Either way: exact."""
    corpus = write_lines(tmp_path / "in.txt", sentences(60))
    topo = flaky_topology(corpus, tmp_path / "attempts", fail_times)
    result = SparkRuntime(topo, provider_conf, spark=spark_session, batch_size=1000).run(
        until_idle=True
    )
    assert (tmp_path / "attempts").read_text() == "x" * fail_times
    assert result.counters["replays"] == replays
    assert word_counts(provider_conf) == collections.Counter(corpus.read_text().split())


@pytest.mark.parametrize("point", ["prepared", "committed"])
def test_driver_crash_then_restart_is_exact(
    spark_session: Any, tmp_path: Path, provider_conf: dict[str, Any], point: str
) -> None:
    """The driver dies after every task prepared batch 1 (or after it committed);
    a new runtime over the same store recovers: no word lost, none counted twice."""
    corpus = write_lines(tmp_path / "in.txt", sentences(90))
    conf = {**provider_conf, "wordcount.input": str(corpus)}

    def crash(at: str, txid: int) -> None:
        if at == point and txid == 1:
            raise SimulatedCrash(f"driver killed after batch {txid} was {at}")

    first = SparkRuntime(wordcount.topology(), conf, spark=spark_session, batch_size=30)
    first.fault_hook = crash
    with pytest.raises(SimulatedCrash):
        first.run(until_idle=True)
    second = SparkRuntime(wordcount.topology(), conf, spark=spark_session, batch_size=30)
    result = second.run(until_idle=True)
    assert result.counters["recovered"] == (1 if point == "prepared" else 0)
    assert result.counters["batches"] == (2 if point == "prepared" else 1)
    assert word_counts(conf) == collections.Counter(corpus.read_text().split())


class HookRecorder(Tally):
    """Counts words and records its hook calls in a sqlite file (tasks run in other
    processes); raises on ``boom`` its first ``fail_times`` times, failing that job."""

    def __init__(self, log_path: str, flag: str, fail_times: int) -> None:
        super().__init__("word")
        self.log_path = log_path
        self.flag = flag
        self.fail_times = fail_times

    def record(self, hook: str, txid: int | None) -> None:
        import sqlite3

        with sqlite3.connect(self.log_path, timeout=60) as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS hooks "
                "(seq INTEGER PRIMARY KEY AUTOINCREMENT, task INTEGER, hook TEXT, txid INTEGER)"
            )
            db.execute(
                "INSERT INTO hooks (task, hook, txid) VALUES (?, ?, ?)",
                (self.context.task_index, hook, txid),
            )

    def execute(self, tuple: Tuple) -> None:
        if tuple["word"] == "boom":
            attempts = Path(self.flag)
            seen = len(attempts.read_text()) if attempts.exists() else 0
            if seen < self.fail_times:
                with attempts.open("a") as f:
                    f.write("x")
                raise RuntimeError(f"injected failure {seen + 1}")
        super().execute(tuple)

    def pre_prepare(self, txid: int) -> None:
        self.record("pre_prepare", txid)

    def pre_commit(self, txid: int) -> None:
        self.record("pre_commit", txid)

    def pre_rollback(self) -> None:
        self.record("pre_rollback", None)


def test_hooks_run_in_order_with_a_rollback_on_a_failed_batch(
    spark_session: Any, tmp_path: Path, provider_conf: dict[str, Any]
) -> None:
    """Each batch t: pre_prepare(t) (on the executor) then pre_commit(t) (on the
    driver), in every task; batch 1 fails twice (Spark's task retry, then the job):
    pre_rollback in every task, then batch 1 again."""
    lines = [f"a{i % 5} b{i % 3}" for i in range(30)]
    lines[15] += " boom"
    corpus = write_lines(tmp_path / "in.txt", lines)
    log = tmp_path / "hooks.db"
    b = TopologyBuilder("hooks")
    b.set_spout("lines", FileSpout(corpus))
    b.set_bolt("split", Words(), 2).shuffle_grouping("lines")
    recorder = HookRecorder(str(log), str(tmp_path / "attempts"), 2)
    b.set_bolt("count", recorder, 2).fields_grouping("split", "word")
    result = SparkRuntime(b.build(), provider_conf, spark=spark_session, batch_size=10).run(
        until_idle=True
    )
    assert result.counters["replays"] == 1
    assert word_counts(provider_conf) == collections.Counter(corpus.read_text().split())
    import sqlite3

    with sqlite3.connect(log) as db:
        rows = db.execute("SELECT task, hook, txid FROM hooks ORDER BY seq").fetchall()
    for task in range(2):
        calls = [(hook, txid) for t, hook, txid in rows if t == task]
        # The failed job's task that did not raise may have prepared 1 before the rollback.
        rolled = calls.index(("pre_rollback", None))
        if calls[rolled - 1] == ("pre_prepare", 1):
            del calls[rolled - 1]
        assert calls == [
            ("pre_prepare", 0),
            ("pre_commit", 0),
            ("pre_rollback", None),
            ("pre_prepare", 1),
            ("pre_commit", 1),
            ("pre_prepare", 2),
            ("pre_commit", 2),
        ], f"task {task}: {calls}"


# --------------------------------------------------------------------------- configuration


def test_memory_provider_is_refused(spark_session: Any, tmp_path: Path) -> None:
    corpus = write_lines(tmp_path / "in.txt", ["a b"])
    conf = {"topology.state.provider": "memory", "wordcount.input": str(corpus)}
    rt = SparkRuntime(wordcount.topology(), conf, spark=spark_session)
    with pytest.raises(ConfigError, match=r"(?s)Python worker process.*redis"):
        rt.run(until_idle=True)


def list_topology(items: list[str]) -> Topology:
    b = TopologyBuilder("listed")
    b.set_spout("items", ListSpout(items, ["word"]))
    b.set_bolt("count", Tally("word"), 2).fields_grouping("items", "word")
    return b.build()


def test_at_most_once_polls_the_spout_on_the_driver(
    spark_session: Any, provider_conf: dict[str, Any]
) -> None:
    items = [f"k{i % 7}" for i in range(100)]
    conf = {**provider_conf, "topology.acker.executors": 0}
    rt = SparkRuntime(list_topology(items), conf, spark=spark_session, batch_size=40)
    result = rt.run(until_idle=True)
    assert result.counters["batches"] == 3
    got = {**read_state(conf, "count-0"), **read_state(conf, "count-1")}
    assert got == collections.Counter(items)


def test_crash_during_recovery_then_restart_is_exact(
    spark_session: Any, tmp_path: Path, provider_conf: dict[str, Any]
) -> None:
    """Killed after preparing batch 1, then killed again right after the recovery
    rolled it back: the third start still replays batch 1 from its positions."""
    corpus = write_lines(tmp_path / "in.txt", sentences(90))
    conf = {**provider_conf, "wordcount.input": str(corpus)}

    def crash_at(point: str, at_txid: int) -> Callable[[str, int], None]:
        def hook(at: str, txid: int) -> None:
            if at == point and txid == at_txid:
                raise SimulatedCrash(f"driver killed at {at} {txid}")

        return hook

    for point, txid in (("prepared", 1), ("recovered", 0)):
        rt = SparkRuntime(wordcount.topology(), conf, spark=spark_session, batch_size=30)
        rt.fault_hook = crash_at(point, txid)
        with pytest.raises(SimulatedCrash):
            rt.run(until_idle=True)
    result = SparkRuntime(wordcount.topology(), conf, spark=spark_session, batch_size=45).run(
        until_idle=True
    )
    # From the end of batch 0 (line 30): 45 lines, then the last 15.
    assert result.counters["batches"] == 2
    assert result.components["sentences"].emitted == 60
    assert word_counts(conf) == collections.Counter(corpus.read_text().split())


def test_a_store_left_at_least_once_is_continued_from_its_acked_positions(
    spark_session: Any, tmp_path: Path
) -> None:
    """A local run with at-least-once state stores its spouts' acked positions with
    each checkpoint (issue 30): Spark continues from them rather than reading the
    file from its beginning, so a finished input is not counted again. (Before,
    such a store had no positions and Spark refused it.)"""
    corpus = write_lines(tmp_path / "in.txt", sentences(10))
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "topology.state.checkpoint.interval.ms": 50,
        "statestream.state.exactly.once": False,
        "wordcount.input": str(corpus),
    }
    LocalRuntime(wordcount.topology(), conf).run(until_idle=True)
    expected = collections.Counter(corpus.read_text().split())
    assert word_counts(conf) == expected
    result = SparkRuntime(wordcount.topology(), conf, spark=spark_session).run(until_idle=True)
    assert result.components["sentences"].emitted == 0
    assert word_counts(conf) == expected
