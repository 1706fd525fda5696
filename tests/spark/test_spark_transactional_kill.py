"""SIGKILL the transactional global count on Spark, and hand a killed local run to Spark.

Each killed run is a ``statestream run --runner spark`` process of its own
(its own SparkSession, about 10 s to start), killed a random moment after
the committer ``sum`` first showed work in the progress lines; the run that
finishes the store uses the test session's SparkSession. The coordinator's
state is on Redis (the Spark executors and the driver share it), the count
in the example's own SQLite file. The seed of the kill timings is printed.
"""

from __future__ import annotations

import sqlite3
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statestream.runtime.spark import SparkRuntime

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import transactional_global_count as global_count
from kill_loop import seeded_rng, sigkill_runs

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.redis]

REDIS_URL = "redis://127.0.0.1:6379/0"
WORDS = 15_000
TAKE = 1000  # 3,000 words a transaction: 5 transactions
# The local runtime is faster: 4 transactions of 75,000 words, so that a kill lands
# mid-way. With 60,000 words the whole local run took about 0.25 s, and a kill
# (at 1-6% of the work, seen on a 50 ms progress line, plus up to 0.1 s) could
# land after the last commit (1 run in 3 with one seed, in a CI run).
LOCAL_WORDS = 300_000
LOCAL_TAKE = 25_000


@pytest.fixture
def key_prefix() -> Iterator[str]:
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(REDIS_URL)
    prefix = f"sstest-tx-{uuid.uuid4().hex[:10]}:"
    yield prefix
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)
    client.close()


def settings(db: Path, prefix: str, words: int = WORDS, take: int = TAKE) -> list[str]:
    return [
        "--set", "topology.state.provider=redis",
        "--set", f"topology.state.provider.config={{url: '{REDIS_URL}', key_prefix: '{prefix}'}}",
        "--set", f"global-count.database={db}",
        "--set", f"global-count.tuples={words}",
        "--set", f"global-count.take={take}",
        "--set", "topology.max.spout.pending=2",
    ]  # fmt: skip


def finish_on_spark(spark: Any, db: Path, prefix: str, words: int = WORDS, take: int = TAKE) -> Any:
    conf = {
        "topology.state.provider": "redis",
        "topology.state.provider.config": {"url": REDIS_URL, "key_prefix": prefix},
        "global-count.database": str(db),
        "global-count.tuples": words,
        "global-count.take": take,
        "topology.max.spout.pending": 2,
    }
    return SparkRuntime(global_count.topology(), conf, spark=spark).run(until_idle=True)


def assert_exact(db: Path, words: int = WORDS, transactions: int = 5) -> None:
    """Every word counted once, in ``transactions`` transactions, and one more,
    empty, when two were started together as the words ran out."""
    ((count, txid),) = stored_count(db)
    assert count == words and txid in (transactions, transactions + 1)


def stored_count(db: Path) -> list[tuple[int, int]]:
    """The committed (count, txid), or [] if the run died before it made its table."""
    conn = sqlite3.connect(db)
    try:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'counts'"
        ).fetchall()
        return conn.execute("SELECT count, txid FROM counts").fetchall() if exists else []
    finally:
        conn.close()


def test_global_count_sigkilled_on_spark_finishes_exact(
    spark_session: Any, tmp_path: Path, key_prefix: str
) -> None:
    db = tmp_path / "count.db"
    example = str(ROOT / "examples" / "transactional_global_count.py")
    killed = sigkill_runs(
        [example, "--until-idle", "--runner", "spark", *settings(db, key_prefix)],
        # Two runs, not three: each starts a Spark driver of its own (about 15 s
        # a run), and the suite must stay well under 15 minutes on 2 cores.
        kills=2,
        component="sum",
        rng=seeded_rng(),
        delay=(0.1, 1.5),
    )
    assert killed >= 1, "neither run was killed mid-way"
    result = finish_on_spark(spark_session, db, key_prefix)
    assert not result.errors
    assert_exact(db)


def test_a_local_run_sigkilled_mid_way_is_finished_exact_by_spark(
    spark_session: Any, tmp_path: Path, key_prefix: str
) -> None:
    db = tmp_path / "count.db"
    example = str(ROOT / "examples" / "transactional_global_count.py")
    local = settings(db, key_prefix, LOCAL_WORDS, LOCAL_TAKE)
    killed = sigkill_runs(
        [example, "--until-idle", "--runner", "local", *local],
        kills=1,
        component="partial-count",
        rng=seeded_rng(),
        work=LOCAL_WORDS,  # killed early in its input, on a core of any speed
    )
    assert killed == 1, "the local run ended before it could be killed"
    committed = stored_count(db)
    assert committed == [] or committed[0][0] < LOCAL_WORDS
    result = finish_on_spark(spark_session, db, key_prefix, LOCAL_WORDS, LOCAL_TAKE)
    assert not result.errors
    assert_exact(db, LOCAL_WORDS, 4)
