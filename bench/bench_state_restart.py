"""Start to first tuple of a topology restarted on 1,000,000 keys of state (issue 34).

    python bench/bench_state_restart.py --tree TREE [--keys 1000000] [--providers sqlite redis]

TREE is a built copy (``git archive`` + ``setup.py build_ext --inplace``;
PYTHONPATH=TREE, STATESTREAM_CORE=compiled). Per provider, in a fresh
working directory (sqlite: config/local.yaml's ``./statestream-data/state.db``;
redis: config/redis.yaml with a fresh ``key_prefix``, deleted after):

1. the documented word count runs on N distinct words (``k0`` .. ``kN-1``,
   bench_state_corpora.distinct_corpus), exactly-once, until idle: N keys in
   the two count tasks' state, the last checkpoints' log records unfolded;
2. ten lines are appended to the input, and bench/restart_wordcount.py (the
   same topology, whose count tasks note the wall clock and the process's
   CPU time of their first tuple) runs again on the same store: "after a
   run" is the time (wall; and CPU, steadier on a loaded machine) from just
   before the process is started to the first tuple reaching a count task
   (interpreter start-up, imports, the claim, the rescale check, recovery
   and the first state read included);
0. (first) the same topology started on an empty store: the start-up
   cost without state, for comparison;
3. the store is folded (sqlite: ``SQLiteStateProvider.compact()``; redis has
   no log, so the same again), ten more lines appended, and the same
   restart timed: "after a fold".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_state_corpora import _redis_cleanup, distinct_corpus  # noqa: E402
from bench_wallclock import timed, wordcount_cmd  # noqa: E402


def _config(provider: str, prefix: str) -> tuple[str, list[str]]:
    if provider == "sqlite":
        return "local.yaml", []
    conf = {"host": "127.0.0.1", "port": 6379, "key_prefix": prefix}
    return "redis.yaml", ["--set", f"topology.state.provider.config={json.dumps(conf)}"]


def _env(tree: Path, **more: str) -> dict[str, str]:
    # tree/pp holds statestream_providers -> tree/providers: without it the
    # providers would be the installed checkout's, not the tree's.
    path = f"{tree}:{tree}/pp" if (tree / "pp").is_dir() else str(tree)
    return dict(os.environ, PYTHONPATH=path, STATESTREAM_CORE="compiled", **more)


def _first_tuple(
    tree: Path, workdir: str, corpus: str, provider: str, prefix: str
) -> tuple[float, float]:
    """(wall s, CPU s of the process) from start to the first tuple at a count task."""
    config, sets = _config(provider, prefix)
    stamp = Path(workdir, "stamp.txt")
    stamp.unlink(missing_ok=True)
    env = _env(tree, RESTART_STAMP=str(stamp))
    cmd = wordcount_cmd(tree, corpus, None, True, config) + sets
    cmd[4] = str(HERE / "restart_wordcount.py")  # the topology file, in place of the example
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not stamp.exists():
        raise RuntimeError(f"restart failed: {proc.stderr[-1500:]}")
    wall, cpu = min(tuple(map(float, line.split())) for line in stamp.read_text().splitlines())
    return wall - t0, cpu


def _append(corpus: str, tag: str) -> None:
    with open(corpus, "a") as f:
        for i in range(10):
            f.write(" ".join(f"{tag}{i}-{j}" for j in range(10)) + "\n")


def measure(tree: Path, provider: str, keys: int) -> dict[str, object]:
    workdir = tempfile.mkdtemp(prefix="restart-")
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    try:
        corpus = str(Path(workdir, "input.txt"))
        shutil.copy(distinct_corpus(keys), corpus)
        config, sets = _config(provider, prefix)
        env = _env(tree)
        fill = wordcount_cmd(tree, corpus, None, True, config) + sets
        wall, _, rss, _, _ = timed(fill, workdir, env)
        _append(corpus, "a")
        after_run = _first_tuple(tree, workdir, corpus, provider, prefix)
        if provider == "sqlite":
            code = (
                "from statestream_providers.sqlite import SQLiteStateProvider as P; "
                "P('statestream-data/state.db').compact()"
            )
            subprocess.run([sys.executable, "-c", code], cwd=workdir, env=env, check=True)
        _append(corpus, "b")
        after_fold = _first_tuple(tree, workdir, corpus, provider, prefix)
        return {"fill_s": wall, "fill_rss": rss, "after_run": after_run, "after_fold": after_fold}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if provider == "redis":
            _redis_cleanup(prefix)


def empty_start(tree: Path, provider: str) -> tuple[float, float]:
    """Start to first tuple on an empty store: what start-up costs without state."""
    workdir = tempfile.mkdtemp(prefix="restart-")
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    try:
        corpus = str(Path(workdir, "input.txt"))
        _append(corpus, "a")
        return _first_tuple(tree, workdir, corpus, provider, prefix)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if provider == "redis":
            _redis_cleanup(prefix)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--providers", nargs="+", default=["sqlite", "redis"])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(
        "| provider | keys | fill s | fill peak RSS MB | start to first tuple, empty store: "
        "wall s / CPU s | after a run | after a fold |"
    )
    print("|---|---|---|---|---|---|---|")
    for _ in range(args.repeat):
        for provider in args.providers:
            empty = empty_start(args.tree.resolve(), provider)
            r = measure(args.tree.resolve(), provider, args.keys)
            pairs = [empty, r["after_run"], r["after_fold"]]
            cells = " | ".join(f"{wall:.2f} / {cpu:.2f}" for wall, cpu in pairs)  # type: ignore[misc]
            print(
                f"| {provider} | {args.keys:,} | {r['fill_s']:.0f} | {r['fill_rss']:.0f} | "
                f"{cells} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
