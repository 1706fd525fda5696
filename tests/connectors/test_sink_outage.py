"""A sink whose server goes away between checkpoints, during a real run.

FileSpout -> split -> count -> an append sink of every ``(word, k)`` and an
upsert sink of the final counts (two tasks each). While the run goes on, the
test cuts the sinks' own connections from the server side (PostgreSQL:
``pg_terminate_backend`` of the backends whose ``application_name`` is a
sink task's; Redis: ``CLIENT KILL ID`` of the clients whose name is), right
after a sink's COMMIT, so between two checkpoints (points set by commits,
not by time). The sinks wait for their server where they stand, within
``statestream.connectors.reconnect.secs``: the run reports no error and
never rewinds, and the targets end exact. A server that stays away past that
bound stops the run with one line naming the sink, its task and the URL
(password hidden); a second run with the server back finishes exact,
nothing committed lost.

PostgreSQL is the shared server (only this test's connections are cut; a
server "away" is this test's own role refused at login); Redis is a server of
the test's own on a spare port (test_source_outage's), stopped and started.
The same cuts with ``topology.workers: 2``: the sink tasks in two processes,
each worker cutting every sink connection of the topology. And on Spark, where
the driver writes the targets after each batch's commit: the cuts and the
server away past the bound between two batches.
The runs' clock is a fake one moving at each reading (StepClock): the
checkpoints fall at the same points on a loaded machine, and the reconnect
bound passes in no real time.
"""

from __future__ import annotations

import gc
import re
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_source_outage import OwnRedis
from word_bolts import Count, Split

from statestream import (
    FakeClock,
    FileSpout,
    KeyValueState,
    RunResult,
    SinkError,
    Topology,
    TopologyBuilder,
    run,
)
from statestream.connectors import KafkaSink, PostgresSink, RedisSink, TwoPhaseSink
from statestream.connectors._broker import Reconnect, TargetUnreachable, client_name
from statestream.testing import StepClock, mock_context

pytestmark = pytest.mark.redis  # needs the real servers (PostgreSQL here)

DSN = "postgresql://postgres@127.0.0.1:5432/test"
WORDS = [f"w{i % 37}" for i in range(6000)]
EXPECTED = Counter(WORDS)
EVERY_UPDATE = Counter((w, k) for w, n in EXPECTED.items() for k in range(1, n + 1))


class _Registry(dict[str, "Cutter"]):
    """This process's cutters. Spark ships this module by value to its executors
    (the sinks below are defined here), and the cutters reach the test's server
    connections, which do not pickle: a pickle of the registry is an empty one."""

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (dict, ())


#: Per topology, what cuts its sinks' connections (the bolts reach it by name:
#: a topology is copied by the runtime, a module's globals are not).
CUTTERS: dict[str, Cutter] = _Registry()


class Cutter:
    """Cuts a run's connections ``times`` times: at the first tick (a sink's COMMIT
    here, a line in test_rabbitmq_outage) from the ``first``-th on at which
    ``cut()`` finds a connection to cut, then ``every`` ticks after the last cut
    (so that each cut meets a connection made again)."""

    def __init__(
        self, cut: Callable[[], int], times: int, first: int, every: int, log: Path | None = None
    ) -> None:
        self.cut = cut
        self.times = times
        self.every = every
        self.next_at = first
        self.ticks = 0
        self.cuts: list[int] = []  # connections cut, per cut
        # With topology.workers each worker ticks a copy of its own (forked with
        # this module): each cut is also written here, a line a cut.
        self.log = log

    def tick(self) -> None:
        """One more point at which a cut may come (a COMMIT, a line)."""
        self.ticks += 1
        if len(self.cuts) < self.times and self.ticks >= self.next_at:
            cut = self.cut()
            if cut:
                self.cuts.append(cut)
                self.next_at = self.ticks + self.every
                if self.log is not None:
                    with self.log.open("a") as f:
                        f.write(f"{cut}\n")


class CutAfterCommit(TwoPhaseSink):
    """Tells the topology's :class:`Cutter` of each COMMIT the sink carried out: the
    cut comes between two checkpoints, from the server's side."""

    def post_commit(self, txid: int, state: KeyValueState) -> None:
        super().post_commit(txid, state)
        CUTTERS[self.context.topology_name].tick()


class CuttingPostgresSink(CutAfterCommit, PostgresSink):
    pass


class CuttingRedisSink(CutAfterCommit, RedisSink):
    pass


class CuttingKafkaSink(CutAfterCommit, KafkaSink):
    pass


def word_count_into(name: str, corpus: Path, updates: Any, counts: Any) -> Topology:
    b = TopologyBuilder(name)
    b.set_spout("lines", FileSpout(corpus))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    b.set_bolt("updates", updates, 2).shuffle_grouping("count")
    b.set_bolt("counts", counts, 2).fields_grouping("count", ["word"])
    return b.build()


def corpus(tmp_path: Path, times: int = 1) -> Path:
    """WORDS ``times`` over, ten words a line."""
    words = WORDS * times
    path = tmp_path / "in.txt"
    path.write_text("\n".join(" ".join(words[i : i + 10]) for i in range(0, len(words), 10)))
    return path


def run_it(topology: Topology, tmp_path: Path, limit: float, workers: int = 1) -> RunResult:
    config = {
        "topology.state.checkpoint.interval.ms": 50,
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "statestream.connectors.reconnect.secs": limit,
        "topology.workers": workers,
    }
    return run(topology, config, until_idle=True, clock=StepClock(0.01))


def ridden_out(result: RunResult) -> None:
    """The run went to its end with no error reported and no rewind: the sinks
    waited for their server where they stood."""
    assert result.reason == "idle"
    assert result.errors == []
    assert result.counters.get("rewinds", 0) == 0


class Target:
    """A sink target under test: its two sinks, and what the server side can do."""

    kind = ""
    shown = ""  # the URL as the messages must show it (password hidden)

    def sinks(self) -> tuple[TwoPhaseSink, TwoPhaseSink]:
        """The append (or stream) sink and the upsert (or hash) sink."""
        raise NotImplementedError

    def cut(self, topology: str) -> int:
        """Close the topology's sink connections from the server side; how many."""
        raise NotImplementedError

    def away(self, topology: str) -> None:
        """The server away for the sinks until :meth:`back`."""
        raise NotImplementedError

    def back(self) -> None:
        raise NotImplementedError

    def read(self) -> tuple[Counter[tuple[str, int]], dict[str, int]]:
        """Every ``(word, k)`` the append sink wrote, and the upsert sink's counts."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Postgres(Target):
    """The shared server, as a role of the test's own with its own tables and
    guard table; "away" is the role refused at login."""

    kind = "PostgresSink"

    def __init__(self) -> None:
        import psycopg

        self.conn = conn = psycopg.connect(DSN, autocommit=True)
        self.role = role = f"sinkout_{uuid.uuid4().hex[:10]}"
        self.shown = f"postgresql://{role}:***@127.0.0.1:5432/test"
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 's3cret'")
        conn.execute(f"CREATE TABLE {role}_updates (word text NOT NULL, n integer NOT NULL)")
        conn.execute(f"CREATE TABLE {role}_counts (word text PRIMARY KEY, n integer NOT NULL)")
        conn.execute(f"GRANT ALL ON {role}_updates, {role}_counts TO {role}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {role}")  # its own guard table

    def sinks(self) -> tuple[TwoPhaseSink, TwoPhaseSink]:
        dsn, role = DSN.replace("postgres@", f"{self.role}:s3cret@"), self.role
        sink, guard = CuttingPostgresSink, f"{role}_guard"
        return (
            sink(f"{role}_updates", ["word", "n"], dsn=dsn, guard_table=guard),
            sink(f"{role}_counts", ["word", "n"], dsn, "upsert", ["word"], guard),
        )

    def cut(self, topology: str) -> int:
        # pg_terminate_backend of the backends whose application_name is a sink task's,
        # on a connection of this process's own: a worker forked with topology.workers
        # must not talk over the test's (two processes on one socket hang both).
        import psycopg

        with psycopg.connect(DSN, autocommit=True) as conn:
            return len(
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE starts_with(application_name, %s)",
                    (f"statestream/{topology}/",),
                ).fetchall()
            )

    def away(self, topology: str) -> None:
        self.conn.execute(f"ALTER ROLE {self.role} NOLOGIN")
        self.cut(topology)  # none yet if the writes overlap and are still connecting

    def back(self) -> None:
        self.conn.execute(f"ALTER ROLE {self.role} LOGIN")

    def read(self) -> tuple[Counter[tuple[str, int]], dict[str, int]]:
        select = f"SELECT word, n FROM {self.role}"
        updates = Counter((w, n) for w, n in self.conn.execute(select + "_updates").fetchall())
        return updates, dict(self.conn.execute(select + "_counts").fetchall())

    def close(self) -> None:
        role, conn = self.role, self.conn
        self.back()
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
        )
        conn.execute(f"DROP TABLE IF EXISTS {role}_updates, {role}_counts")
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.close()


class Redis(Target):
    """A redis-server of the test's own (append-only, so a restart keeps what the
    sinks wrote), with a password, so that messages show it hidden; "away" is
    the server stopped."""

    kind = "RedisSink"

    def __init__(self, tmp_path: Path) -> None:
        self.server = server = OwnRedis(tmp_path)
        server.args = (*server.args, "--requirepass", "s3cret")
        server.url = f"redis://:s3cret@127.0.0.1:{server.port}/0"
        self.shown = f"redis://:***@127.0.0.1:{server.port}/0"
        server.start()

    def sinks(self) -> tuple[TwoPhaseSink, TwoPhaseSink]:
        url = self.server.url
        return CuttingRedisSink("stream", "updates", url), CuttingRedisSink("hash", "counts", url)

    def _client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.server.url, decode_responses=True)

    def cut(self, topology: str) -> int:
        # CLIENT KILL ID of the clients named as the topology's sink tasks.
        with self._client() as client:
            ids = [
                c["id"]
                for c in client.client_list()
                if c["name"].startswith(f"statestream/{topology}/")
            ]
            for found in ids:
                client.execute_command("CLIENT", "KILL", "ID", found)
        return len(ids)

    def away(self, topology: str) -> None:
        self.server.stop()

    def back(self) -> None:
        """Started again, once it has loaded its append-only file (it answers
        LOADING before): 10 s at most."""
        import redis

        self.server.start()
        deadline = time.monotonic() + 10
        with self._client() as client:
            while True:
                try:
                    client.ping()
                    return
                except redis.BusyLoadingError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)

    def read(self) -> tuple[Counter[tuple[str, int]], dict[str, int]]:
        with self._client() as client:
            updates = Counter((f["word"], int(f["count"])) for _, f in client.xrange("updates"))
            return updates, {w: int(n) for w, n in client.hgetall("counts").items()}

    def close(self) -> None:
        self.server.stop()


class Kafka(Target):
    """A tansu broker of the test's own behind a proxy (kafka_proxy: a restarted tansu
    forgets everything); "away" is the proxy refusing connections. The append sink
    writes every update to a topic, the other one keyed by word to another, read
    as a compacted topic is: the last value of each key."""

    kind = "KafkaSink"

    def __init__(self) -> None:
        from kafka_proxy import CutOffBroker

        self.broker = broker = CutOffBroker()
        broker.start()
        self.shown = broker.bootstrap
        for topic in ("updates", "counts"):
            broker.create_topic(topic, 2)

    def sinks(self) -> tuple[TwoPhaseSink, TwoPhaseSink]:
        # Each call to the broker bounded by 1 s: an attempt on a broker away fails
        # within it (the reconnect bound is counted on the run's clock).
        at = self.broker.bootstrap
        return (
            CuttingKafkaSink("updates", bootstrap=at, timeout=1.0),
            CuttingKafkaSink("counts", bootstrap=at, key="word", timeout=1.0),
        )

    def cut(self, topology: str) -> int:
        # Every connection through the proxy is one of this test's sinks (the proxy
        # is told on its control port: a worker process has no proxy thread).
        from kafka_proxy import tell

        return tell(self.broker.control_port, "cut")

    def away(self, topology: str) -> None:
        from kafka_proxy import tell

        tell(self.broker.control_port, "away")

    def back(self) -> None:
        self.broker.back()

    def read(self) -> tuple[Counter[tuple[str, int]], dict[str, int]]:
        from kafka_committed import committed_records

        def values(topic: str) -> Iterator[dict[str, Any]]:
            for record in committed_records(self.broker.bootstrap, topic, 2):
                yield orjson.loads(record.value or b"")

        updates = Counter((v["word"], v["count"]) for v in values("updates"))
        return updates, {v["word"]: v["count"] for v in values("counts")}

    def close(self) -> None:
        self.broker.stop()


TARGETS: dict[str, Callable[[Path], Target]] = {
    "postgres": lambda _: Postgres(),
    "redis": Redis,
    "kafka": lambda _: Kafka(),
}


@pytest.fixture(params=["postgres", "redis", pytest.param("kafka", marks=pytest.mark.kafka)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    made = TARGETS[request.param](tmp_path)
    yield made
    made.close()


def run_on_spark(topology: Topology, tmp_path: Path, limit: float, spark: Any) -> RunResult:
    """As :func:`run_it`, on Spark: 150 lines a batch, so that the 600 lines take four
    batches, each committed by the driver's four sink tasks (four cutter ticks)."""
    from statestream.runtime.spark import SparkRuntime

    config = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "statestream.connectors.reconnect.secs": limit,
        "statestream.spark.batch.size": 150,
    }
    return SparkRuntime(topology, config, spark=spark, clock=StepClock(0.01)).run(until_idle=True)


Runner = Callable[[Topology, Path, float], RunResult]


@pytest.fixture(params=["local", pytest.param("spark", marks=pytest.mark.spark)])
def runner(request: pytest.FixtureRequest) -> Runner:
    """One process, or Spark: there the driver writes the targets once it has
    committed each batch (statestream.connectors.sink), so the cuts, and the
    server away, come between two batches."""
    if request.param == "local":
        return run_it
    spark = request.getfixturevalue("spark_session")
    return lambda topology, tmp_path, limit: run_on_spark(topology, tmp_path, limit, spark)


def test_sinks_ride_out_their_connections_cut(
    target: Target, runner: Runner, tmp_path: Path
) -> None:
    name = f"sinkout-{uuid.uuid4().hex[:8]}"
    CUTTERS[name] = cutter = Cutter(lambda: target.cut(name), times=3, first=2, every=3)
    updates, counts = target.sinks()
    result = runner(word_count_into(name, corpus(tmp_path), updates, counts), tmp_path, 30.0)
    del CUTTERS[name]
    assert len(cutter.cuts) == 3, f"the run ended after {cutter.ticks} commits, {cutter.cuts} cut"
    ridden_out(result)
    assert target.read() == (EVERY_UPDATE, EXPECTED)


def test_sinks_in_two_workers_ride_out_their_connections_cut(
    target: Target, tmp_path: Path
) -> None:
    # topology.workers: 2, the sink tasks spread over two processes; each worker's
    # cutter cuts every sink connection of the topology, both workers'.
    name = f"sinkout-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "cuts"
    CUTTERS[name] = Cutter(lambda: target.cut(name), times=3, first=1, every=3, log=log)
    updates, counts = target.sinks()
    topology = word_count_into(name, corpus(tmp_path, 4), updates, counts)
    result = run_it(topology, tmp_path, 30.0, workers=2)
    del CUTTERS[name]
    cuts = log.read_text().split() if log.exists() else []
    assert len(cuts) >= 2, f"{cuts} connections cut"
    ridden_out(result)
    counts4 = Counter({w: 4 * n for w, n in EXPECTED.items()})
    every4 = Counter((w, k) for w, n in counts4.items() for k in range(1, n + 1))
    assert target.read() == (every4, counts4)


def test_a_server_away_past_the_bound_stops_the_run_and_loses_nothing(
    target: Target, runner: Runner, tmp_path: Path
) -> None:
    name = f"sinkout-{uuid.uuid4().hex[:8]}"

    def away() -> int:
        target.away(name)
        return 1

    CUTTERS[name] = cutter = Cutter(away, times=1, first=2, every=1)
    updates, counts = target.sinks()
    topology = word_count_into(name, corpus(tmp_path), updates, counts)
    with pytest.raises(SinkError) as caught:
        runner(topology, tmp_path, 2.0)
    assert cutter.cuts
    message = str(caught.value)
    assert re.match(rf"{target.kind} '(updates|counts)' task [01] lost ", message), message
    assert f"lost {target.shown} and could not reconnect within 2 s" in message
    assert "statestream.connectors.reconnect.secs" in message
    assert "s3cret" not in message
    assert "\n" not in message
    target.back()
    assert target.read() != (EVERY_UPDATE, EXPECTED)  # stopped before the end
    CUTTERS[name] = Cutter(away, times=0, first=0, every=0)
    ridden_out(runner(topology, tmp_path, 2.0))
    del CUTTERS[name]
    assert target.read() == (EVERY_UPDATE, EXPECTED)


#: Per topology, whether CountFailingOnce has failed (the bolt is copied per task).
FAILED: set[str] = set()


class CountFailingOnce(Count):
    """Count, failing one PREPARE once, so that the exactly-once run rewinds (a
    failed tuple no longer does: it is retried where it failed)."""

    def pre_prepare(self, txid: int) -> None:
        name = self.context.topology_name
        if name not in FAILED and txid >= 1:
            FAILED.add(name)
            raise RuntimeError("failing once, for a rewind")
        super().pre_prepare(txid)


def test_a_rewind_leaves_no_sink_connection_open(tmp_path: Path) -> None:
    """A rewind drops the sink tasks' instances as a crash would; the instances
    replacing them close the dropped ones' connections (not the garbage
    collector, with a ResourceWarning, some time later)."""
    target = Postgres()
    name = f"sinkout-{uuid.uuid4().hex[:8]}"
    try:
        updates, counts = target.sinks()
        b = TopologyBuilder(name)
        b.set_spout("lines", FileSpout(corpus(tmp_path)))
        b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
        b.set_bolt("count", CountFailingOnce(), 2).fields_grouping("split", ["word"])
        b.set_bolt("updates", updates, 2).shuffle_grouping("count")
        b.set_bolt("counts", counts, 2).fields_grouping("count", ["word"])
        CUTTERS[name] = Cutter(lambda: 0, times=0, first=0, every=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            result = run_it(b.build(), tmp_path, 30.0)
            gc.collect()
        del CUTTERS[name]
        assert name in FAILED and result.counters.get("rewinds") == 1
        assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
        assert target.cut(name) == 0  # none left open after the run either
        assert target.read() == (EVERY_UPDATE, EXPECTED)
    finally:
        target.close()


# -- the policy the sinks wait under (pure: a fake clock, no server) ------------------------
def test_reconnect_call_waits_out_a_lost_server_on_the_clock(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    policy = Reconnect("RedisSink 'out' task 0", "redis://:s3cret@h:1/0", clock, 5.0, SinkError)
    failures = [ConnectionError("reset"), ConnectionError("refused")]

    def write() -> str:
        if failures:
            raise failures.pop(0)
        return "written"

    with caplog.at_level("WARNING", logger="statestream"):
        assert policy.call(write, lambda exc: True) == "written"
    assert clock.monotonic() == pytest.approx(0.3)  # waited 0.1 s, then 0.2 s
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2  # one when the outage began, one when it ended
    assert "lost redis://:***@h:1/0: reset; reconnecting for up to 5 s" in lines[0]
    assert "reached redis://:***@h:1/0 again after 0.3 s" in lines[1]

    def refused() -> None:
        raise ValueError("refused row")

    with pytest.raises(ValueError):  # not a lost server: raised at once, not waited
        policy.call(refused, lambda exc: not isinstance(exc, ValueError))
    assert clock.monotonic() == pytest.approx(0.3)


def test_reconnect_call_stops_past_the_bound_with_the_connectors_error() -> None:
    clock = FakeClock()
    policy = Reconnect("PostgresSink 'out' task 1", "host=h password=s3cret", clock, 2.0, SinkError)

    def write() -> None:
        raise TargetUnreachable("PostgresSink 'out' task 1 cannot reach ...") from OSError(
            "connection refused"
        )

    with pytest.raises(SinkError) as caught:
        policy.call(write, lambda exc: True)
    assert clock.monotonic() == pytest.approx(2.0)  # waits end at the bound
    assert str(caught.value) == (
        "PostgresSink 'out' task 1 lost host=h password=*** and could not reconnect within 2 s "
        "(statestream.connectors.reconnect.secs): connection refused; what was committed "
        "stays, run again once the server is back"
    )


def test_a_connection_is_named_per_task_as_every_server_takes_it() -> None:
    context = mock_context("out sink", task_index=3, topology="word count ü" + "x" * 80)
    name = client_name(context)
    assert name.startswith("statestream/word_count_")
    assert " " not in name and name.isascii() and len(name) == 63
    assert client_name(mock_context("out", task_index=3, topology="t")) == "statestream/t/out/3"
