"""Word count on the spark runtime vs the local runtime, and the cost of a near-empty batch.

    python bench/bench_spark.py [--sentences 200000] [--batch 50000] [--local-cluster]

Each configuration runs in its own process (a SparkSession per process) over
the same generated corpus (bench/corpus.py, fixed seed) and is checked
against collections.Counter (counts read back through the state provider)
before its numbers are printed. Spark rows report words/s twice: with the
session start-up included (what a user waits for) and excluding it.
``--local-cluster`` adds local-cluster[1,1,1024] and local-cluster[2,1,1024]
rows (Redis provider; each starts its own executor JVMs).

    python bench/bench_spark.py --partitioned [--repeat 2] [--local-cluster]

compares the two ways input reaches Spark's executors (issue 35): the corpus
as one file (read by the driver's spout, shipped inside each job) against the
same lines cut into a folder of 20 files (a partitioned source: the driver
plans byte ranges, the executors read them), and Spark's own Structured
Streaming word count over the same folder. Runs are interleaved (file,
folder, structured streaming, then again), each in its own process; per run:
the bytes the driver ships to the executors with ``SparkContext.parallelize``
(the pickled batch, or the pickled ranges), the driver Python process's CPU
seconds and bytes read and written (``/proc/self/io``), words/s excluding the
session start. The counts are checked against collections.Counter.
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
        from statestream.runtime.spark import SparkRuntime

        spark = _session(master)
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

    from statestream import TopologyBuilder
    from statestream.runtime.spark import SparkRuntime

    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", EmptyLines())
    b.set_bolt("split", wordcount.SplitSentence(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", wordcount.WordCount(), 2).fields_grouping("split", ["word"])
    spark = _session(master)
    conf = provider_conf(provider)
    SparkRuntime(b.build(), conf, spark=spark, batch_size=1).run(duration=3.0)  # warm up
    result = SparkRuntime(b.build(), conf, spark=spark, batch_size=1).run(duration=seconds)
    drop_redis(conf)
    return {"batches": result.counters["batches"], "elapsed": result.elapsed}


PARTS = 20


def folder_path(corpus: str, parts: int = PARTS) -> str:
    """``corpus``'s lines cut in order into ``parts`` files of a folder (cached)."""
    root = Path(corpus).with_suffix(f".parts{parts}")
    if root.is_dir():
        return str(root)
    tmp = root.with_suffix(".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    with open(corpus) as f:
        lines = f.readlines()
    for i in range(parts):
        chunk = lines[len(lines) * i // parts : len(lines) * (i + 1) // parts]
        (tmp / f"part-{i:02}.txt").write_text("".join(chunk))
    tmp.rename(root)
    return str(root)


def _driver_meters() -> tuple[float, int]:
    """The driver Python process's CPU seconds (user + system) and bytes read and
    written by its system calls (files and its socket to the JVM)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return ru.ru_utime + ru.ru_stime, int(io["rchar"]) + int(io["wchar"])


def _session(master: str) -> Any:
    from pyspark.sql import SparkSession

    from statestream.runtime.spark import _SPARK_DEFAULTS

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName("statestream-bench")
    for key, value in _SPARK_DEFAULTS.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def partitioned_run(corpus: str, kind: str, master: str) -> dict[str, Any]:
    """One run of ``kind`` (file, folder or structured) on ``master``: its meters."""
    import pickle

    from pyspark import SparkContext

    t0 = time.perf_counter()
    spark = _session(master)
    folder = folder_path(corpus)
    size = os.path.getsize(corpus)
    with open(corpus) as f:
        expected = collections.Counter(f.read().split())
    shipped: list[int] = []
    parallelize = SparkContext.parallelize

    def counted(self: Any, c: Any, numSlices: Any = None) -> Any:
        # What the driver sends the executors as the job's input: the pickled records,
        # or the pickled ranges (the same protocol Spark's serializer uses).
        data = list(c)
        shipped.append(len(pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL)))
        return parallelize(self, data, numSlices)

    SparkContext.parallelize = counted  # type: ignore[method-assign]
    cpu0, io0 = _driver_meters()
    t1 = time.perf_counter()
    batches = 0
    extra: dict[str, float] = {}
    if kind == "structured":
        from pyspark.sql import functions as F

        lines = spark.readStream.option("maxFilesPerTrigger", PARTS // 4).text(folder)
        words = lines.select(F.explode(F.split(F.col("value"), " ")).alias("word"))
        query = (
            words.where(F.col("word") != "")
            .groupBy("word")
            .count()
            .writeStream.outputMode("complete")
            .format("memory")
            .queryName(f"wc_{uuid.uuid4().hex[:8]}")
            .option("checkpointLocation", tempfile.mkdtemp(prefix="ssbench-ss-"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        batches = len(query.recentProgress)
        elapsed = time.perf_counter() - t1
        cpu1, io1 = _driver_meters()
        got = {r["word"]: r["count"] for r in spark.table(query.name).collect()}
        exact = got == dict(expected)
    else:
        import wordcount

        from statestream.runtime.spark import SparkRuntime
        from statestream.runtime.spark.batches import BatchRunner
        from statestream.runtime.spark.spouts import SpoutReader

        # Where the driver's time goes per batch: reading or planning the next batch
        # (what overlapping batches could hide) and committing the last one.
        timed: dict[str, float] = {"read": 0.0, "commit": 0.0}

        def timer(name: str, fn: Any) -> Any:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                t = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    timed[name] += time.perf_counter() - t

            return wrapped

        SpoutReader.read = timer("read", SpoutReader.read)  # type: ignore[method-assign]
        BatchRunner._commit = timer("commit", BatchRunner._commit)  # type: ignore[method-assign]
        conf: dict[str, Any] = {**provider_conf("redis")}
        if kind == "file":
            conf["wordcount.input"] = corpus
        else:
            # Four batches, as the file's 50,000 lines a batch make.
            conf["wordcount.input"] = folder
            conf["wordcount.input.batch.bytes"] = -(-size // 4)
        result = SparkRuntime(wordcount.topology(), conf, spark=spark, batch_size=50_000).run(
            until_idle=True
        )
        elapsed = time.perf_counter() - t1
        cpu1, io1 = _driver_meters()
        batches = result.counters["batches"]
        exact = read_counts(conf) == dict(expected)
        drop_redis(conf)
        extra = {"read_s": timed["read"], "commit_s": timed["commit"]}
    return {
        **extra,
        "kind": kind,
        "master": master,
        "words": sum(expected.values()),
        "startup": t1 - t0,
        "elapsed": elapsed,
        "batches": batches,
        "shipped": sum(shipped),
        "driver_cpu": cpu1 - cpu0,
        "driver_io": io1 - io0,
        "exact": exact,
    }


def partitioned_main(corpus: str, repeat: int, local_cluster: bool) -> None:
    masters = ["local[2]"] + (["local-cluster[2,1,1024]"] if local_cluster else [])
    kinds = ["file", "folder", "structured"]
    rows: list[dict[str, Any]] = []
    for rep in range(repeat):
        for master in masters:
            for kind in kinds:
                row = sub("--part-one", kind, master, "--corpus", corpus)
                row["rep"] = rep
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    cmd = f"python bench/bench_spark.py --partitioned --repeat {repeat}"
    cmd += " --local-cluster" if local_cluster else ""
    partitioned_tables(corpus, cmd, rows)


def partitioned_tables(corpus: str, cmd: str, rows: list[dict[str, Any]]) -> None:
    """The tables of the --partitioned runs (``--rows FILE``: of rows saved as JSON
    lines, as the runs print them to stderr)."""
    masters = list(dict.fromkeys(r["master"] for r in rows))
    repeat = 1 + max(r["rep"] for r in rows)
    print(f"command: {cmd}")
    print(
        f"corpus: {rows[0]['words']:,} words, one file of {os.path.getsize(corpus):,} bytes "
        f"or {PARTS} files; python {sys.version.split()[0]}"
    )
    print()
    print(
        "| rep | master | input | batches | driver-shipped bytes/batch | driver CPU s | "
        "driver I/O MB | run s | words/s | exact |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        per = r["shipped"] / max(1, r["batches"]) if r["kind"] != "structured" else None
        print(
            f"| {r['rep']} | {r['master']} | {r['kind']} | {r['batches']} | "
            f"{'-' if per is None else f'{per:,.0f}'} | {r['driver_cpu']:.2f} | "
            f"{r['driver_io'] / 1e6:.1f} | {r['elapsed']:.1f} | "
            f"{r['words'] / r['elapsed']:,.0f} | {r['exact']} |"
        )
    print()
    print("| rep | master | input | driver read/plan s per batch | driver commit s per batch |")
    print("|---:|---|---|---:|---:|")
    for r in rows:
        if "read_s" in r:
            n = max(1, r["batches"])
            print(
                f"| {r['rep']} | {r['master']} | {r['kind']} | {r['read_s'] / n:.3f} | "
                f"{r['commit_s'] / n:.3f} |"
            )
    print()
    print(
        "| rep | master | folder/file shipped bytes | folder/file driver CPU | "
        "folder/file words/s | folder/structured words/s |"
    )
    print("|---:|---|---:|---:|---:|---:|")
    for rep in range(repeat):
        for master in masters:
            by = {r["kind"]: r for r in rows if r["rep"] == rep and r["master"] == master}
            f, d, s_ = by["file"], by["folder"], by["structured"]
            print(
                f"| {rep} | {master} | {d['shipped'] / max(1, f['shipped']):.5f} | "
                f"{d['driver_cpu'] / f['driver_cpu']:.2f} | "
                f"{f['elapsed'] / d['elapsed']:.2f} | {s_['elapsed'] / d['elapsed']:.2f} |"
            )


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
    ap.add_argument("--partitioned", action="store_true")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--part-one", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--rows", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part_one:
        print(json.dumps(partitioned_run(args.corpus, *args.part_one)))
        return
    if args.one:
        runner, provider, master, batch = args.one
        print(json.dumps(one_run(args.corpus, runner, provider, master, int(batch))))
        return
    if args.empty:
        print(json.dumps(empty_batches(args.empty[0], args.empty[1], 10.0)))
        return
    from corpus import corpus_path

    corpus = str(corpus_path(args.sentences))
    if args.rows:
        rows = [json.loads(x) for x in Path(args.rows).read_text().splitlines() if x[:1] == "{"]
        partitioned_tables(corpus, "python bench/bench_spark.py --partitioned", rows)
        return
    if args.partitioned:
        partitioned_main(corpus, args.repeat, args.local_cluster)
        return
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
