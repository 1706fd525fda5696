"""SIGKILL the transactional examples at random moments, restart them, and check the counts are exact.

Each case runs ``statestream run examples/transactional_<x>.py`` as a real
process, with the coordinator's state on sqlite or on a real Redis, kills it
with SIGKILL ten times, each time at a random moment after the committer has
started working, restarts it, lets the last run finish, and reads the
example's own SQLite store: the global count must equal the number of
words, every word count and every bucket count must equal the truth. The
sqlite and the redis runs of a case go side by side (two processes).
"""

from __future__ import annotations

import collections
import os
import random
import sqlite3
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kill_loop import cli, sigkill_runs

ROOT = Path(__file__).resolve().parents[2]
KILLS = 10
REDIS_URL = "redis://127.0.0.1:6379/0"

EXAMPLES = {
    # example file, config prefix, committer to watch, how many words
    "global-count": ("transactional_global_count.py", "global-count", "sum", 300_000),
    "words": ("transactional_words.py", "words", "buckets", 200_000),
}


def _kill_and_restart(example: str, opaque: bool, provider: list[str], db: Path, seed: int) -> int:
    """Run with ``KILLS`` SIGKILLs and a final run; returns how many runs were killed."""
    file, prefix, bolt, tuples = EXAMPLES[example]
    common = [
        "--set", f"{prefix}.database={db}",
        "--set", f"{prefix}.tuples={tuples}",
        "--set", f"{prefix}.take=500",
        "--set", f"{prefix}.opaque={'true' if opaque else 'false'}",
        "--set", "topology.max.spout.pending=5",
        *provider,
    ]  # fmt: skip
    rng = random.Random(seed)
    killed = sigkill_runs(
        [str(ROOT / "examples" / file), "--until-idle", *common],
        kills=KILLS,
        component=bolt,
        rng=rng,
        delay=(0.0, 0.2),
    )
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    final = subprocess.run(
        cli("run", str(ROOT / "examples" / file), "--until-idle", "--no-progress", *common),
        capture_output=True,
        timeout=120,
        env=env,
    )
    assert final.returncode == 0, final.stderr.decode()
    return killed


def _truth(example: str) -> Any:
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        if example == "global-count":
            import transactional_global_count as module
        else:
            import transactional_words as module  # type: ignore[no-redef]
    finally:
        sys.path.pop(0)
    return module


def _check(example: str, db: Path) -> None:
    module = _truth(example)
    tuples = EXAMPLES[example][3]
    conn = sqlite3.connect(db)
    try:
        if example == "global-count":
            ((count,),) = conn.execute("SELECT count FROM counts").fetchall()
            assert count == tuples
            return
        truth = collections.Counter(w for rows in module.words(tuples).values() for (w,) in rows)
        got = dict(conn.execute("SELECT key, count FROM words").fetchall())
        wrong = {w: (got.get(w), n) for w, n in truth.items() if got.get(w) != n}
        assert not wrong and set(got) == set(truth), (
            f"word counts differ: {list(wrong.items())[:10]}"
        )
        buckets = collections.Counter(n // module.BUCKET_SIZE for n in truth.values())
        stored = {b: n for b, n in conn.execute("SELECT key, count FROM buckets") if n}
        assert stored == dict(buckets)
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
@pytest.mark.parametrize("example", ["global-count", "words"])
def test_sigkilled_transactional_example_is_exact_on_sqlite_and_redis(
    example: str, opaque: bool, tmp_path: Path
) -> None:
    seed = int(os.environ.get("SSTREAM_TEST_SEED") or int.from_bytes(os.urandom(4), "big"))
    print(f"\nkill timing seed {seed} (rerun with SSTREAM_TEST_SEED={seed})")
    key_prefix = f"statestream-test-{uuid.uuid4().hex[:8]}:"
    providers = {
        "sqlite": [
            "--set", "topology.state.provider=sqlite",
            "--set", f"topology.state.provider.config={{path: {tmp_path / 'state.db'}}}",
        ],
        "redis": [
            "--set", "topology.state.provider=redis",
            "--set", f"topology.state.provider.config={{url: '{REDIS_URL}', key_prefix: '{key_prefix}'}}",
        ],
    }  # fmt: skip
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {
                name: pool.submit(
                    _kill_and_restart, example, opaque, conf, tmp_path / f"{name}.db", seed + i
                )
                for i, (name, conf) in enumerate(providers.items())
            }
            killed = {name: f.result() for name, f in futures.items()}
        print(f"runs killed mid-way: {killed}")
        for name in providers:
            _check(example, tmp_path / f"{name}.db")
            # Most runs must die mid-way, or the test would prove nothing.
            assert killed[name] >= KILLS // 2, f"{name}: only {killed[name]} of {KILLS} killed"
    finally:
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(f"{key_prefix}*"))
        if keys:
            client.delete(*keys)
