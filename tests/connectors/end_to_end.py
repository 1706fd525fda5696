"""examples/stream_to_postgres.py end to end, against the real servers, killed and restarted.

Shared by tests/connectors/test_end_to_end*.py (small inputs, a few kills) and
bench/bench_connectors_kill.py (200,000 lines, 20 kills). What runs:

* a **source**: a stream of its own (unique name) on Redis, JetStream,
  RabbitMQ (a stream queue) or Kafka (a topic of 3 partitions), fed by ``examples/produce_lines.py`` as a
  subprocess, at a set rate, *while* the pipeline runs;
* a **database**: a PostgreSQL schema of its own holding the example's two
  tables (``examples/stream_to_postgres.sql``), reached through a DSN whose
  ``search_path`` is that schema (so the sinks' guard table lands there too);
* the pipeline, ``statestream run examples/stream_to_postgres.py``, SIGKILLed
  at random moments of its work by ``tests/kill_loop.py`` (or its workers by
  ``tests/runtime/test_workers_kill.py``'s helpers), then run to the end with
  ``--until-idle`` once the producer is done;
* the **verdict** (:func:`check`): ``word_updates`` holds every
  ``(word, k)`` for k = 1 .. the word's count once (duplicates and gaps
  counted), and ``word_totals`` equals ``collections.Counter`` of the input.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "runtime"))

from kill_loop import cli, sigkill_runs  # noqa: E402
from test_workers_kill import _kill_workers, _Run, _wait_gone  # noqa: E402

from statestream.testing import random_text  # noqa: E402

EXAMPLE = str(ROOT / "examples" / "stream_to_postgres.py")
PRODUCER = str(ROOT / "examples" / "produce_lines.py")
TABLES_SQL = ROOT / "examples" / "stream_to_postgres.sql"
POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
URLS = {
    "redis": "redis://127.0.0.1:6379/0",
    "jetstream": "nats://127.0.0.1:4222",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672/%2F",
}
SOURCES = tuple(URLS)  # Kafka's broker is a test's own (tests/kafka_broker.py): no fixed URL
KAFKA_PARTITIONS = 3
WORDS_PER_LINE = 10  # random_text's
FIRST = 100  # lines in the source before the pipeline starts


# -- the source ---------------------------------------------------------------------------


@dataclass
class Source:
    """A stream of the test's own on one of the three brokers."""

    kind: str
    url: str
    stream: str

    def delete(self) -> None:
        """Remove the stream (or queue) and everything in it."""
        if self.kind == "redis":
            import redis

            client = redis.Redis.from_url(self.url)
            client.delete(self.stream)
            client.close()
        elif self.kind == "jetstream":
            asyncio.run(_delete_jetstream(self.url, self.stream))
        elif self.kind == "kafka":
            from confluent_kafka.admin import AdminClient

            admin = AdminClient({"bootstrap.servers": self.url.removeprefix("kafka://")})
            for future in admin.delete_topics([self.stream]).values():
                future.result(timeout=10)
        else:
            import pika

            connection = pika.BlockingConnection(pika.URLParameters(self.url))
            connection.channel().queue_delete(self.stream)
            connection.close()


async def _delete_jetstream(url: str, stream: str) -> None:
    import nats
    from nats.js.errors import NotFoundError

    nc = await nats.connect(url, allow_reconnect=False)
    try:
        with contextlib.suppress(NotFoundError):
            await nc.jetstream().delete_stream(stream)
    finally:
        await nc.close()


@contextlib.contextmanager
def source(kind: str, url: str | None = None) -> Iterator[Source]:
    """A fresh stream named ``e2e-<random>`` on ``kind``'s server, deleted afterwards
    (Kafka: ``url`` is ``kafka://host:port``, the topic made here with 3 partitions)."""
    src = Source(kind, url or URLS[kind], f"e2e-{uuid.uuid4().hex[:10]}")
    if kind == "kafka":
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": src.url.removeprefix("kafka://")})
        topic = NewTopic(src.stream, KAFKA_PARTITIONS, 1)
        for future in admin.create_topics([topic]).values():
            future.result(timeout=10)
    try:
        yield src
    finally:
        with contextlib.suppress(Exception):  # a server stopped by the test
            src.delete()


def start_producer(
    src: Source, corpus: Path, rate: float, skip: int = 0, lines: int | None = None
) -> subprocess.Popen[str]:
    """``produce_lines.py`` sending ``corpus`` (from line ``skip``, ``lines`` of them) to
    ``src`` at ``rate`` lines a second, as a subprocess."""
    args = [PRODUCER, "--to", src.url, "--stream", src.stream, "--from", str(corpus)]
    args += ["--rate", str(rate), "--skip", str(skip)]
    if lines is not None:
        args += ["--lines", str(lines)]
    return subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def start_feeding(src: Source, corpus: Path, rate: float) -> subprocess.Popen[str]:
    """Send the first ``FIRST`` lines of ``corpus`` now (the stream must exist before the
    pipeline starts: a missing one is an error), and the rest at ``rate`` by a
    producer left running."""
    wait_producer(start_producer(src, corpus, 0, lines=FIRST))
    return start_producer(src, corpus, rate, skip=FIRST)


def wait_producer(proc: subprocess.Popen[str], timeout: float = 600) -> None:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"the producer failed: {out}"


# -- the database -------------------------------------------------------------------------


@contextlib.contextmanager
def database() -> Iterator[str]:
    """A DSN whose ``search_path`` is a fresh schema holding the example's tables; the
    schema is dropped afterwards."""
    import psycopg

    schema = f"e2e_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path TO {schema}")
        conn.execute(TABLES_SQL.read_text())
    try:
        yield f"{POSTGRES}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@dataclass
class Verdict:
    """What the two tables hold against the input's true counts."""

    rows: int  # rows of word_updates
    duplicates: int  # (word, k) rows beyond the first of each
    gaps: int  # (word, k), k = 1 .. the word's final count, with no row
    beyond: int  # rows with a k above the word's true count
    totals_exact: bool  # word_totals == Counter of the input

    @property
    def exact(self) -> bool:
        return not (self.duplicates or self.gaps or self.beyond) and self.totals_exact


def check(dsn: str, truth: collections.Counter[str]) -> Verdict:
    import psycopg

    with psycopg.connect(dsn) as conn:
        updates = conn.execute("SELECT word, count FROM word_updates").fetchall()
        totals: dict[str, int] = dict(
            conn.execute("SELECT word, count FROM word_totals").fetchall()
        )
    seen: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for word, k in updates:
        seen[word][k] += 1
    duplicates = sum(n - 1 for ks in seen.values() for n in ks.values())
    beyond = sum(1 for word, ks in seen.items() for k in ks if not 1 <= k <= truth.get(word, 0))
    gaps = sum(1 for word, n in truth.items() for k in range(1, n + 1) if k not in seen[word])
    return Verdict(len(updates), duplicates, gaps, beyond, totals == dict(truth))


# -- runs ---------------------------------------------------------------------------------


@contextlib.contextmanager
def pipeline_env(src: Source, dsn: str) -> Iterator[None]:
    """The example's environment variables, set for the ``statestream run`` processes
    started in the block (the kill loops pass ``os.environ`` on)."""
    values = {"LINES_URL": src.url, "LINES_STREAM": src.stream, "POSTGRES_DSN": dsn}
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def feeding(src: Source, dsn: str, corpus: Path, rate: float) -> Iterator[Callable[[], None]]:
    """:func:`pipeline_env` for the block, and ``corpus`` being produced into ``src``
    meanwhile (:func:`start_feeding`); yields a function that waits for the producer
    to finish (and fails if it did not)."""
    with pipeline_env(src, dsn):
        producer = start_feeding(src, corpus, rate)
        try:
            yield lambda: wait_producer(producer)
        finally:
            if producer.poll() is None:
                producer.kill()
                producer.wait()


def finish(settings: Sequence[str], timeout: float = 600, pipeline: str = EXAMPLE) -> None:
    """Run ``pipeline`` to the end of its source (``--until-idle``), exit 0."""
    final = subprocess.run(
        cli("run", pipeline, "--until-idle", "--no-progress", *settings),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert final.returncode == 0, final.stderr


def as_settings(conf: dict[str, Any]) -> list[str]:
    """``conf`` as ``--set`` options (values: scalars or flat mappings of strings)."""
    out: list[str] = []
    for key, value in conf.items():
        if isinstance(value, dict):
            value = "{" + ", ".join(f"{k}: '{v}'" for k, v in value.items()) + "}"
        out += ["--set", f"{key}={value}"]
    return out


@dataclass
class Result:
    kind: str
    runtime: str
    lines: int
    kills: int
    verdict: Verdict
    seconds: float
    errors: int = 0  # errors the run reported (broker_restart_run)


RUNTIMES = ("local", "workers", "spark")


def killed_run(runtime: str, src: Source, dsn: str, tmp: Path, **how: Any) -> Result:
    """The example run on ``runtime`` and killed as :func:`killed_runs` says (``how``:
    its keyword options: ``lines``, ``kills``, ``rate``, ``rng``, ...), then the
    tables checked."""
    started = time.monotonic()
    truth, killed = killed_runs(runtime, src, tmp, dsn=dsn, **how)
    label = {"workers": "workers 2", "spark": "spark local[2]"}.get(runtime, runtime)
    seconds = time.monotonic() - started
    return Result(src.kind, label, how["lines"], killed, check(dsn, truth), seconds)


def killed_runs(
    runtime: str,
    src: Source,
    tmp: Path,
    *,
    lines: int,
    kills: int,
    rate: float,
    rng: random.Random,
    spark: Any = None,
    state_prefix: str = "",
    dsn: str = POSTGRES,
    pipeline: str = EXAMPLE,
    interval_ms: int = 200,
    work_scale: int = 1,
) -> tuple[collections.Counter[str], int]:
    """Produce ``lines`` into ``src`` at ``rate`` while ``pipeline`` (the example by
    default; any topology file reading ``LINES_URL``/``LINES_STREAM``) runs and is
    killed ``kills`` times, then finish it; the input's true word counts and the
    SIGKILLs sent. The caller checks what the sinks wrote. ``runtime``:

    * ``local``: ``statestream run`` SIGKILLed each time at a random 1-6% of the
      input's words counted in that run (tests/kill_loop.py), state in sqlite;
    * ``workers``: ``topology.workers: 2``, one worker of each incarnation
      SIGKILLed (the supervisor restarts them from the last checkpoint), then a
      clean stop (SIGTERM) once the producer is done; state in sqlite;
    * ``spark``: ``statestream run --runner spark`` (a driver of its own,
      ``local[2,2]``) SIGKILLed a random 0.2-2 s after the count first showed
      work; the state on the shared Redis under ``state_prefix``; the stream is
      finished on ``spark`` (the caller's SparkSession, in this process).

    A checkpoint every ``interval_ms``; ``work_scale`` times the input's words is
    the work a local kill lands at 1-6% of (higher: later kills, after more
    checkpoints).
    """
    path = tmp / "lines.txt"
    truth = random_text(path, lines)
    conf: dict[str, Any] = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp / "state.db")},
        "topology.state.checkpoint.interval.ms": interval_ms,
    }
    if runtime == "workers":
        conf["topology.workers"] = 2
    elif runtime == "spark":
        conf["topology.state.provider"] = "redis"
        conf["topology.state.provider.config"] = {"url": URLS["redis"], "key_prefix": state_prefix}
        # Several transactions over the input, so that a kill lands between two.
        conf["statestream.spark.batch.size"] = max(100, lines // 4)
    settings = as_settings(conf)
    with feeding(src, dsn, path, rate) as fed:
        if runtime == "local":
            killed = sigkill_runs(
                [pipeline, *settings], kills=kills, component="count", rng=rng,
                work=lines * WORDS_PER_LINE * work_scale,
            )  # fmt: skip
        elif runtime == "workers":
            killed = _kill_workers_then_stop([pipeline, *settings], kills, rng, fed)
        else:
            killed = sigkill_runs(
                [pipeline, "--runner", "spark", *settings],
                kills=kills, component="count", rng=rng, delay=(0.2, 2.0),
            )  # fmt: skip
        fed()
        if runtime == "spark":
            _finish_on_spark(spark, conf, pipeline)
        else:
            finish(settings, pipeline=pipeline)
    return truth, killed


# The supervisor stops a run whose workers died 5 times within a minute
# (runtime/workers/supervisor.py): at most this many worker kills per supervisor.
WORKER_KILLS_PER_RUN = 4


def _kill_workers_then_stop(
    args: Sequence[str], kills: int, rng: random.Random, fed: Callable[[], None]
) -> int:
    """``kills`` worker SIGKILLs, ``WORKER_KILLS_PER_RUN`` per supervisor; a supervisor
    that has had its share is SIGKILLed itself (its workers die with it) and a new
    one continues; the last is stopped cleanly once the producer is done. Returns
    the SIGKILLs sent (supervisors included)."""
    sent = 0
    while True:
        share = min(WORKER_KILLS_PER_RUN, kills)
        kills -= share
        run = _Run(list(args))
        try:
            _kill_workers(run, share, rng)
            sent += share
            if kills:
                run.proc.send_signal(signal.SIGKILL)
                assert run.wait(60) == -signal.SIGKILL, run.log()
                _wait_gone(run.workers, 10.0)  # or the next run would share the store
                sent += 1
                continue
            fed()
            run.proc.send_signal(signal.SIGTERM)
            code = run.wait(120)
            assert code in (0, 128 + signal.SIGTERM), run.log()
            return sent
        finally:
            run.cleanup()


def _finish_on_spark(spark: Any, conf: dict[str, Any], pipeline: str = EXAMPLE) -> None:
    from statestream import load_topology
    from statestream.runtime.spark import SparkRuntime

    result = SparkRuntime(load_topology(pipeline), conf, spark=spark).run(until_idle=True)
    assert not result.errors, result.errors


# -- a broker restarted mid-run -----------------------------------------------------------

RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class Server:
    """A broker of the test's own, on spare ports with its data in ``workdir``, which
    :meth:`restart` stops (SIGTERM: it saves and closes as on any shutdown) and
    starts again on the same ports and data. The shared servers are never touched:

    * ``redis``: redis-server with the append-only file on (``--appendonly yes``);
    * ``jetstream``: nats-server with JetStream's file store in ``workdir``;
    * ``rabbitmq``: a second RabbitMQ node (its own node name, AMQP and
      distribution ports, database, logs, cookie, no plugins), about 15 s a start.
    """

    def __init__(self, kind: str, workdir: Path) -> None:
        from redis_server import free_port

        self.kind = kind
        self.workdir = workdir
        self.port = free_port()
        self.dist_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        scheme = {"redis": "redis://", "jetstream": "nats://", "rabbitmq": "amqp://guest:guest@"}
        path = {"redis": "/0", "jetstream": "", "rabbitmq": "/%2F"}
        return f"{scheme[self.kind]}127.0.0.1:{self.port}{path[self.kind]}"

    def _command(self) -> tuple[list[str], dict[str, str]]:
        w, port = str(self.workdir), str(self.port)
        if self.kind == "redis":
            argv = ["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", ""]
            return [*argv, "--appendonly", "yes", "--dir", w], dict(os.environ)
        if self.kind == "jetstream":
            return ["nats-server", "-a", "127.0.0.1", "-p", port, "-js", "-sd", w], dict(os.environ)
        (self.workdir / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{port}\nloopback_users = none\n"
        )
        (self.workdir / "enabled_plugins").write_text("[].\n")
        (self.workdir / "env.conf").write_text("")
        env = {
            **os.environ,
            "HOME": w,  # its own Erlang cookie
            "RABBITMQ_NODENAME": f"e2e{self.port}@localhost",
            "RABBITMQ_NODE_PORT": port,
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": f"{w}/mnesia",
            "RABBITMQ_LOG_BASE": f"{w}/log",
            "RABBITMQ_CONFIG_FILE": f"{w}/rabbitmq.conf",
            "RABBITMQ_ENABLED_PLUGINS_FILE": f"{w}/enabled_plugins",
            "RABBITMQ_CONF_ENV_FILE": f"{w}/env.conf",
            "RABBITMQ_PID_FILE": f"{w}/pid",
        }
        return [RABBITMQ_SERVER], env

    def start(self, timeout: float = 180) -> None:
        import socket

        argv, env = self._command()
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.workdir
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{argv[0]} exited with {self.proc.returncode}"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"{argv[0]} did not listen on port {self.port} in {timeout} s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=120)
            self.proc = None

    def restart(self, down: float = 1.0) -> None:
        """Stop the server, leave it down ``down`` seconds, start it again."""
        self.stop()
        time.sleep(down)
        self.start()


def committed_words(dsn: str) -> int:
    """The words counted in ``word_totals`` (what the sinks committed so far)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT coalesce(sum(count), 0) FROM word_totals").fetchone()
    return int(row[0]) if row else 0


def wait_committed(dsn: str, words: int, run: subprocess.Popen[str], log: Path) -> None:
    """Wait until the sinks have committed ``words`` words, while ``run`` lives."""
    deadline = time.monotonic() + 300
    while committed_words(dsn) < words:
        assert run.poll() is None, f"the run ended (exit {run.returncode}):\n{log.read_text()}"
        assert time.monotonic() < deadline, f"{words} words not committed:\n{log.read_text()}"
        time.sleep(0.1)


def produce_when_ready(src: Source, corpus: Path, skip: int, timeout: float = 120) -> None:
    """Produce ``corpus`` from line ``skip`` into ``src`` just after its broker restarted:
    a RabbitMQ node listens before it has recovered its queues (a declare meanwhile
    is refused: the queue's "home node ... is down or inaccessible"), so a producer
    that failed before it sent a line is started again."""
    deadline = time.monotonic() + timeout
    while True:
        proc = start_producer(src, corpus, 0, skip=skip)
        out, _ = proc.communicate(timeout=600)
        if proc.returncode == 0:
            return
        assert "after 0 lines" in out and time.monotonic() < deadline, out
        time.sleep(0.5)


def broker_restart_run(server: Server, dsn: str, tmp: Path, *, lines: int) -> Result:
    """Half the lines produced; the pipeline started (it runs on, no ``--until-idle``);
    once the sinks committed something, the broker restarted under it; the other
    half produced; the run must reconnect and commit every word (it is never
    restarted), then it is stopped cleanly and the tables checked."""
    path = tmp / "lines.txt"
    truth = random_text(path, lines)
    src = Source(server.kind, server.url, f"e2e-{uuid.uuid4().hex[:10]}")
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp / "state.db")},
        "topology.state.checkpoint.interval.ms": 200,
    }
    log = tmp / "run.log"
    started = time.monotonic()
    wait_producer(start_producer(src, path, 0, lines=lines // 2))
    with pipeline_env(src, dsn), log.open("w") as err:
        run = subprocess.Popen(
            cli("run", EXAMPLE, "--no-progress", *as_settings(conf)),
            stdout=subprocess.DEVNULL, stderr=err, text=True,
        )  # fmt: skip
        try:
            wait_committed(dsn, 1, run, log)
            server.restart()
            produce_when_ready(src, path, skip=lines // 2)
            wait_committed(dsn, sum(truth.values()), run, log)
            run.send_signal(signal.SIGTERM)
            code = run.wait(120)
            assert code in (0, 128 + signal.SIGTERM), log.read_text()
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    seconds = time.monotonic() - started
    found = re.search(r"stopped after [\d.]+ s, ([\d,]+) error", log.read_text())
    assert found is not None, log.read_text()
    errors = int(found.group(1).replace(",", ""))
    verdict = check(dsn, truth)
    return Result(src.kind, "local, broker restarted", lines, 0, verdict, seconds, errors)


def describe(result: Result) -> dict[str, Any]:
    v = result.verdict
    return {
        "source": result.kind,
        "runtime": result.runtime,
        "lines": result.lines,
        "kills": result.kills,
        "duplicates": v.duplicates,
        "gaps": v.gaps,
        "beyond": v.beyond,
        "totals": "equal" if v.totals_exact else "differ",
        "exact": "yes" if v.exact else "NO",
        "errors": result.errors,
        "seconds": round(result.seconds, 1),
    }
