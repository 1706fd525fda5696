"""Stateful word count: throughput per provider, checkpoint overhead, restart time.

    python bench/bench_stateful.py [--sentences 200000] [--restart-keys 1000000] [--repeat 3]

Table 1: the word count of examples/wordcount.py (a StatefulBolt counting in a
KeyValueState, acking on, a checkpoint every 1 s) on each provider, against
the same topology with a plain in-memory counting bolt (acking on, no
checkpoints): words/s end to end and the overhead of checkpointing, first with
Storm's at-least-once state, then with exactly-once state (the spouts stop and
the queues drain before every PREPARE); a second table gives exactly-once's
cost against at-least-once per provider. Every run is checked against
collections.Counter.

Table 2: restart time to the first processed tuple when the counting bolt's
state already holds N committed keys (the state loads lazily).

Each configuration runs in its own process, ``--repeat`` times, the
configurations interleaved (plain, memory, sqlite, redis, plain, ...) so that
a noisy neighbour slows them alike; the table shows the median of the runs
and the overhead is computed from the medians.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))
REDIS_URL = "redis://127.0.0.1:6379/0"


def provider_conf(provider: str, workdir: str) -> dict[str, Any]:
    if provider == "sqlite":
        return {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": f"{workdir}/state.db"},
        }
    if provider == "redis":
        prefix = f"bench-{uuid.uuid4().hex[:8]}:"
        return {
            "topology.state.provider": "redis",
            "topology.state.provider.config": {"url": REDIS_URL, "key_prefix": prefix},
        }
    return {
        "topology.state.provider": "memory",
        "topology.state.provider.config": {"name": uuid.uuid4().hex},
    }


def cleanup(conf: dict[str, Any]) -> None:
    if conf["topology.state.provider"] == "redis":
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(conf["topology.state.provider.config"]["key_prefix"] + "*"))
        for i in range(0, len(keys), 10_000):
            client.delete(*keys[i : i + 10_000])


def plain_topology() -> Any:
    import wordcount

    from statestream import Bolt, FileSpout, TopologyBuilder

    class PlainCount(Bolt):
        def prepare(self, conf: Any, context: Any, collector: Any) -> None:
            super().prepare(conf, context, collector)
            self.counts: dict[str, int] = {}

        def execute(self, tup: Any) -> None:
            w = tup.values[0]
            self.counts[w] = self.counts.get(w, 0) + 1
            self.collector.ack(tup)

        def cleanup(self) -> None:
            out = self.conf.get("wordcount.output")
            if out:
                wordcount.write_counts(out, self.counts.items())

    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", FileSpout(path_key="wordcount.input"))
    b.set_bolt("split", wordcount.SplitSentence(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", PlainCount(), 2).fields_grouping("split", ["word"])
    return b.build()


def throughput(corpus: str, provider: str) -> dict[str, Any]:
    import wordcount

    from statestream.runtime.local import LocalRuntime

    workdir = tempfile.mkdtemp()
    out = f"{workdir}/out.jsonl"
    conf: dict[str, Any] = {"wordcount.input": corpus, "wordcount.output": out}
    if provider == "none":
        topo = plain_topology()
    else:
        name, _, mode = provider.partition("+")
        conf.update(provider_conf(name, workdir))
        conf["statestream.state.exactly.once"] = mode == "exactly-once"
        topo = wordcount.topology()
    rt = LocalRuntime(topo, conf)
    t0 = time.perf_counter()
    result = rt.run(until_idle=True)
    elapsed = time.perf_counter() - t0
    got: dict[str, int] = collections.Counter()
    with open(out) as f:
        for line in f:
            d = json.loads(line)
            got[d["word"]] += d["count"]
    with open(corpus) as f:
        expected = collections.Counter(f.read().split())
    if provider != "none":
        cleanup(conf)
    return {
        "provider": provider,
        "words": sum(expected.values()),
        "elapsed": elapsed,
        "exact": dict(got) == dict(expected),
        "checkpoints": result.components.get("$checkpointspout").emitted
        if "$checkpointspout" in result.components
        else 0,
    }


def restart(provider: str, keys: int) -> dict[str, Any]:
    import wordcount

    from statestream import TopologyBuilder
    from statestream._executors import unwrap
    from statestream._registry import open_provider
    from statestream.runtime.local import LocalRuntime
    from statestream.testing import ListSpout

    workdir = tempfile.mkdtemp()
    conf = provider_conf(provider, workdir)
    with open_provider(
        conf["topology.state.provider"], conf["topology.state.provider.config"], scope="wordcount"
    ) as p:
        state = p.get_state("count-0")
        for i in range(keys):
            state.put(f"k{i}", i)
            if i % 100_000 == 99_999:
                state.commit()
        state.commit()
    b = TopologyBuilder("wordcount")
    b.set_spout("words", ListSpout([f"k{keys - 1}"], fields=["word"]))
    b.set_bolt("count", wordcount.WordCount(), 1).fields_grouping("words", ["word"])
    topo = b.build()
    t0 = time.perf_counter()
    rt = LocalRuntime(topo, conf)
    rt.open()
    count = next(t for t in rt.bolts if t.component == "count")
    while count.executed == 0:
        rt.step()
    elapsed = time.perf_counter() - t0
    value = unwrap(count.executor).counts[f"k{keys - 1}"]
    rt.close()
    cleanup(conf)
    return {"provider": provider, "keys": keys, "elapsed": elapsed, "value_ok": value == keys}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=200_000)
    ap.add_argument("--restart-keys", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--arg", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one == "throughput":
        print(json.dumps(throughput(args.arg.split(",")[0], args.arg.split(",")[1])))
        return
    if args.one == "restart":
        p, k = args.arg.split(",")
        print(json.dumps(restart(p, int(k))))
        return
    from corpus import corpus_path

    corpus = str(corpus_path(args.sentences))

    def sub(kind: str, arg: str) -> dict[str, Any]:
        proc = subprocess.run(
            [sys.executable, __file__, "--one", kind, "--arg", arg],
            check=True,
            capture_output=True,
            text=True,
        )
        return json.loads(proc.stdout.strip().splitlines()[-1])

    cmd = "python bench/bench_stateful.py"
    if args.sentences != 200_000:
        cmd += f" --sentences {args.sentences}"
    if args.restart_keys != 1_000_000:
        cmd += f" --restart-keys {args.restart_keys}"
    if args.repeat != 3:
        cmd += f" --repeat {args.repeat}"
    print(f"command: {cmd}")
    providers = (
        "none",
        "memory",
        "sqlite",
        "redis",
        "memory+exactly-once",
        "sqlite+exactly-once",
        "redis+exactly-once",
    )
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in providers}
    for _ in range(args.repeat):
        for p in providers:
            runs[p].append(sub("throughput", f"{corpus},{p}"))

    def rate(r: dict[str, Any]) -> float:
        return float(r["words"] / r["elapsed"])

    base = statistics.median(rate(r) for r in runs["none"])
    words = runs["none"][0]["words"]
    print(
        f"\ncorpus: {args.sentences:,} sentences, {words:,} words; acking on; checkpoint every "
        f"1000 ms; median of {args.repeat} interleaved runs\n"
    )
    print(
        "| count bolt | provider | words/s (median) | runs, words/s | checkpoints "
        "| overhead vs plain | exact |"
    )
    print("|---|---|---:|---|---:|---:|---|")
    for p in providers:
        rs = runs[p]
        med = statistics.median(rate(r) for r in rs)
        kind = "plain Bolt (dict)" if p == "none" else "StatefulBolt"
        over = "" if p == "none" else f"{1 - med / base:.1%}"
        each = ", ".join(f"{rate(r):,.0f}" for r in rs)
        cps = statistics.median(r["checkpoints"] for r in rs)
        exact = all(r["exact"] for r in rs)
        print(
            f"| {kind} | {p if p != 'none' else '-'} | {med:,.0f} | {each} | {cps:.0f} "
            f"| {over} | {exact} |"
        )
    print(
        "\nwhat exactly-once costs against at-least-once (the same provider, "
        "interleaved runs; ratio of the medians):\n"
    )
    print(
        "| provider | at-least-once words/s | exactly-once words/s | exactly-once / at-least-once |"
    )
    print("|---|---:|---:|---:|")
    for name in ("memory", "sqlite", "redis"):
        alo = statistics.median(rate(r) for r in runs[name])
        eo = statistics.median(rate(r) for r in runs[f"{name}+exactly-once"])
        print(f"| {name} | {alo:,.0f} | {eo:,.0f} | {eo / alo:.2f} |")
    print(f"\nrestart to the first processed tuple with {args.restart_keys:,} committed keys:\n")
    print("| provider | keys | seconds | value read back |")
    print("|---|---:|---:|---|")
    for p in ("sqlite", "redis"):
        r = sub("restart", f"{p},{args.restart_keys}")
        print(f"| {p} | {r['keys']:,} | {r['elapsed']:.3f} | {r['value_ok']} |")


if __name__ == "__main__":
    main()
