"""The floor of the large/small throughput ratio (issue 34): what the large state costs the store.

    python bench/bench_state_floor.py [--generation 62000 40000 400000] [--reads 20000]
    python bench/bench_state_floor.py --part raw [--checkpoints 20] [--small-cpu 2.3]
        [--small-server 0.3] [--ways once changed bulk bounded]
        [--providers sqlite redis] [--redis redis://127.0.0.1:6379/11]
        [--reads-per-word 0.306] [--bounded-generation 0] [--read-ahead 8192]
    python bench/bench_state_floor.py --part commit [--commits 600]

``--part reads`` (the default):

1. The store reads the large corpus causes (bench_wallclock.vocab_corpus(2,000,000,
   1,000,000): 781,312 distinct words) through the read cache's two generations,
   simulated per count task (a word goes to task CRC32 % 2; a generation of N
   entries a task; a key seen before and in neither generation is a store read,
   a key never seen is answered by the filter of stored keys without one).
2. What one read costs through Python's sqlite3 on a 1,000,000-row table of the
   sqlite provider's schema (``statestream_entries``, 2 KiB pages, 8 MiB page
   cache), and what ``PRAGMA data_version`` (the provider's check of its kept
   merge, once a miss) costs: callgrind, instructions inside ``functools.reduce``
   of 0 and of ``--reads`` random reads, the difference divided by ``--reads``.

``--part raw``: what the large corpus forces on any design that keeps every
key in the store, without statestream: the final count of each of the
781,312 keys written once, in ``--checkpoints`` checkpoints (a key in the
checkpoint of its first sight; a transaction per count task's namespace and
checkpoint, as the run commits them), then every key read back in key order
and written out as the JSON lines the word count's dump writes. sqlite: the
provider's schema and pragmas (WAL, synchronous=FULL, 2 KiB pages, 8 MiB page
cache, a WAL checkpoint every 16 MiB), the rows bound as bytearrays in
statements of 256 rows (the provider's fold). Redis: the provider's layout
(the hash ``{N}`` and the key index ``{N}$keys``, one MULTI/EXEC pipeline a
checkpoint; the dump a ZRANGE BYLEX page of 1,024 keys, then its HMGET).
Printed: CPU seconds of this process (user + sys) per part, the Redis
server's apart (INFO cpu), and the best ratio it leaves, small-run CPU /
(small-run CPU + floor), and on Redis also with the servers' CPU on both
sides (``--small-server``: the small run's Redis server CPU). ``--ways``:
``once`` as above; ``changed``, the rows a design pays that writes every
changed key of every checkpoint into the B-tree (or hash); ``bulk``, the least a design can write that keeps each
checkpoint durable: each checkpoint's changed keys as one log record (its own
transaction; on Redis an RPUSH), then every key once, in key order, in one
transaction at the end (on Redis one pipeline); ``bounded``, the floor of any
durable design in bounded memory: ``once``, plus the store reads a bounded read
cache forces. The corpus is replayed in order per count task through the cache's
two generations (store_reads, as ``--part reads``), of ``--bounded-generation``
entries a task, or by default of the size whose reads a word come nearest
``--reads-per-word`` (the real run's "keys read ahead / word" with the built-in
defaults, bench_state_corpora.py ``--reads``); both are printed. Each task's
words of a checkpoint are cut into runs of ``--read-ahead`` words (the most a
drain reads ahead: statestream.runtime.local.bolt.READ_AHEAD), and the keys a
run reads are one batch, read before the checkpoint's writes from the store as
written so far, as the provider's ``get_many`` reads: sqlite, the keys sorted,
then the provider's own ``_select_entries`` (``SELECT ... FROM (VALUES ...)
CROSS JOIN statestream_entries``, statements of up to 512 keys); Redis, one
round trip of ``HMGET`` commands of up to 10,000 fields packed by the
provider's ``wire``. The reads are timed apart (and the server's CPU during
them); the floor is write + reads + dump.

``--part commit``: issue 34's item 3 (1,000 changed keys in a 1,000,000-key
state at most 1.5x the cost in a 1,000-key state) on raw sqlite3 with the
provider's schema and pragmas: ``--commits`` transactions, each an upsert of
1,000 random existing keys, into a table of 1,000,000 rows and one of 1,000;
CPU a commit (with the provider's WAL checkpoints, and without), and the WAL
frames a commit writes (the WAL's growth over page size + 24, counted with
automatic checkpoints off): the pages the B-tree changes. Then, in the same
run, the sqlite provider's own commit (``put`` of 1,000 random existing keys,
``prepare_commit``, ``commit``; its folds and the merges of its sorted runs
amortised) in a 1,000- and a 1,000,000-key state (issue 49 item 3). Where the
folds become sorted runs (providers/sqlite/runs.py), the timing covers whole
cycles: from the end of one merge of the runs into the entries to the end of
the first one after ``--commits`` commits; the table says how many commits
and merges that was. The random keys are drawn before each timed part (on
both sides: drawing 2,000 random numbers costs about what a 1,000-key commit
does).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import random
import resource
import sqlite3
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_instructions import callgrind_count  # noqa: E402

from statestream.runtime.local.bolt import READ_AHEAD  # noqa: E402  (a drain's read-ahead)

ROWS = 1_000_000
SQL = {
    "select": "SELECT value FROM statestream_entries WHERE namespace = ? AND key = ?",
    "pragma": "PRAGMA data_version",
}


@functools.cache
def large_words() -> list[str]:
    """The large corpus's words, in order (read once a process)."""
    from bench_wallclock import vocab_corpus

    with open(vocab_corpus(2_000_000, 1_000_000)) as f:
        return f.read().split()


def store_reads(words: list[str], generation: int) -> list[bool]:
    """Whether each word is a store read of the read cache's two generations of
    ``generation`` entries a count task (a word's task: CRC32 & 1): a key seen
    before and in neither generation. A key never seen is no read (the filter of
    stored keys answers it); one found in the old generation goes back to the young."""
    young: list[dict[str, int]] = [{}, {}]
    old: list[dict[str, int]] = [{}, {}]
    seen: list[set[str]] = [set(), set()]
    flags = [False] * len(words)
    for i, word in enumerate(words):
        task = zlib.crc32(word.encode()) & 1
        if word in young[task]:
            continue
        if len(young[task]) >= generation:
            old[task], young[task] = young[task], {}
        young[task][word] = 1
        if word in old[task]:
            continue
        if word in seen[task]:
            flags[i] = True
        else:
            seen[task].add(word)
    return flags


def simulate(generation: int) -> str:
    words = large_words()
    reads = sum(store_reads(words, generation))
    firsts = len(set(words))
    return (
        f"| {generation:,} | {len(words):,} | {firsts:,} | {reads:,} | {reads / len(words):.2f} |"
    )


def fit_generation(words: list[str], per_word: float) -> tuple[int, list[bool]]:
    """The generation (entries a task, to 500) whose store reads a word come nearest
    ``per_word`` (the real run's, measured), by bisection: fewer reads, larger generation."""
    low, high = 500, 1_000_000
    best: tuple[float, int, list[bool]] | None = None
    while high - low > 500:
        mid = (low + high) // 2 // 500 * 500
        flags = store_reads(words, mid)
        got = sum(flags) / len(words)
        if best is None or abs(got - per_word) < best[0]:
            best = (abs(got - per_word), mid, flags)
        if got > per_word:
            low = mid
        else:
            high = mid
    assert best is not None
    return best[1], best[2]


def _table(path: str) -> None:
    if os.path.exists(path):
        return
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA page_size=2048")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE statestream_entries (namespace TEXT NOT NULL, key BLOB NOT NULL,"
        " value BLOB NOT NULL, PRIMARY KEY (namespace, key)) WITHOUT ROWID"
    )
    conn.executemany(
        "INSERT INTO statestream_entries VALUES (?, ?, ?)",
        (("count-0", f'"w{i}"'.encode(), b"3") for i in range(ROWS)),
    )
    conn.commit()
    conn.close()


def one(path: str, what: str, n: int) -> None:
    """The measured part (under valgrind): n reads of random keys, or n pragmas."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA cache_size=-8192")
    rng = random.Random(1)
    keys = [f'"w{rng.randrange(ROWS)}"'.encode() for _ in range(n)]
    sql = SQL[what]

    def reads(_: int, __: int) -> int:
        ex = conn.execute
        if what == "select":
            for key in keys:
                ex(sql, ("count-0", key)).fetchone()
        else:
            for _key in keys:
                ex(sql).fetchone()
        return 0

    functools.reduce(reads, [0, 0])


def count(path: str, what: str, n: int) -> int:
    return callgrind_count(__file__, "--one", what, str(n), path)


# The sqlite provider's settings (providers/sqlite: database.py, DEFAULT_*).
PAGE_SIZE = 2048
CACHE_KIB = [8 * 1024]  # the provider's cache_mb (8); --page-cache-mib sets it
CHECKPOINT_PAGES = 16 * 1024 * 1024 // PAGE_SIZE
CHUNK = 256
NAMESPACES = ("wordcount/count-0", "wordcount/count-1")
DUMP_PAGE = 1024  # statestream._kvwalk.PAGE


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _connect(path: str, autocheckpoint: bool = True) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS statestream_entries (namespace TEXT NOT NULL,"
        " key BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (namespace, key)) WITHOUT ROWID"
    )
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB[0]}")
    conn.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES if autocheckpoint else 0}")
    conn.execute(f"PRAGMA journal_size_limit={CHECKPOINT_PAGES * PAGE_SIZE}")
    conn.execute("PRAGMA temp_store=MEMORY")
    return conn


def _upsert_sql(rows: int) -> str:
    return (
        "INSERT INTO statestream_entries (namespace, key, value) VALUES "
        + ", ".join(["(?1, ?, ?)"] * rows)
        + " ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value"
    )


UPSERT = {1 << bit: _upsert_sql(1 << bit) for bit in range(CHUNK.bit_length())}


def upsert(conn: sqlite3.Connection, namespace: str, rows: list[tuple[bytes, bytes]]) -> None:
    """The rows in statements of CHUNK rows and of smaller powers of two (the provider's fold)."""
    start = 0
    while start < len(rows):
        size = min(CHUNK, 1 << ((len(rows) - start).bit_length() - 1))
        params: list[object] = [namespace]
        for key, value in rows[start : start + size]:
            params += (bytearray(key), bytearray(value))
        conn.execute(UPSERT[size], params)
        start += size


Batches = list[list[dict[bytes, bytes]]]  # [checkpoint][namespace] -> {key: value}


def checkpoints(n: int) -> tuple[Batches, Batches, int]:
    """The large corpus cut into n checkpoints of equal words: (each key once, with its
    final count, in the checkpoint of its first sight; every key a checkpoint changes,
    with its count then; the words)."""
    words = large_words()
    final: dict[str, int] = {}
    changed: Batches = []
    per = -(-len(words) // n)
    for start in range(0, len(words), per):
        batch: list[dict[bytes, bytes]] = [{}, {}]
        for word in words[start : start + per]:
            final[word] = count = final.get(word, 0) + 1
            batch[zlib.crc32(word.encode()) & 1][orjson.dumps(word)] = b"%d" % count
        changed.append(batch)
    once: Batches = []
    seen: set[bytes] = set()
    for batch in changed:
        firsts: list[dict[bytes, bytes]] = [{}, {}]
        for task, keys in enumerate(batch):
            for key in keys:
                if key not in seen:
                    seen.add(key)
                    firsts[task][key] = b"%d" % final[orjson.loads(key)]
        once.append(firsts)
    return once, changed, len(words)


Reads = list[list[list[list[bytes]]]]  # [checkpoint][namespace] -> batches of keys


def read_batches(n: int, flags: list[bool], ahead: int) -> Reads:
    """The store reads ``flags`` marks, as the read-ahead batches them: each count
    task's words of a checkpoint (the n checkpoints of checkpoints()) in runs of
    ``ahead`` (a drain's read-ahead takes at most that many tuples), the keys read
    in a run one batch."""
    words = large_words()
    per = -(-len(words) // n)
    out: Reads = []
    for start in range(0, len(words), per):
        tasks: list[list[str | None]] = [[], []]  # a task's words, None where no read
        for word, read in zip(words[start : start + per], flags[start : start + per], strict=True):
            tasks[zlib.crc32(word.encode()) & 1].append(word if read else None)
        batches: list[list[list[bytes]]] = [[], []]
        for task, seq in enumerate(tasks):
            for i in range(0, len(seq), ahead):
                keys = [orjson.dumps(w) for w in dict.fromkeys(seq[i : i + ahead]) if w]
                if keys:  # a drain with nothing to read calls no get_many
                    batches[task].append(keys)
        out.append(batches)
    return out


def write_lines(out: str, items: Iterator[tuple[bytes, bytes]]) -> int:
    """The word count's dump (examples/wordcount.py write_counts): decode, JSON lines."""
    n = 0
    with open(out, "wb") as f:
        chunk: list[bytes] = []
        for key, value in items:
            chunk.append(
                orjson.dumps({"word": orjson.loads(key), "count": orjson.loads(value)}) + b"\n"
            )
            if len(chunk) == 4096:
                f.write(b"".join(chunk))
                n += len(chunk)
                chunk = []
        f.write(b"".join(chunk))
        n += len(chunk)
    return n


def encode(keys: dict[bytes, bytes]) -> bytes:
    """A checkpoint's delta as one record: keys and values NUL-separated (JSON never
    holds a raw NUL), the cheapest encoding Python has: one join in C."""
    return b"\0".join(itertools.chain.from_iterable(keys.items()))


def sqlite_floor(
    tmp: str, batches: Batches, log: Batches | None = None, reads: Reads | None = None
) -> dict[str, float]:
    """``reads``: before each checkpoint's writes, its store reads, a batch at a
    time as the provider's ``get_many`` reads the entries (timed apart)."""
    from statestream_providers.sqlite.backend import _select_entries

    path = f"{tmp}/raw.db"
    conn = _connect(path)
    conn.execute("CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, delta BLOB NOT NULL)")
    cpu, wall = _cpu(), time.perf_counter()
    for batch in log or ():
        for keys in batch:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO log (delta) VALUES (?)", (bytearray(encode(keys)),))
            conn.execute("COMMIT")
    read = [0.0, 0.0]  # CPU, wall
    found = 0
    for i, batch in enumerate(batches):
        if reads:
            r_cpu, r_wall = _cpu(), time.perf_counter()
            for namespace, task_reads in zip(NAMESPACES, reads[i], strict=True):
                for wanted in task_reads:  # the provider's _read_many: sorted, then chunks
                    found += len(_select_entries(conn, namespace, sorted(wanted)))
            read[0] += _cpu() - r_cpu
            read[1] += time.perf_counter() - r_wall
        for namespace, keys in zip(NAMESPACES, batch, strict=True):
            if keys:
                conn.execute("BEGIN IMMEDIATE")
                upsert(conn, namespace, [(key, keys[key]) for key in sorted(keys)])
                conn.execute("COMMIT")
    write = _cpu() - cpu - read[0], time.perf_counter() - wall - read[1]

    def items() -> Iterator[tuple[bytes, bytes]]:
        # Pages in key order, as the provider's scan_page: a statement a page.
        for namespace in NAMESPACES:
            after = b""
            while True:
                page = conn.execute(
                    "SELECT key, value FROM statestream_entries WHERE namespace = ? AND key > ?"
                    " ORDER BY key LIMIT ?",
                    (namespace, after, DUMP_PAGE),
                ).fetchall()
                yield from page
                if len(page) < DUMP_PAGE:
                    break
                after = page[-1][0]

    cpu, wall = _cpu(), time.perf_counter()
    lines = write_lines(f"{tmp}/out.jsonl", items())
    dump = _cpu() - cpu, time.perf_counter() - wall
    conn.close()
    os.unlink(path)
    return {
        "write": write[0],
        "write_wall": write[1],
        "read": read[0],
        "read_wall": read[1],
        "found": found,
        "dump": dump[0],
        "dump_wall": dump[1],
        "lines": lines,
    }


def redis_floor(
    tmp: str, url: str, batches: Batches, log: Batches | None = None, reads: Reads | None = None
) -> dict[str, float]:
    """``reads`` as in sqlite_floor: a batch an ``HMGET`` packed and sent as the
    provider's ``get_many`` does (one round trip, commands of its chunk of fields)."""
    import redis

    from statestream_providers.redis import wire
    from statestream_providers.redis.backend import _CHUNK

    client: Any = redis.Redis.from_url(url)
    if client.dbsize():
        raise SystemExit(f"{url} is not empty: give an empty database (--redis)")

    def server() -> float:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    names = [(f"{{{n}}}".encode(), f"{{{n}}}$keys".encode()) for n in NAMESPACES]
    try:
        cpu, wall, srv = _cpu(), time.perf_counter(), server()
        for batch in log or ():
            for (data, _), keys in zip(names, batch, strict=True):
                client.rpush(data + b"$log", encode(keys))
        read = [0.0, 0.0, 0.0]  # CPU, wall, server CPU
        found = 0
        for i, batch in enumerate(batches):
            if reads:
                r_cpu, r_wall, r_srv = _cpu(), time.perf_counter(), server()
                for (data, _), task_reads in zip(names, reads[i], strict=True):
                    for wanted in task_reads:
                        commands = wire.commands(b"HMGET", data, wanted, _CHUNK)
                        replies = wire.send(client, b"".join(commands), len(commands))
                        found += len(wanted) - sum(reply.count(None) for reply in replies)
                read[0] += _cpu() - r_cpu
                read[1] += time.perf_counter() - r_wall
                read[2] += server() - r_srv
            for (data, index), keys in zip(names, batch, strict=True):
                if keys:
                    pipe = client.pipeline(transaction=True)
                    items = list(keys.items())
                    for start in range(0, len(items), 10_000):
                        chunk = dict(items[start : start + 10_000])
                        pipe.hset(data, mapping=chunk)
                        pipe.zadd(index, dict.fromkeys(chunk, 0))
                    pipe.execute()
        write = (
            _cpu() - cpu - read[0],
            time.perf_counter() - wall - read[1],
            server() - srv - read[2],
        )

        def pages() -> Iterator[tuple[bytes, bytes]]:
            for data, index in names:
                after = b"-"
                while True:
                    keys = client.zrange(index, after, b"+", bylex=True, offset=0, num=DUMP_PAGE)
                    if not keys:
                        break
                    yield from zip(keys, client.hmget(data, keys), strict=True)
                    if len(keys) < DUMP_PAGE:
                        break
                    after = b"(" + keys[-1]

        cpu, wall, srv = _cpu(), time.perf_counter(), server()
        lines = write_lines(f"{tmp}/out.jsonl", pages())
        dump = _cpu() - cpu, time.perf_counter() - wall, server() - srv
    finally:
        client.flushdb()
    return {
        "write": write[0],
        "write_wall": write[1],
        "write_server": write[2],
        "read": read[0],
        "read_wall": read[1],
        "read_server": read[2],
        "found": found,
        "dump": dump[0],
        "dump_wall": dump[1],
        "dump_server": dump[2],
        "lines": lines,
    }


WAYS = {
    "once": "each key once",
    "changed": "every changed key",
    "bulk": "a log record a checkpoint, then each key once in one sorted transaction",
    "bounded": "each key once, and a bounded cache's store reads",
}


def bounded_reads(n: int, per_word: float, generation: int, ahead: int) -> Reads:
    """The store reads of the bounded way: the generation fitted to ``per_word`` (the
    real run's keys read a word) unless given, batched by ``ahead`` words a task."""
    words = large_words()
    if generation:
        flags = store_reads(words, generation)
    else:
        generation, flags = fit_generation(words, per_word)
    reads = read_batches(n, flags, ahead)
    batches = [b for c in reads for t in c for b in t]
    total = sum(map(len, batches))
    print(
        f"bounded: a generation of {generation:,} entries a task reads {total:,} keys,"
        f" {total / len(words):.4f} a word (the real run: {per_word:.4f});"
        f" {len(batches):,} batches of {ahead:,} words a task, {total / len(batches):,.0f} keys"
        " a batch on average"
    )
    return reads


PARTS = ("write", "read", "dump")  # the timed parts of a way's run


def raw(
    n: int,
    small_cpu: float,
    small_server: float,
    providers: list[str],
    url: str,
    ways: list[str],
    bounded: tuple[float, int, int],
) -> None:
    once, changed, words = checkpoints(n)
    keys = sum(len(k) for b in once for k in b)
    rows = sum(len(k) for b in changed for k in b)
    sizes = sorted(sum(len(k) for k in b) for b in once)
    print(
        f"{words:,} words, {keys:,} keys, {n} checkpoints: new keys a checkpoint"
        f" {sizes[0]:,}-{sizes[-1]:,} (median {sizes[len(sizes) // 2]:,});"
        f" changed keys, all checkpoints: {rows:,}"
    )
    reads = bounded_reads(n, *bounded) if "bounded" in ways else None
    print(
        "\n| provider | what | rows | CPU s (this process) | wall s | server CPU s | floor ratio |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for provider in providers:
            for way in ways:
                what = WAYS[way]
                log = changed if way == "bulk" else None
                batches = {"once": once, "changed": changed, "bounded": once}.get(way) or [
                    [{k: v for b in once for k, v in sorted(b[task].items())} for task in (0, 1)]
                ]
                way_reads = reads if way == "bounded" else None
                if provider == "sqlite":
                    r = sqlite_floor(tmp, batches, log, way_reads)
                else:
                    r = redis_floor(tmp, url, batches, log, way_reads)
                srv = {p: f"{r[p + '_server']:.2f}" if p + "_server" in r else "" for p in PARTS}
                rows_w = sum(len(k) for b in batches for k in b)
                wrote = WAYS["once"] if way == "bounded" else what
                print(
                    f"| {provider} | write, {wrote} | {rows_w:,} | {r['write']:.2f} |"
                    f" {r['write_wall']:.2f} | {srv['write']} | |"
                )
                if way_reads:
                    keys_read = sum(len(k) for c in way_reads for t in c for k in t)
                    print(
                        f"| {provider} | store reads ({int(r['found']):,} found) | {keys_read:,} |"
                        f" {r['read']:.2f} | {r['read_wall']:.2f} | {srv['read']} | |"
                    )
                print(
                    f"| {provider} | dump ({int(r['lines']):,} lines) | | {r['dump']:.2f} |"
                    f" {r['dump_wall']:.2f} | {srv['dump']} | |"
                )
                floor = sum(r[p] for p in PARTS)  # "read" is 0 but in the bounded way
                both = floor + sum(r.get(p + "_server", 0.0) for p in PARTS)
                ratio = small_cpu / (small_cpu + floor)
                small_both = small_cpu + small_server
                extra = (
                    f"; with the servers' {small_both / (small_both + both):.2f}"
                    if provider == "redis"
                    else ""
                )
                print(
                    f"| {provider} | **floor, {what}** | | **{floor:.2f}** | | |"
                    f" **{ratio:.2f}**{extra} |",
                    flush=True,
                )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--generation", type=int, nargs="+", default=[40_000, 62_000, 400_000])
    ap.add_argument("--reads", type=int, default=20_000)
    ap.add_argument("--part", choices=("reads", "raw", "commit"), default="reads")
    ap.add_argument("--checkpoints", type=int, default=20, help="the large run's (raw)")
    ap.add_argument("--small-cpu", type=float, default=2.3, help="the small run's CPU s (raw)")
    ap.add_argument("--small-server", type=float, default=0.0, help="its Redis server's CPU s")
    ap.add_argument("--page-cache-mib", type=int, default=8, help="sqlite's page cache (raw)")
    ap.add_argument("--providers", nargs="+", default=["sqlite", "redis"])
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/11", help="an empty database")
    ap.add_argument("--commits", type=int, default=60)
    ap.add_argument("--ways", nargs="+", choices=tuple(WAYS), default=list(WAYS), help="raw")
    ap.add_argument(
        "--reads-per-word",
        type=float,
        default=0.306,
        help="the real run's keys read ahead a word (bench_state_corpora.py --reads): bounded",
    )
    ap.add_argument(
        "--bounded-generation", type=int, default=0, help="entries a task (0: fit the reads)"
    )
    ap.add_argument(
        "--read-ahead", type=int, default=READ_AHEAD, help="words a task a batch of reads"
    )
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(args.one[2], args.one[0], int(args.one[1]))
        return
    CACHE_KIB[0] = args.page_cache_mib * 1024
    if args.part == "raw":
        raw(
            args.checkpoints,
            args.small_cpu,
            args.small_server,
            args.providers,
            args.redis,
            args.ways,
            (args.reads_per_word, args.bounded_generation, args.read_ahead),
        )
        return
    if args.part == "commit":
        from bench_state_commit import commit_part  # beside this file (it imports this one)

        commit_part(args.commits)
        return
    print("| generation a task | words | first sights (no read) | store reads | a word |")
    print("|---|---|---|---|---|")
    for generation in args.generation:
        print(simulate(generation), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/floor.db"
        _table(path)
        print("\n| statement (Python sqlite3, 1,000,000 rows) | instructions a call |")
        print("|---|---|")
        for what in ("select", "pragma"):
            per = (count(path, what, args.reads) - count(path, what, 0)) / args.reads
            print(f"| {SQL[what]} | {per:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
