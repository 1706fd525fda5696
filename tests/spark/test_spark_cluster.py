"""local-cluster: an executor JVM SIGKILLed in the middle of a batch; the result is exact.

local-cluster needs its own SparkSession (two executor JVMs, about 15 s to
start), so the runs happen in one subprocess. With one file the split bolt
kills its own executor (the grandparent of its Python worker) the first time
it runs; with a folder (a partitioned source, read on the executors) the
spout's ``read`` of a range does. Spark retries the task on an executor that
lives (and the standalone worker starts a replacement).
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = "redis://127.0.0.1:6379/0"

SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys
    sys.path.insert(0, sys.argv[1])
    import wordcount
    from pyspark.sql import SparkSession
    from statestream import FileSpout, TopologyBuilder
    from statestream._registry import open_provider
    from statestream.runtime.spark import SPARK_DEFAULTS, SparkRuntime

    tmp, prefix, url = sys.argv[2:5]

    def kill_my_executor(flag):
        if not os.path.exists(flag):
            open(flag, "w").close()
            daemon = os.getppid()
            with open(f"/proc/{daemon}/stat") as f:
                jvm = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{jvm}/cmdline") as f:
                cmdline = f.read()
            assert "CoarseGrainedExecutorBackend" in cmdline, cmdline
            os.kill(jvm, signal.SIGKILL)

    class KillMyExecutor(wordcount.SplitSentence):
        def execute(self, tuple, collector):
            kill_my_executor(f"{tmp}/killed-file")
            super().execute(tuple, collector)

    class KillingFolderSpout(FileSpout):
        def read(self, partition, start, end):
            kill_my_executor(f"{tmp}/killed-folder")
            return super().read(partition, start, end)

    builder = SparkSession.builder.master("local-cluster[2,1,1024]")
    for key, value in SPARK_DEFAULTS.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    out = {}
    for source in ("file", "folder"):
        b = TopologyBuilder("wordcount")
        if source == "file":
            b.set_spout("sentences", FileSpout(f"{tmp}/in.txt"))
            b.set_bolt("split", KillMyExecutor(), 2).shuffle_grouping("sentences")
        else:
            # Three files of 100 lines, a batch at most one file's bytes: three batches.
            b.set_spout("sentences", KillingFolderSpout(f"{tmp}/in", batch_bytes=int(sys.argv[5])))
            b.set_bolt("split", wordcount.SplitSentence(), 2).shuffle_grouping("sentences")
        b.set_bolt("count", wordcount.WordCount(), 2).fields_grouping("split", ["word"])
        conf = {
            "topology.state.provider": "redis",
            "topology.state.provider.config": {"url": url, "key_prefix": prefix + source},
        }
        result = SparkRuntime(b.build(), conf, spark=spark, batch_size=100).run(until_idle=True)
        counts = {}
        with open_provider(
            "redis", conf["topology.state.provider.config"], scope="wordcount"
        ) as provider:
            for i in range(2):
                counts.update(provider.get_state(f"count-{i}").items())
        out[source] = {"counts": counts, "counters": result.counters}
    print(json.dumps(out))
    spark.stop()
    """
)


def test_sigkilled_executor_costs_a_retry_not_a_wrong_count(tmp_path: Path) -> None:
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip("no Redis on 127.0.0.1:6379")
    lines = [" ".join(f"w{(i * 3 + j) % 31}" for j in range(i % 8 + 1)) + "\n" for i in range(300)]
    (tmp_path / "in.txt").write_text("".join(lines))
    (tmp_path / "in").mkdir()
    for k in range(3):
        (tmp_path / "in" / f"part-{k}.txt").write_text("".join(lines[k * 100 : (k + 1) * 100]))
    biggest = max(f.stat().st_size for f in (tmp_path / "in").iterdir())
    prefix = f"sstest-{uuid.uuid4().hex[:12]}:"
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                SCRIPT,
                str(ROOT / "examples"),
                str(tmp_path),
                prefix,
                REDIS_URL,
                str(biggest),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
        client.close()
    assert proc.returncode == 0, proc.stderr[-4000:]
    expected = collections.Counter("".join(lines).split())
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for source in ("file", "folder"):
        assert (tmp_path / f"killed-{source}").exists(), f"no executor was killed ({source})"
        assert out[source]["counts"] == expected, source
        assert out[source]["counters"]["batches"] == 3, source
