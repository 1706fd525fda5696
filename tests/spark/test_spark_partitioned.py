"""A partitioned source on Spark: the executors read the ranges, the driver plans them.

A folder word count (FileSpout over a folder) runs on Spark with batches of a
few hundred bytes: the driver never calls ``next_tuple`` (the spout here
refuses it), the counts are exact, and a driver that dies between PREPARE and
COMMIT (or after the COMMIT) is recovered from the ranges stored with the
checkpoint. A store either runtime left is finished by the other.
"""

from __future__ import annotations

import collections
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from statestream import FileSpout, Topology, TopologyBuilder
from statestream._registry import open_provider
from statestream.runtime.local import LocalRuntime
from statestream.runtime.spark import SparkRuntime
from statestream.testing import SimulatedCrash, crash_and_recover, crash_at_checkpoint
from tests.word_bolts import Count, Split

pytestmark = pytest.mark.spark

REDIS_URL = "redis://127.0.0.1:6379/0"


class DriverRefusingSpout(FileSpout):
    """A folder FileSpout whose next_tuple fails: on Spark no record may pass the driver."""

    def next_tuple(self) -> None:
        if getattr(self, "_tasks_read", False):
            return super().next_tuple()
        raise AssertionError("next_tuple() called on a partitioned source on Spark")


#: Each spout task's batch cap: four files of ~600 bytes (two per task) make a few
#: batches, enough for a crash after batch 1 to leave work, and no more (a batch
#: costs about a second on a loaded two-core machine).
BATCH_BYTES = 500


def folder(tmp_path: Path, files: int = 4, lines: int = 60) -> Path:
    rng = random.Random(3)
    root = tmp_path / "in"
    root.mkdir()
    for f in range(files):
        (root / f"f{f}.txt").write_text(
            "".join(
                " ".join(f"w{rng.randrange(40)}" for _ in range(rng.randrange(1, 6))) + "\n"
                for _ in range(lines)
            )
        )
    return root


def topology(
    root: Path, spout: type[FileSpout] = FileSpout, batch_bytes: int = BATCH_BYTES
) -> Topology:
    b = TopologyBuilder("folder-wc")
    b.set_spout("lines", spout(root, batch_bytes=batch_bytes), 2)
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    return b.build()


def conf_for(tmp_path: Path) -> dict[str, Any]:
    return {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "statestream.state.exactly.once": True,
        "topology.state.checkpoint.interval.ms": 50,
    }


def counts(tmp_path: Path) -> dict[str, int]:
    got: dict[str, int] = {}
    with open_provider(
        "sqlite", {"path": str(tmp_path / "state.db")}, scope="folder-wc"
    ) as provider:
        for i in range(2):
            got.update(dict(provider.get_state(f"count-{i}").items()))
    return got


def expected(root: Path) -> collections.Counter[str]:
    return collections.Counter(w for f in sorted(root.iterdir()) for w in f.read_text().split())


def test_executors_read_the_folder(spark_session: Any, tmp_path: Path) -> None:
    root = folder(tmp_path)
    rt = SparkRuntime(topology(root, DriverRefusingSpout), conf_for(tmp_path), spark=spark_session)
    result = rt.run(until_idle=True)
    assert not result.errors, result.errors
    size = sum(f.stat().st_size for f in root.iterdir())
    # Two spout tasks, each at most BATCH_BYTES a batch.
    assert result.counters["batches"] >= size // (2 * BATCH_BYTES)
    assert counts(tmp_path) == expected(root)
    lines = sum(len(f.read_text().splitlines()) for f in root.iterdir())
    assert result.components["lines"].emitted == lines
    # Spark acks a batch's tuples when it commits: every line, as the local runtime does.
    assert result.components["lines"].acked == lines
    local_conf = conf_for(tmp_path / "local")
    (tmp_path / "local").mkdir()
    local = LocalRuntime(topology(root), local_conf).run(until_idle=True)
    assert local.components["lines"].acked == lines


@pytest.mark.parametrize("point", ["prepared", "committed"])
def test_driver_crash_then_spark_or_local_finishes(
    spark_session: Any, tmp_path: Path, point: str
) -> None:
    """The driver dies after batch 1 was prepared (or committed); a Spark run over the
    same store finishes it (prepared), or the local runtime does (committed)."""
    root = folder(tmp_path)
    conf = conf_for(tmp_path)

    def crash(at: str, txid: int) -> None:
        if at == point and txid == 1:
            raise SimulatedCrash(f"driver killed after batch {txid} was {at}")

    first = SparkRuntime(topology(root), conf, spark=spark_session)
    first.fault_hook = crash
    with pytest.raises(SimulatedCrash):
        first.run(until_idle=True)
    assert counts(tmp_path) != expected(root)
    if point == "prepared":
        result = SparkRuntime(topology(root), conf, spark=spark_session).run(until_idle=True)
        assert result.counters["recovered"] == 1
    else:
        result = LocalRuntime(topology(root), conf).run(until_idle=True)
    assert not result.errors, result.errors
    assert counts(tmp_path) == expected(root)


def test_local_crash_then_spark_finishes(spark_session: Any, tmp_path: Path) -> None:
    """The local runtime dies once its bolts acked PREPARE(1); Spark rolls 1 back and
    reads on from the files' offsets stored with 0: exact. Enough lines that the local
    run reaches a checkpoint before its end; Spark reads the rest in one or two batches."""
    root = folder(tmp_path, files=6, lines=200)
    conf = conf_for(tmp_path)

    class Stop(Exception):
        """Raised between the crash and crash_and_recover's local restart: Spark restarts."""

    def stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        crash_and_recover(
            topology(root),
            # A few lines in flight: the spout waits at the bound, and a spout
            # waiting with nothing else moving takes a checkpoint at once, so
            # PREPARE(1) comes early whatever the machine's speed (a 5 ms interval
            # alone was passed by a fast run: the crash point never reached).
            {
                **conf,
                "topology.state.checkpoint.interval.ms": 5,
                "topology.max.spout.pending": 20,
            },
            at=crash_at_checkpoint("count", "prepare", txid=1),
            between=stop,
        )
    assert counts(tmp_path) != expected(root)
    result = SparkRuntime(topology(root, batch_bytes=4000), conf, spark=spark_session).run(
        until_idle=True
    )
    assert not result.errors, result.errors
    assert counts(tmp_path) == expected(root)


def read_on_exact(
    tmp_path: Path, run: Callable[[], Any], produce: Callable[[int], None], lines: list[str]
) -> None:
    """240 lines counted exactly by a run, then 60 more by a second run that reads on
    from the positions the first stored (it emits those 60 only)."""
    produce(240)
    first = run()
    assert not first.errors, first.errors
    assert counts(tmp_path) == collections.Counter(" ".join(lines).split())
    produce(60)
    second = run()
    assert not second.errors, second.errors
    assert second.components["lines"].emitted == 60
    assert counts(tmp_path) == collections.Counter(" ".join(lines).split())


@pytest.mark.redis
def test_executors_read_redis_streams(spark_session: Any, tmp_path: Path) -> None:
    """Two Redis streams, a partition each: the executors read the entries after the
    stored ids up to each stream's last id (the driver's next_tuple refuses); entries
    added later are read by a second run from the ids the first stored: exact."""
    redis = pytest.importorskip("redis")
    from statestream.connectors import RedisStreamSpout

    class RefusingStreams(RedisStreamSpout):
        def next_tuple(self) -> None:
            raise AssertionError("next_tuple() called on a partitioned source on Spark")

    client = redis.Redis.from_url(REDIS_URL)
    streams = [f"sstest-{uuid.uuid4().hex[:10]}-{i}" for i in range(2)]
    rng = random.Random(5)
    lines: list[str] = []

    def produce(n: int) -> None:
        for _ in range(n):
            line = " ".join(f"w{rng.randrange(30)}" for _ in range(rng.randrange(1, 5)))
            client.xadd(streams[len(lines) % 2], {"line": line})
            lines.append(line)

    def run() -> Any:
        b = TopologyBuilder("folder-wc")
        # One task owns both streams; pages of 50 entries.
        b.set_spout("lines", RefusingStreams(streams, ["line"], REDIS_URL, count=50))
        b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
        b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
        return SparkRuntime(b.build(), conf_for(tmp_path), spark=spark_session).run(until_idle=True)

    try:
        read_on_exact(tmp_path, run, produce, lines)
    finally:
        client.delete(*streams)
        client.close()


class ReplayOnStart(FileSpout):
    """A folder FileSpout restored from a position that lists one failed line waiting
    for replay (as a local run's checkpoint may): a line at an offset past its file's
    end, so that no range reads it again."""

    def seek(self, position: Any) -> None:
        if position is None and self._task == 0:
            name = self.partitions()[0]
            position = {
                "path": self._path,
                "partitions": {},
                "replay": [[name, 10**6, "replayed words"]],
                "tasks": 2,
            }
        super().seek(position)


def test_a_stored_replay_is_emitted_by_the_driver(spark_session: Any, tmp_path: Path) -> None:
    """Failed records a restored position holds are emitted on Spark (through the
    driver) once, besides the ranges the executors read."""
    root = folder(tmp_path)
    result = SparkRuntime(
        topology(root, ReplayOnStart, batch_bytes=4000), conf_for(tmp_path), spark=spark_session
    ).run(until_idle=True, duration=120)
    assert not result.errors, result.errors
    assert result.reason == "idle"
    assert counts(tmp_path) == expected(root) + collections.Counter(["replayed", "words"])
    # The replayed record (acked by its message id) and the ranges' lines, each once.
    lines = sum(len(f.read_text().splitlines()) for f in root.iterdir())
    assert result.components["lines"].acked == lines + 1


def test_executors_read_jetstream_streams(spark_session: Any, tmp_path: Path) -> None:
    """Two JetStream streams, a partition each: the executors read the messages from
    the stored sequences up to each stream's last (the driver's next_tuple refuses),
    through pull consumers of their own; messages published later are read by a second
    run from the sequences the first stored: exact."""
    nats = pytest.importorskip("nats")
    import asyncio

    from statestream.connectors import JetStreamSpout

    class RefusingStreams(JetStreamSpout):
        def next_tuple(self) -> None:
            raise AssertionError("next_tuple() called on a partitioned source on Spark")

    streams = [f"sstest-{uuid.uuid4().hex[:10]}-{i}" for i in range(2)]
    rng = random.Random(6)
    lines: list[str] = []

    async def on_server(what: Any) -> None:
        nc = await nats.connect("nats://127.0.0.1:4222")
        try:
            await what(nc.jetstream())
        finally:
            await nc.close()

    def produce(n: int) -> None:
        async def publish(js: Any) -> None:
            for _ in range(n):
                line = " ".join(f"w{rng.randrange(30)}" for _ in range(rng.randrange(1, 5)))
                await js.publish(f"{streams[len(lines) % 2]}.lines", line.encode())
                lines.append(line)

        asyncio.run(on_server(publish))

    def run() -> Any:
        b = TopologyBuilder("folder-wc")
        # One task owns both streams; fetches of 50 messages.
        b.set_spout("lines", RefusingStreams(streams, count=50))
        b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
        b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
        return SparkRuntime(b.build(), conf_for(tmp_path), spark=spark_session).run(until_idle=True)

    async def create(js: Any) -> None:
        for s in streams:
            await js.add_stream(name=s, subjects=[f"{s}.lines"])

    async def delete(js: Any) -> None:
        for s in streams:
            await js.delete_stream(s)

    asyncio.run(on_server(create))
    try:
        read_on_exact(tmp_path, run, produce, lines)
    finally:
        asyncio.run(on_server(delete))
