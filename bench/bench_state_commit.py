"""``bench_state_floor.py --part commit``: a sqlite commit in a 1,000,000-key state
against a 1,000-key one (issue 34's item 3, issue 49's), raw sqlite3 beside the
provider's own commit in the same run.

Run through bench_state_floor.py (its docstring says what is measured); kept here,
apart from the floors of the throughput ratio, which share its sqlite helpers.
"""

from __future__ import annotations

import os
import random
import sqlite3
import tempfile
import time

from bench_state_floor import CHECKPOINT_PAGES, PAGE_SIZE, _connect, _cpu, upsert


def commit_rows(rng: random.Random, size: int, n: int) -> list[list[tuple[bytes, bytes]]]:
    """``n`` commits' rows, drawn before any is timed: 1,000 random existing keys of
    ``size`` (new values) a commit, sorted."""
    return [
        sorted(
            (f'"w{rng.randrange(size)}"'.encode(), b"%d" % rng.randrange(99)) for _ in range(1_000)
        )
        for _ in range(n)
    ]


def one_commit(conn: sqlite3.Connection, rows: list[tuple[bytes, bytes]]) -> None:
    """One transaction: ``rows`` upserted."""
    conn.execute("BEGIN IMMEDIATE")
    upsert(conn, "count-0", rows)
    conn.execute("COMMIT")


def _runs_now(path: str) -> int:
    """The sorted runs in the provider's file (0 before schema 3)."""
    conn = sqlite3.connect(path)
    try:
        (count,) = conn.execute("SELECT count(*) FROM statestream_run_list").fetchone()
    except sqlite3.OperationalError:  # a tree without runs
        count = 0
    finally:
        conn.close()
    return int(count)


def provider_commits(tmp: str, size: int, commits: int) -> tuple[float, float, str]:
    """The sqlite provider's own commit beside the raw upserts (issue 49 item 3): a
    state of ``size`` keys, then checkpoints (put, prepare_commit, commit) of
    1,000 random existing keys (drawn before the timing), the folds and merges
    among them; CPU and wall seconds a commit, amortised over them, and what the
    timed commits did. Where the folds become runs that go into the entries
    now and then, the timing starts after the first such merge and stops at
    the first one after ``commits`` commits: whole cycles."""
    from statestream._registry import open_provider

    path = f"{tmp}/provider{size}.db"
    provider = open_provider("sqlite", {"path": path})
    try:
        state = provider.get_state("count-0")
        txid = 0
        for start in range(0, size, 100_000):
            for i in range(start, min(size, start + 100_000)):
                state.put(f"w{i}", 3)
            state.prepare_commit(txid)
            state.commit(txid)
            txid += 1
        rng = random.Random(size)
        put = state.put

        def checkpoint() -> tuple[float, float]:
            nonlocal txid
            keys = [(f"w{rng.randrange(size)}", rng.randrange(99)) for _ in range(1_000)]
            cpu, wall = _cpu(), time.perf_counter()
            for key, value in keys:
                put(key, value)
            state.prepare_commit(txid)
            state.commit(txid)
            txid += 1
            return _cpu() - cpu, time.perf_counter() - wall

        for _ in range(5):
            checkpoint()
        # Up to the end of a cycle when there are cycles (a state that folds into
        # runs writes its first run within a few hundred commits).
        cycles = False
        for i in range(4 * commits):
            before = _runs_now(path)
            checkpoint()
            cycles = bool(before) and not _runs_now(path)
            if cycles or (i >= commits and not before):
                break  # the end of a cycle, or no runs at all
        cpu = wall = 0.0
        done = merges = 0
        while done < commits or (cycles and _runs_now(path)):
            before = _runs_now(path)
            c, w = checkpoint()
            cpu, wall, done = cpu + c, wall + w, done + 1
            after = _runs_now(path)
            merges += bool(before) and not after
        what = f"{done} commits, {merges} merges of sorted runs into the entries"
        return cpu / done, wall / done, what
    finally:
        provider.close()


def commit_part(commits: int) -> None:
    """Issue 34's item 3 on raw sqlite3: 1,000 random keys upserted a commit."""
    print(
        "| state | commits | CPU ms a commit (provider's WAL checkpoints) |"
        " CPU ms a commit (no checkpoint) | wall ms | WAL frames a commit |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    per: dict[int, tuple[float, float, float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in (1_000, 1_000_000):
            path = f"{tmp}/commit{size}.db"
            conn = _connect(path)
            conn.execute("BEGIN")
            for start in range(0, size, 100_000):
                upsert(
                    conn,
                    "count-0",
                    [(f'"w{i}"'.encode(), b"3") for i in range(start, min(size, start + 100_000))],
                )
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            rng = random.Random(size)

            for rows in commit_rows(rng, size, 5):  # warm the page cache as a running state's is
                one_commit(conn, rows)
            plan = commit_rows(rng, size, commits)
            cpu, wall = _cpu(), time.perf_counter()
            for rows in plan:
                one_commit(conn, rows)
            with_ckpt = (_cpu() - cpu) / commits, (time.perf_counter() - wall) / commits
            conn.execute("PRAGMA wal_autocheckpoint=0")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            frames = cpu_plain = 0.0
            for rows in commit_rows(rng, size, commits):
                before = os.path.getsize(f"{path}-wal")
                cpu = _cpu()
                one_commit(conn, rows)
                cpu_plain += _cpu() - cpu
                frames += (os.path.getsize(f"{path}-wal") - before) / (PAGE_SIZE + 24)
                if os.path.getsize(f"{path}-wal") > CHECKPOINT_PAGES * PAGE_SIZE:
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
            per[size] = (with_ckpt[0], cpu_plain / commits, with_ckpt[1], frames / commits)
            a, b, c, d = per[size]
            print(
                f"| {size:,} keys | {commits} | {a * 1e3:.2f} | {b * 1e3:.2f} | {c * 1e3:.1f} |"
                f" {d:,.0f} |",
                flush=True,
            )
        ratios = [per[1_000_000][i] / per[1_000][i] for i in range(4)]
        print("| ratio 1M / 1k | | " + " | ".join(f"{r:.2f}" for r in ratios) + " |")
        # The provider's commit in the same run (its folds amortised): what item 3 asks.
        print("\n| the sqlite provider | timed | CPU ms a commit | wall ms |")
        print("|---|---|---:|---:|")
        mine = {}
        for size in (1_000, 1_000_000):
            mine[size] = provider_commits(tmp, size, commits)
            print(
                f"| {size:,} keys | {mine[size][2]} | {mine[size][0] * 1e3:.2f} | "
                f"{mine[size][1] * 1e3:.1f} |",
                flush=True,
            )
        print(
            f"| ratio 1M / 1k | | {mine[1_000_000][0] / mine[1_000][0]:.2f} | "
            f"{mine[1_000_000][1] / mine[1_000][1]:.2f} |"
        )
