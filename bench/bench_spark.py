"""Word count on the spark runtime vs the local runtime, and the cost of a near-empty batch.

    python bench/bench_spark.py [--sentences 200000] [--batch 50000] [--local-cluster]

Each configuration runs in its own process (a SparkSession per process) over
the same generated corpus (bench/corpus.py, fixed seed) and is checked
against collections.Counter (counts read back through the state provider)
before its numbers are printed. Spark rows report words/s twice: with the
session start-up included (what a user waits for) and excluding it.
``--local-cluster`` adds local-cluster[1,1,1024] and local-cluster[2,1,1024]
rows (Redis provider; each starts its own executor JVMs).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statestream import Spout

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

REDIS_URL = "redis://127.0.0.1:6379/0"


def provider_conf(provider: str) -> dict[str, Any]:
    if provider == "sqlite":
        path = os.path.join(tempfile.mkdtemp(prefix="ssbench-"), "state.db")
        return {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": path, "synchronous": "normal"},
        }
    if provider == "redis":
        return {
            "topology.state.provider": "redis",
            "topology.state.provider.config": {
                "url": REDIS_URL,
                "key_prefix": f"ssbench-{uuid.uuid4().hex[:10]}:",
            },
        }
    return {"topology.state.provider": provider}


def read_counts(conf: Mapping[str, Any]) -> dict[str, int]:
    from statestream._registry import open_provider

    counts: dict[str, int] = {}
    with open_provider(
        conf["topology.state.provider"], conf["topology.state.provider.config"], scope="wordcount"
    ) as provider:
        for i in range(2):
            counts.update(provider.get_state(f"count-{i}").items())
    return counts


def drop_redis(conf: Mapping[str, Any]) -> None:
    if conf["topology.state.provider"] != "redis":
        return
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    prefix = conf["topology.state.provider.config"]["key_prefix"]
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)


def one_run(corpus: str, runner: str, provider: str, master: str, batch: int) -> dict[str, Any]:
    import wordcount

    conf: dict[str, Any] = {**provider_conf(provider), "wordcount.input": corpus}
    t0 = time.perf_counter()
    startup = 0.0
    batches = 0
    if runner == "local":
        from statestream.runtime.local import LocalRuntime

        LocalRuntime(wordcount.topology(), conf).run(until_idle=True)
    else:
        from pyspark.sql import SparkSession

        from statestream.runtime.spark import _SPARK_DEFAULTS, SparkRuntime

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = SparkSession.builder.master(master).appName("statestream-bench")
        for key, value in _SPARK_DEFAULTS.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        startup = time.perf_counter() - t0
        result = SparkRuntime(wordcount.topology(), conf, spark=spark, batch_size=batch).run(
            until_idle=True
        )
        batches = result.counters["batches"]
    elapsed = time.perf_counter() - t0
    with open(corpus) as f:
        expected = collections.Counter(f.read().split())
    exact = read_counts(conf) == dict(expected) if provider != "memory" else None
    drop_redis(conf)
    return {
        "runner": runner,
        "provider": provider,
        "master": master,
        "words": sum(expected.values()),
        "elapsed": elapsed,
        "startup": startup,
        "batches": batches,
        "exact": exact,
    }


class EmptyLines(Spout):
    """A spout that emits one empty line per ``next_tuple``, forever.

    With batch size 1 each transaction carries one tuple and no word: the
    latency of a batch with (almost) nothing in it. It rewinds (position/seek,
    the Spark driver reads it), and it keeps ``plan_batch``/``read_batch``, the
    replay contract spark.py used before it read spouts on the driver, so the
    same bench measures the runtime before and after that change.
    """

    def __init__(self) -> None:
        self.n = 0

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["offset", "line"])

    def next_tuple(self) -> None:
        self.collector.emit([self.n, ""])
        self.n += 1

    def position(self) -> Any:
        return self.n

    def seek(self, position: Any) -> None:
        self.n = position or 0

    def plan_batch(self, conf: Any, start: Any, max_items: int) -> Any:
        return (start or 0) + 1

    def read_batch(self, conf: Any, start: Any, end: Any) -> Any:
        return [[start or 0, ""]]


def empty_batches(master: str, provider: str, seconds: float) -> dict[str, Any]:
    """The latency of a transaction that carries one empty line (wordcount's shape)."""
    import wordcount
    from pyspark.sql import SparkSession

    from statestream import TopologyBuilder
    from statestream.runtime.spark import _SPARK_DEFAULTS, SparkRuntime

    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", EmptyLines())
    b.set_bolt("split", wordcount.SplitSentence(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", wordcount.WordCount(), 2).fields_grouping("split", ["word"])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName("statestream-bench")
    for key, value in _SPARK_DEFAULTS.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    conf = provider_conf(provider)
    SparkRuntime(b.build(), conf, spark=spark, batch_size=1).run(duration=3.0)  # warm up
    result = SparkRuntime(b.build(), conf, spark=spark, batch_size=1).run(duration=seconds)
    drop_redis(conf)
    return {"batches": result.counters["batches"], "elapsed": result.elapsed}


def sub(*args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--local-cluster", action="store_true")
    ap.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--empty", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        runner, provider, master, batch = args.one
        print(json.dumps(one_run(args.corpus, runner, provider, master, int(batch))))
        return
    if args.empty:
        print(json.dumps(empty_batches(args.empty[0], args.empty[1], 10.0)))
        return
    from corpus import corpus_path

    corpus = str(corpus_path(args.sentences))
    configs = [
        ("local", "memory", "-"),
        ("local", "sqlite", "-"),
        ("spark", "sqlite", "local[2]"),
        ("spark", "redis", "local[2]"),
    ]
    if args.local_cluster:
        configs += [
            ("spark", "redis", "local-cluster[1,1,1024]"),
            ("spark", "redis", "local-cluster[2,1,1024]"),
        ]
    rows = [sub("--one", r, p, m, str(args.batch), "--corpus", corpus) for r, p, m in configs]
    empty = {p: sub("--empty", "local[2]", p) for p in ("sqlite", "redis")}
    cmd = "python bench/bench_spark.py" + (
        f" --sentences {args.sentences}" if args.sentences != 200_000 else ""
    )
    cmd += f" --batch {args.batch}" if args.batch != 50_000 else ""
    cmd += " --local-cluster" if args.local_cluster else ""
    print(f"command: {cmd}")
    print(
        f"corpus: {args.sentences:,} sentences, {rows[0]['words']:,} words; "
        f"spark batch: {args.batch:,} lines; python {sys.version.split()[0]}"
    )
    print()
    print(
        "| runtime | provider | master | batches | start-up s | total s | "
        "words/s (start-up included) | words/s (excluded) | exact |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        run_s = r["elapsed"] - r["startup"]
        print(
            f"| {r['runner']} | {r['provider']} | {r['master']} | {r['batches'] or '-'} | "
            f"{r['startup']:.1f} | {r['elapsed']:.1f} | {r['words'] / r['elapsed']:,.0f} | "
            f"{r['words'] / run_s:,.0f} | {r['exact']} |"
        )
    print()
    print("| one-empty-line batch (local[2], wordcount shape) | batches | mean latency ms |")
    print("|---|---:|---:|")
    for p, e in empty.items():
        print(f"| {p} | {e['batches']} | {1000 * e['elapsed'] / max(1, e['batches']):.0f} |")


if __name__ == "__main__":
    main()
