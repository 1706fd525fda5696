"""The bounded state cache (issue 34): peak RSS while writing N distinct keys, the cost
of a commit of 1,000 changed keys in a 1,000-key and an N-key state, and the time from
opening a provider to the first get, per provider. Each measurement runs in a fresh
process (peak RSS is the process's; on redis the server's memory is apart).

    STATESTREAM_CORE=python python3 bench/bench_state_cache.py --keys 200000 --providers memory sqlite redis
    python3 bench/bench_state_cache.py --means --keys 1000000 --providers memory sqlite redis
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

CHANGED = 1000


def _provider(name: str, path: str) -> object:
    """``path``: the sqlite file, the memory store's name or the redis key prefix."""
    from statestream._state import size_cache
    from statestream_providers.memory import MemoryStateProvider
    from statestream_providers.redis import RedisStateProvider
    from statestream_providers.sqlite import SQLiteStateProvider

    provider: object
    if name == "sqlite":
        provider = SQLiteStateProvider(path)
    elif name == "redis":
        provider = RedisStateProvider(host="127.0.0.1", key_prefix=path)
    else:
        provider = MemoryStateProvider(path)
    size_cache(provider, 32.0)
    return provider


def _delete_prefix(prefix: str) -> None:
    import redis

    client = redis.Redis(host="127.0.0.1")
    keys = list(client.scan_iter(match=f"{prefix}*", count=10_000))
    for i in range(0, len(keys), 1000):
        client.unlink(*keys[i : i + 1000])


def _commit(state: Any, txid: int) -> None:
    state.prepare_commit(txid)
    state.commit(txid)


def child(name: str, keys: int, path: str, counted: str = "") -> dict[str, float]:
    provider = _provider(name, path)
    small = provider.get_state("small-0")  # type: ignore[attr-defined]
    large = provider.get_state("large-0")  # type: ignore[attr-defined]
    for i in range(CHANGED):
        small.put(f"s{i}", i)
    small.prepare_commit(0)
    small.commit(0)
    txid = 0
    for start in range(0, keys, 10_000):
        for i in range(start, min(keys, start + 10_000)):
            large.put(f"word{i}", i)
        large.prepare_commit(txid)
        large.commit(txid)
        txid += 1
    out: dict[str, float] = {}
    for label, state, tx, span in (("small", small, 1, CHANGED), ("large", large, txid, keys)):
        times = []
        for rep in range(5):
            for i in range(CHANGED):
                key = (
                    f"s{(i * 7919 + rep) % span}"
                    if label == "small"
                    else f"word{(i * 7919 + rep * 13) % span}"
                )
                state.put(key, state.get(key, 0) + 1)
            t0 = time.perf_counter()
            if label == counted:
                # Inside functools.reduce, a C function callgrind toggles on (--count).
                functools.reduce(lambda _, __, s=state, t=tx: _commit(s, t), [0, 0])
            else:
                _commit(state, tx)
            times.append(time.perf_counter() - t0)
            tx += 1
        out[f"commit_{label}_ms"] = 1000 * sorted(times)[2]
    out["cache_entries"] = large.cache_entries
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def means(name: str, keys: int, path: str, rounds: int = 16) -> dict[str, float]:
    """Mean CPU and wall ms of ``rounds`` commits of 1,000 changed keys in each state,
    the two states taking turns: a mean, not a median, so that the folds a
    sqlite commit pays now and then are in it (``--means``)."""
    provider = _provider(name, path)
    states = {"small": provider.get_state("small-0"), "large": provider.get_state("large-0")}  # type: ignore[attr-defined]
    spans = {"small": CHANGED, "large": keys}
    for label, state in states.items():
        for start in range(0, spans[label], 10_000):
            for i in range(start, min(spans[label], start + 10_000)):
                state.put(f"{label}{i}", i)
            state.commit()
    cpu: dict[str, list[float]] = {"small": [], "large": []}
    wall: dict[str, list[float]] = {"small": [], "large": []}
    for rep in range(rounds):
        for label, state in states.items():
            for i in range(CHANGED):
                key = f"{label}{(i * 7919 + rep * 13) % spans[label]}"
                state.put(key, state.get(key, 0) + 1)
            w, c = time.perf_counter(), time.process_time()
            _commit(state, rep)
            cpu[label].append(time.process_time() - c)
            wall[label].append(time.perf_counter() - w)
    return {
        f"{kind}_{label}_ms": 1000 * sum(values[label]) / rounds
        for kind, values in (("cpu", cpu), ("wall", wall))
        for label in ("small", "large")
    }


def restart(name: str, path: str) -> dict[str, float]:
    t0 = time.perf_counter()
    provider = _provider(name, path)
    state = provider.get_state("large-0")  # type: ignore[attr-defined]
    state.get("word1")
    return {"first_get_s": time.perf_counter() - t0}


def count(name: str, keys: int) -> None:
    """Instructions and last-level cache misses (callgrind's cache simulation) of
    the five timed commits, in the small and in the large state."""
    print("| provider | keys | state | instructions per commit | LL misses per commit |")
    print("|---|---|---|---|---|")
    for label in ("small", "large"):
        where = f"bench-{uuid.uuid4().hex[:8]}:" if name == "redis" else "bench"
        with tempfile.TemporaryDirectory() as tmp:
            if name == "sqlite":
                where = str(Path(tmp) / "state.db")
            try:
                proc = subprocess.run(
                    [
                        "valgrind",
                        "--tool=callgrind",
                        "--cache-sim=yes",
                        "--toggle-collect=functools_reduce",
                        "--callgrind-out-file=/dev/null",
                        sys.executable,
                        __file__,
                        "--child",
                        name,
                        str(keys),
                        where,
                        "--counted",
                        label,
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
            finally:
                if name == "redis":
                    _delete_prefix(where)
        numbers = re.search(r"Collected : ([\d ]+)", proc.stderr)
        if numbers is None:
            raise SystemExit(f"no count in valgrind's output:\n{proc.stderr[-2000:]}")
        # Events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
        ev = [int(x) for x in numbers.group(1).split()]
        print(f"| {name} | {keys} | {label} | {ev[0] // 5:,} | {sum(ev[6:9]) // 5:,} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--providers", nargs="+", default=["memory", "sqlite"])
    parser.add_argument("--child", nargs=3)
    parser.add_argument("--counted", default="")
    parser.add_argument("--count", action="store_true", help="callgrind the commits instead")
    parser.add_argument("--restart", nargs=2)
    parser.add_argument("--means", action="store_true", help="mean CPU/wall ms per commit")
    parser.add_argument("--means-child", nargs=3)
    args = parser.parse_args()
    if args.means_child:
        name, keys, where = args.means_child
        print(json.dumps(means(name, int(keys), where)))
        return
    if args.means:
        print("| provider | keys | CPU ms small / large | ratio | wall ms small / large | ratio |")
        print("|---|---|---|---|---|---|")
        for name in args.providers:
            with tempfile.TemporaryDirectory() as tmp:
                where = {
                    "sqlite": str(Path(tmp) / "state.db"),
                    "redis": f"bench-{uuid.uuid4().hex[:8]}:",
                }.get(name, "bench")
                try:
                    r = json.loads(
                        subprocess.check_output(
                            [sys.executable, __file__, "--means-child", name, str(args.keys), where]
                        )
                    )
                finally:
                    if name == "redis":
                        _delete_prefix(where)
            print(
                f"| {name} | {args.keys:,} | {r['cpu_small_ms']:.2f} / {r['cpu_large_ms']:.2f} | "
                f"{r['cpu_large_ms'] / r['cpu_small_ms']:.2f} | {r['wall_small_ms']:.2f} / "
                f"{r['wall_large_ms']:.2f} | {r['wall_large_ms'] / r['wall_small_ms']:.2f} |",
                flush=True,
            )
        return
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.child[2], args.counted)))
        return
    if args.count:
        for name in args.providers:
            count(name, args.keys)
        return
    if args.restart:
        print(json.dumps(restart(*args.restart)))
        return
    print(
        f"| provider | keys | peak RSS MB | cache entries | commit 1k keys, 1k-key state ms | in {args.keys}-key state ms | ratio | open to first get s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.providers:
        with tempfile.TemporaryDirectory() as tmp:
            path = {
                "sqlite": str(Path(tmp) / "state.db"),
                "redis": f"bench-{uuid.uuid4().hex[:8]}:",
            }
            where = path.get(name, "bench")
            run = [sys.executable, __file__]
            try:
                res = json.loads(
                    subprocess.check_output([*run, "--child", name, str(args.keys), where])
                )
                first = (
                    json.loads(subprocess.check_output([*run, "--restart", name, where]))
                    if name != "memory"
                    else {"first_get_s": float("nan")}
                )
            finally:
                if name == "redis":
                    _delete_prefix(where)
            ratio = res["commit_large_ms"] / res["commit_small_ms"]
            print(
                f"| {name} | {args.keys} | {res['peak_rss_mb']:.0f} | {res['cache_entries']:.0f} | "
                f"{res['commit_small_ms']:.2f} | {res['commit_large_ms']:.2f} | {ratio:.2f} | {first['first_get_s']:.3f} |"
            )


if __name__ == "__main__":
    main()
