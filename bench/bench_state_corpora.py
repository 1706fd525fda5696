"""The word count on a small and a large vocabulary (issue 34): throughput ratio and peak RSS.

    python bench/bench_state_corpora.py --tree TREE [--pairs 3] [--providers sqlite redis]
    python bench/bench_state_corpora.py --tree TREE --distinct 20000000 --providers sqlite
    python bench/bench_state_corpora.py --tree TREE --reads [--providers sqlite redis]

The documented word count (examples/wordcount.py, exactly-once, a checkpoint
every second, ``topology.max.spout.pending: 10000`` as config/local.yaml sets
(on Redis too, whose config sets none), the final counts written with
``state.items()`` at the end: the dump is timed) runs as its own process under ``/usr/bin/time`` from TREE, a built
copy (``git archive`` + ``setup.py build_ext --inplace``, PYTHONPATH=TREE,
STATESTREAM_CORE=compiled). Two corpora of 2,000,000 words
(bench_wallclock.vocab_corpus, Zipf 0.5 over the vocabulary): a
10,000-word vocabulary (10,000 distinct) and a 1,000,000-word one (781,206
distinct). Runs are interleaved in pairs (small, large) and each pair gives
a large/small ratio of words per second (wall clock of the whole process,
start-up and dump included); the table gives the median of the pair
ratios, and the ratio of the runs' CPU seconds (small/large: the words per
CPU second, steadier than the wall clock on a loaded machine). Every run's counts are checked exactly against the corpus.

``--distinct N`` instead writes a corpus of N distinct words (``k0`` ..
``kN-1``, each once, lines of 10: a generated file under bench/results/) and
runs it once per provider: peak RSS of the run and, on Redis, the server's
``used_memory_peak`` apart. The check is exact: every output line must be
a distinct word counted once, N lines in all.

Redis runs use a fresh ``key_prefix`` each and delete their keys afterwards;
the pairs give the Redis server's CPU seconds during each run too (``INFO
cpu``, user + sys, after minus before: any other client of the server counts
as well) and the CPU ratio with them on both sides.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_wallclock  # noqa: E402
from bench_wallclock import timed, vocab_corpus, wordcount_cmd  # noqa: E402

WORDS = 2_000_000


def distinct_corpus(n: int) -> str:
    """N distinct words, each once, in lines of 10 (written once, then reused)."""
    path = HERE / "results" / f"corpus-distinct-{n}.txt"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as f:
            for start in range(0, n, 10):
                f.write(" ".join(f"k{i}" for i in range(start, min(n, start + 10))) + "\n")
        tmp.rename(path)
    return str(path)


def _redis_cpu() -> float:
    """The Redis server's CPU seconds so far (INFO cpu: user + sys of its main process)."""
    info = subprocess.run(["redis-cli", "info", "cpu"], capture_output=True, text=True).stdout
    fields = dict(re.findall(r"^(used_cpu_(?:user|sys)):([0-9.]+)", info, re.M))
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def _redis_cleanup(prefix: str) -> None:
    import redis

    client = redis.Redis()
    batch = list(client.scan_iter(match=f"{prefix}*", count=10_000))
    for i in range(0, len(batch), 1000):
        client.unlink(*batch[i : i + 1000])


def tally_counts(out: str) -> tuple[collections.Counter[str], int]:
    """The counts the run wrote, summed per word, and the number of lines."""
    got: collections.Counter[str] = collections.Counter()
    lines = 0
    with open(out) as f:
        for line in f:
            d = json.loads(line)
            got[d["word"]] += d["count"]
            lines += 1
    return got, lines


def tally_distinct(n: int):  # type: ignore[no-untyped-def]
    """A tally for the ``k0`` .. ``kN-1`` corpus: True if every word is there once,
    counted 1, checked with a bitmap of N bits (a Counter of 20M words takes GBs)."""

    def tally(out: str) -> tuple[bool, int]:
        seen = bytearray((n + 7) // 8)
        lines = 0
        ok = True
        with open(out, "rb") as f:
            for line in f:
                d = json.loads(line)
                i = int(d["word"][1:])
                lines += 1
                if d["count"] != 1 or not 0 <= i < n or seen[i >> 3] & (1 << (i & 7)):
                    ok = False
                    continue
                seen[i >> 3] |= 1 << (i & 7)
        return ok and lines == n, lines

    return tally


def run(
    tree: Path,
    corpus: str,
    provider: str,
    extra: list[str] | None = None,
    tally=tally_counts,  # type: ignore[no-untyped-def]
    probe: bool = False,
) -> dict:  # type: ignore[type-arg]
    workdir = tempfile.mkdtemp(prefix="corpora-")
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    try:
        out = f"{workdir}/counts.jsonl"
        # tree/pp holds statestream_providers -> tree/providers: without it the
        # providers would be the installed checkout's, not the tree's.
        path = f"{tree}:{tree}/pp" if (tree / "pp").is_dir() else str(tree)
        env = dict(os.environ, PYTHONPATH=path, STATESTREAM_CORE="compiled")
        config = "local.yaml" if provider == "sqlite" else "redis.yaml"
        # config/local.yaml's bound on lines in flight since 1a991d7 (this bench
        # set 50,000 before, the old one); --set another after it to compare.
        cmd = wordcount_cmd(tree, corpus, out, True, config)
        cmd += ["--set", "topology.max.spout.pending=10000"]
        if provider == "redis":
            conf = {"host": "127.0.0.1", "port": 6379, "key_prefix": prefix}
            cmd += ["--set", f"topology.state.provider.config={json.dumps(conf)}"]
        cmd += extra or []
        if probe:  # the same command through the store-read counter (state_probe.py)
            assert cmd[1:3] == ["-m", "statestream"]
            cmd[1:3] = [str(HERE / "state_probe.py")]
        redis_peak = None
        server = 0.0
        if provider == "redis":
            subprocess.run(["redis-cli", "memory", "purge"], capture_output=True)
            subprocess.run(["redis-cli", "config", "resetstat"], capture_output=True)
            server = _redis_cpu()
        wall, cpu, rss, _, err = timed(cmd, workdir, env)
        if provider == "redis":
            # The server's CPU during the run (any other client of it counts too).
            server = _redis_cpu() - server
        if "compiled core (mypyc)" not in err:
            raise RuntimeError(f"not the compiled core: {err.splitlines()[:1]}")
        if provider == "redis":
            info = subprocess.run(
                ["redis-cli", "info", "memory"], capture_output=True, text=True
            ).stdout
            m = re.search(r"used_memory_peak:(\d+)", info)
            redis_peak = int(m.group(1)) / 2**20 if m else None
        m = re.search(r"idle after ([0-9.]+) s", err)
        got, lines = tally(out)
        p = re.search(r"state-probe: loads=(\d+) get_many=(\d+) keys=(\d+)", err)
        return {
            "reads": tuple(int(x) for x in p.groups()) if p else None,
            "wall": wall,
            "cpu": cpu,
            "server_cpu": server,
            "rss": rss,
            "inner": float(m.group(1)) if m else float("nan"),
            "counts": got,
            "lines": lines,
            "redis_peak_mb": redis_peak,
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if provider == "redis":
            _redis_cleanup(prefix)


def expected(corpus: str) -> collections.Counter[str]:
    with open(corpus) as f:
        return collections.Counter(f.read().split())


def reads(tree: Path, providers: list[str], extra: list[str]) -> None:
    """Each corpus once per provider through state_probe.py: what the states asked
    their stores, per word, and the share of the tuples' gets the cache answered."""
    small, large = vocab_corpus(WORDS, 10_000), vocab_corpus(WORDS, 1_000_000)
    print(
        "| provider | corpus | misses (load) / word | get_many calls / word | keys read ahead / "
        "word | store round trips / word | gets hit | peak RSS MB | exact |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for provider in providers:
        for name, corpus in (("10k", small), ("781k", large)):
            r = run(tree, corpus, provider, extra, probe=True)
            loads, calls, keys = r["reads"]
            exact = r["counts"] == expected(corpus)
            print(
                f"| {provider} | {name} | {loads / WORDS:.4f} | {calls / WORDS:.5f} | "
                f"{keys / WORDS:.4f} | {(loads + calls) / WORDS:.4f} | "
                f"{1 - loads / WORDS:.1%} | {r['rss']:.0f} | {'yes' if exact else 'NO'} |",
                flush=True,
            )


def pairs(tree: Path, providers: list[str], n: int, extra: list[str] | None = None) -> None:
    small, large = vocab_corpus(WORDS, 10_000), vocab_corpus(WORDS, 1_000_000)
    want = {small: expected(small), large: expected(large)}
    print(f"distinct: small {len(want[small]):,}, large {len(want[large]):,}", file=sys.stderr)
    print(
        "| provider | pair | small words/s | large words/s | ratio | small RSS MB | large RSS MB "
        "| small CPU s | large CPU s | CPU ratio | server CPU s small / large "
        "| CPU ratio, server's included | exact |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for provider in providers:
        ratios, rss_large, rss_small = [], [], []
        for i in range(n):
            a = run(tree, small, provider, extra)
            b = run(tree, large, provider, extra)
            exact = a["counts"] == want[small] and b["counts"] == want[large]
            ws_a, ws_b = WORDS / a["wall"], WORDS / b["wall"]
            ratios.append(ws_b / ws_a)
            rss_large.append(b["rss"])
            rss_small.append(a["rss"])
            total_a, total_b = a["cpu"] + a["server_cpu"], b["cpu"] + b["server_cpu"]
            server = (
                f"{a['server_cpu']:.1f} / {b['server_cpu']:.1f} | {total_a / total_b:.2f}"
                if provider == "redis"
                else "- | -"
            )
            print(
                f"| {provider} | {i + 1} | {ws_a / 1e3:.0f}k | {ws_b / 1e3:.0f}k | "
                f"{ws_b / ws_a:.2f} | {a['rss']:.0f} | {b['rss']:.0f} | {a['cpu']:.1f} | "
                f"{b['cpu']:.1f} | {a['cpu'] / b['cpu']:.2f} | {server} | "
                f"{'yes' if exact else 'NO'} |",
                flush=True,
            )
        summary[provider] = (statistics.median(ratios), max(rss_large), max(rss_small))
    for provider, (ratio, big, little) in summary.items():
        print(
            f"\n{provider}: median pair ratio {ratio:.2f}, peak RSS large {big:.0f} MB, "
            f"small {little:.0f} MB"
        )


def distinct(tree: Path, providers: list[str], n: int, extra: list[str]) -> None:
    corpus = distinct_corpus(n)
    bench_wallclock.TIMEOUT_S = 6 * 3600  # 20M keys on a shared box: hours, not 30 min
    print(
        "| provider | distinct | wall s | words/s | peak RSS MB | redis used_memory_peak MB | exact |"
    )
    print("|---|---|---|---|---|---|---|")
    for provider in providers:
        r = run(tree, corpus, provider, extra, tally=tally_distinct(n))
        exact = r["counts"] is True
        peak = "-" if r["redis_peak_mb"] is None else f"{r['redis_peak_mb']:.0f}"
        print(
            f"| {provider} | {n:,} | {r['wall']:.0f} | {n / r['wall'] / 1e3:.0f}k | "
            f"{r['rss']:.0f} | {peak} | {'yes' if exact else 'NO'} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--providers", nargs="+", default=["sqlite", "redis"])
    parser.add_argument("--distinct", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE, after the bench's")
    parser.add_argument(
        "--reads", action="store_true", help="count the store reads (state_probe.py), once each"
    )
    args = parser.parse_args()
    extra = [arg for kv in args.set for arg in ("--set", kv)]
    if args.distinct:
        distinct(args.tree.resolve(), args.providers, args.distinct, extra)
    elif args.reads:
        reads(args.tree.resolve(), args.providers, extra)
    else:
        pairs(args.tree.resolve(), args.providers, args.pairs, extra)


if __name__ == "__main__":
    main()
