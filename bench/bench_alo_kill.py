"""At-least-once word count, SIGKILLed over and over: what does each kill overcount?

    python bench/bench_alo_kill.py [--lines 200000] [--kills 30] [--interval-ms 100]
        [--runtimes local,workers]

(``SSTREAM_TEST_SEED=N`` replays the kill timings of a seed it printed.)

Runs ``examples/wordcount.py`` with ``statestream.state.exactly.once=false`` on
sqlite, each run on a fresh store and with ``--no-progress``, and SIGKILLs it
at a random moment (0.5 s after its start, to three checkpoint intervals
more, at least 2.5 s); then reads the store (``statestream state dump``): the
checkpoint phase stored when it died, the line a rerun resumes at (the acked
position stored for the restored txid) and the committed counts. The
overcount of a kill is the committed words beyond those of the lines before
the resume line: what the rerun counts twice. Printed per phase the kills
died in ("none stored": before the first checkpoint), and in all.
``workers``: ``topology.workers: 2`` (the supervisor is killed; its workers
end with it).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from kill_loop import cli, seeded_rng  # noqa: E402

from statestream._exactly_once import CheckpointRecord  # noqa: E402
from statestream.testing import random_text  # noqa: E402

WORDCOUNT = str(HERE.parent / "examples" / "wordcount.py")


class Stored:
    """The checkpoint record as ``state dump`` shows it (a KeyValueState's get)."""

    def __init__(self, entries: dict[str, Any]) -> None:
        self.entries = entries

    def get(self, key: str, default: Any = None) -> Any:
        return self.entries.get(key, default)


def dump(component: str, settings: list[str]) -> list[dict[str, Any]]:
    """The stored entries of ``component`` (none: a run killed before its store was made)."""
    done = subprocess.run(
        cli("state", "dump", "--component", component, *settings),
        capture_output=True,
        timeout=120,
        text=True,
    )
    if done.returncode != 0 and "no committed state" not in done.stderr:
        print(f"state dump: {done.stderr.strip()}", file=sys.stderr)
    return [json.loads(line) for line in done.stdout.splitlines()] if done.returncode == 0 else []


def after_kill(settings: list[str], prefix_words: list[int]) -> tuple[str, int]:
    """(phase stored, words a rerun from here counts twice)."""
    entries = {e["key"]: e["value"] for e in dump("$checkpointspout", settings)}
    record = CheckpointRecord.load(Stored(entries))  # type: ignore[arg-type]
    _, where, _ = record.resume_point()
    line = 0 if not where else int(where["sentences-0"]["line"])
    committed = sum(e["value"] for e in dump("count", settings))
    print(
        f"killed in {record.state}: resumes after line {line:,}; {committed:,} words committed",
        file=sys.stderr,
    )
    phase = "none stored" if record.state.txid < 0 else record.state.phase.value
    return phase, committed - prefix_words[line]


def bench(runtime: str, lines: int, kills: int, interval_ms: int, rng: Any) -> None:
    over: dict[str, list[int]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        random_text(corpus, lines)
        prefix_words = [0]
        with corpus.open() as f:
            for text in f:
                prefix_words.append(prefix_words[-1] + len(text.split()))
        for k in range(kills):
            db = Path(tmp) / f"state-{k}.db"  # each kill on a fresh store
            settings = [
                "--set", "topology.state.provider=sqlite",
                "--set", f"topology.state.provider.config={{path: {db}}}",
                "--set", "statestream.state.exactly.once=false",
            ]  # fmt: skip
            run_args = [
                WORDCOUNT, "--until-idle", "--set", f"wordcount.input={corpus}",
                "--set", f"topology.state.checkpoint.interval.ms={interval_ms}",
                "--set", f"topology.workers={2 if runtime == 'workers' else 1}",
                *settings,
            ]  # fmt: skip
            # A random moment of the run, from its start (a run prints no progress:
            # see the docstring), the first checkpoint of a run comes about 0.5 s in.
            delay = rng.uniform(0.5, 0.5 + max(2.5, 3 * interval_ms / 1000))
            proc = subprocess.Popen(
                cli("run", *run_args, "--no-progress"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
                phase, words = after_kill(settings, prefix_words)
                over[phase].append(words)
            else:
                proc.wait(timeout=30)

    total = [n for counted in over.values() for n in counted]
    for phase, counted in [*sorted(over.items()), ("all", total)]:
        print(
            f"| {runtime} | {lines:,} | {interval_ms:,} | {phase} | {len(counted)} "
            f"| {sum(counted):,} | {sum(counted) / max(len(counted), 1):,.0f} "
            f"| {max(counted, default=0):,} |",
            flush=True,
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--kills", type=int, default=30)
    ap.add_argument("--interval-ms", type=int, default=100)
    ap.add_argument("--runtimes", default="local,workers")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    rng = seeded_rng()
    print(
        "| runtime | lines | interval ms | killed in | kills | overcount (words) | per kill | most |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for runtime in filter(None, args.runtimes.split(",")):
        bench(runtime, args.lines, args.kills, args.interval_ms, rng)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
