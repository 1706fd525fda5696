"""Benchmark the state providers: commit cost against state size, lazy reopen, hot paths.

Run from the repository root::

    python bench/bench_state.py                       # memory, sqlite, redis
    python bench/bench_state.py --providers memory,sqlite --rounds 10

Prints markdown tables and the command that produced them. What it shows:

1. Commit cost of ``--changed`` changed keys (prepare + commit of one txid)
   in a state that holds ``--small`` keys and one that holds ``--large``.
   The cost must follow the changed keys, not the state: goal ratio <= 1.5.
   Two key patterns: "random" picks new keys every round (cold: each one
   costs cache misses, and in sqlite a B-tree page of its own), "hot"
   changes the same keys every round (a working set). A third size,
   ``--middle``, shows where the cost levels off: past it, a bigger state
   costs a commit nothing more.
2. Opening a provider on a state of ``--large`` committed keys and reading
   one key: what a restarted task pays before it can work. Goal < 1 s.
3. The hot paths shared by every provider: ``get`` of a cached key and ``put``.

The large states are written through the state API itself, in direct
commits of 10,000 keys (for redis: one pipeline each). sqlite uses a
temporary directory and its default config (``synchronous: full``), with
``--sqlite-config key=value`` on top; redis a unique key prefix on
``--redis-url``, deleted afterwards.

sqlite copies its write-ahead log back into the database file (a WAL
checkpoint) inside the commit that fills the log past ``checkpoint_mb``, so
the commit means include the checkpoints that ran. Two more columns show
this work apart, read outside the timed calls and never part of the means:
"WAL resets", how many times a measured commit restarted the log after a
checkpoint (about the checkpoints run), and "WAL left ms", what a checkpoint
of the log the rounds left behind takes, divided by the rounds: work that a
later commit, or closing, pays.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from statestream._registry import open_provider
from statestream._state import KeyValueState, StateProvider

NAMESPACE = "bench-0"
LOAD_BATCH = 10_000
PATTERNS = ("random", "hot")

Opener = Callable[[], StateProvider]


def _key(i: int) -> str:
    return f"word-{i:08d}"


def load(open_: Opener, size: int) -> None:
    """Write ``size`` committed keys, in direct commits of LOAD_BATCH keys."""
    with open_() as provider:
        state = provider.get_state(NAMESPACE)
        for start in range(0, size, LOAD_BATCH):
            for i in range(start, min(size, start + LOAD_BATCH)):
                state.put(_key(i), i)
            state.commit()


class WalProbe:
    """What the WAL of one sqlite file holds: checkpoints done, checkpoint work left.

    Reads the file beside the provider and never changes what it measures:
    it is used between the measured rounds and after them only.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.wal = Path(f"{path}-wal")

    def resets(self) -> int:
        """The WAL header's checkpoint sequence number: +1 each time a checkpoint
        has copied the whole log back and the next commit restarts it."""
        try:
            with self.wal.open("rb") as file:
                header = file.read(32)
        except FileNotFoundError:
            return 0
        return int.from_bytes(header[12:16], "big") if len(header) == 32 else 0

    def checkpoint_ms(self) -> float:
        """ms a checkpoint of what the WAL holds takes now (synchronous=full, as the
        provider's), on a connection of its own."""
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            conn.execute("PRAGMA synchronous=FULL")
            t0 = time.perf_counter()
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            elapsed = (time.perf_counter() - t0) * 1e3
        finally:
            conn.close()
        assert not busy, "the WAL checkpoint could not run"
        return elapsed


class Cost(NamedTuple):
    prepare: float  #: mean ms of prepare_commit
    commit: float  #: mean ms of commit
    both: float  #: their sum: the cost of one txid
    wal_resets: int | None  #: sqlite: WAL restarts in the measured rounds (~checkpoints run)
    wal_left: float | None  #: sqlite: ms to checkpoint what the rounds left, per round


def commit_cost(
    open_: Opener, size: int, changed: int, rounds: int, pattern: str, wal: WalProbe | None = None
) -> Cost:
    """Mean (prepare, commit, both) in ms for ``changed`` keys, on a freshly opened state.

    ``pattern`` "random": a new random sample of keys every round, so every
    commit touches cold entries (the worst case for caches and B-tree pages);
    "hot": the same random sample every round (a working set, like frequent
    words). Means, not medians, so that sqlite's WAL checkpoints count.
    With ``wal``, also the WAL work of the rounds (see the module doc),
    measured outside the timed calls.
    """
    rng = random.Random(size)
    hot = rng.sample(range(size), changed) if changed < size else list(range(size))
    prepares: list[float] = []
    commits: list[float] = []
    resets = wal_left = None
    resets_before = 0
    with open_() as provider:
        state = provider.get_state(NAMESPACE)
        txid = state.committed_txid + 1
        for round_ in range(rounds + 1):  # the first round warms up and is dropped
            keys = hot if pattern == "hot" or changed >= size else rng.sample(range(size), changed)
            for i in keys:
                state.put(_key(i), round_)
            t0 = time.perf_counter()
            state.prepare_commit(txid)
            t1 = time.perf_counter()
            state.commit(txid)
            t2 = time.perf_counter()
            txid += 1
            if round_:
                prepares.append((t1 - t0) * 1e3)
                commits.append((t2 - t1) * 1e3)
            elif wal is not None:
                resets_before = wal.resets()  # after the warm-up round
        if wal is not None:
            resets = wal.resets() - resets_before
            wal_left = wal.checkpoint_ms() / rounds
    prepare, commit = statistics.fmean(prepares), statistics.fmean(commits)
    return Cost(prepare, commit, prepare + commit, resets, wal_left)


def reopen_and_get(open_: Opener, size: int) -> tuple[float, float]:
    """ms to open a provider and read one committed key; ms for one missing key then."""
    t0 = time.perf_counter()
    with open_() as provider:
        state = provider.get_state(NAMESPACE)
        value = state.get(_key(size // 2))
        t1 = time.perf_counter()
        assert value is not None, "the loaded key is missing"
        state.get("not-there")
        t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def hot_paths(state: KeyValueState, n: int = 200_000) -> tuple[float, float, float]:
    """ns per cached get, per put of an existing key, per put of an int."""
    for i in range(1000):
        state.put(_key(i), i)
    keys = [_key(i % 1000) for i in range(n)]
    get = state.get
    t0 = time.perf_counter()
    for key in keys:
        get(key)
    t1 = time.perf_counter()
    put = state.put
    for i, key in enumerate(keys):
        put(key, i)
    t2 = time.perf_counter()
    for i in range(n):
        put(i % 1000, i)
    t3 = time.perf_counter()
    return (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9, (t3 - t2) / n * 1e9


@contextmanager
def provider_opener(
    name: str, args: argparse.Namespace
) -> Iterator[tuple[Opener, WalProbe | None]]:
    """A function opening fresh providers over one empty store, cleaned up afterwards;
    for sqlite also a probe of its WAL."""
    if name == "memory":
        from statestream_providers.memory import MemoryStateProvider

        store = f"bench-{uuid.uuid4().hex}"
        try:
            yield lambda: open_provider("memory", {"name": store}), None
        finally:
            MemoryStateProvider.clear(store)
    elif name == "sqlite":
        with tempfile.TemporaryDirectory(prefix="statestream-bench-") as tmp:
            path = f"{tmp}/state.db"
            sqlite_config = {**args.sqlite_config, "path": path}
            yield lambda: open_provider("sqlite", sqlite_config), WalProbe(path)
    elif name == "redis":
        import redis

        prefix = f"bench:{uuid.uuid4().hex}:"
        config: dict[str, Any] = {"url": args.redis_url, "key_prefix": prefix, "timeout": 30_000}
        try:
            yield lambda: open_provider("redis", config), None
        finally:
            client = redis.Redis.from_url(args.redis_url)
            keys = list(client.scan_iter(match=prefix + "*"))
            if keys:
                client.unlink(*keys)  # frees the big hash in the background
            client.close()
    else:
        raise SystemExit(f"unknown provider {name!r}; choose memory, sqlite or redis")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", default="memory,sqlite,redis")
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument(
        "--middle", type=int, default=100_000, help="a third size, to show where cost levels off"
    )
    parser.add_argument("--changed", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--sqlite-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a sqlite provider config key over its defaults, e.g. page_size=1024 (repeatable)",
    )
    args = parser.parse_args(argv)
    try:
        args.sqlite_config = dict(item.split("=", 1) for item in args.sqlite_config)
    except ValueError:
        parser.error(f"--sqlite-config takes KEY=VALUE, not {args.sqlite_config!r}")

    started = time.perf_counter()
    cost_rows: list[str] = []
    ratio_rows: list[str] = []
    open_rows: list[str] = []
    hot_rows: list[str] = []
    load_rows: list[str] = []
    for name in args.providers.split(","):
        totals: dict[tuple[str, int], float] = {}
        for size in (args.small, args.middle, args.large):
            with provider_opener(name, args) as (open_, wal):
                t0 = time.perf_counter()
                load(open_, size)
                load_s = time.perf_counter() - t0
                # Let the OS write the loaded files out now, or its writeback
                # would slow the fsyncs of the first measured commits.
                os.sync()
                for pattern in PATTERNS:
                    cost = commit_cost(open_, size, args.changed, args.rounds, pattern, wal)
                    totals[pattern, size] = cost.both
                    resets = "" if cost.wal_resets is None else f"{cost.wal_resets}"
                    left = "" if cost.wal_left is None else f"{cost.wal_left:.2f}"
                    cost_rows.append(
                        f"| {name} | {size:,} | {pattern} | {cost.prepare:.2f} | {cost.commit:.2f} "
                        f"| {cost.both:.2f} | {resets} | {left} |"
                    )
                load_rows.append(f"| {name} | {size:,} | {load_s:.1f} |")
                if size == args.large:
                    first, missing = reopen_and_get(open_, size)
                    verdict = "yes" if first < 1000 else "**no**"
                    open_rows.append(
                        f"| {name} | {size:,} | {first:.1f} | {missing:.2f} | {verdict} |"
                    )
                elif size == args.small:
                    with open_() as provider:
                        get_ns, put_ns, put_int_ns = hot_paths(provider.get_state("hot-0"))
                    hot_rows.append(f"| {name} | {get_ns:.0f} | {put_ns:.0f} | {put_int_ns:.0f} |")
        for pattern in PATTERNS:
            small, middle, large = (
                totals[pattern, n] for n in (args.small, args.middle, args.large)
            )
            verdict = "yes" if large / small <= 1.5 else "**no**"
            ratio_rows.append(
                f"| {name} | {pattern} | {small:.2f} | {middle:.2f} | {large:.2f} "
                f"| {large / small:.2f} | {verdict} | {large / middle:.2f} |"
            )
        print(f"[{name} done at {time.perf_counter() - started:.0f}s]", file=sys.stderr)

    command = "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])])
    print(f"Command: `{command}`  ")
    print(
        f"{args.changed:,} changed keys per txid, mean of {args.rounds} rounds; "
        f"total run {time.perf_counter() - started:.0f} s.\n"
    )
    print(f"### Commit cost of {args.changed:,} changed keys (prepare + commit of one txid)\n")
    print(
        "| provider | keys in state | changed keys | prepare ms | commit ms | total ms "
        "| WAL resets | WAL left ms |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    print("\n".join(cost_rows))
    print(f"\n### Cost ratio, {args.large:,} vs {args.small:,} keys (goal <= 1.5)\n")
    print(
        f"| provider | changed keys | {args.small:,} keys ms | {args.middle:,} keys ms "
        f"| {args.large:,} keys ms | ratio to {args.small:,} | goal met "
        f"| ratio to {args.middle:,} |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(ratio_rows))
    print(f"\n### Open a state of {args.large:,} committed keys and get one (goal < 1 s)\n")
    print("| provider | keys | open + first get ms | then a missing key ms | goal met |")
    print("|---|---:|---:|---:|---:|")
    print("\n".join(open_rows))
    print("\n### Hot paths (shared implementation, ns per call)\n")
    print("| provider | get (cached str key) | put (str key) | put (int key) |")
    print("|---|---:|---:|---:|")
    print("\n".join(hot_rows))
    print(f"\n### Loading the states (direct commits of {LOAD_BATCH:,} keys)\n")
    print("| provider | keys | seconds |")
    print("|---|---:|---:|")
    print("\n".join(load_rows))


if __name__ == "__main__":
    main()
