"""SIGKILL a `statestream run` process at random moments of its work, several times.

Shared by the SIGKILL tests. Each run prints plain progress lines (stderr is
a pipe) every 50 ms; a kill is timed from the first line showing the watched
component at work, not from process start, so a slow start on a loaded
machine cannot turn every kill into a kill before any work.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "statestream", *args]


def seeded_rng() -> random.Random:
    """A random source whose seed is printed (and taken from SSTREAM_TEST_SEED)."""
    seed = int(os.environ.get("SSTREAM_TEST_SEED") or int.from_bytes(os.urandom(4), "big"))
    print(f"\nkill timing seed {seed} (rerun with SSTREAM_TEST_SEED={seed})")
    return random.Random(seed)


def _watch(
    proc: subprocess.Popen[str],
    lines: list[str],
    working: threading.Event,
    pattern: re.Pattern[str],
) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        if pattern.search(line):
            working.set()
    working.set()


def sigkill_runs(
    run_args: Sequence[str],
    *,
    kills: int,
    component: str,
    rng: random.Random,
    delay: tuple[float, float] = (0.05, 0.35),
) -> int:
    """Start ``statestream run <run_args>`` ``kills`` times, SIGKILL each run a random
    ``delay`` after ``component`` first executed a tuple; return how many runs were
    killed (the others ended by themselves, with exit 0)."""
    working_line = re.compile(rf"\b{re.escape(component)} emitted=[\d,]+ executed=[1-9]")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    killed = 0
    for _ in range(kills):
        proc = subprocess.Popen(
            cli("run", *run_args, "--set", "statestream.progress.interval.secs=0.05"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        lines: list[str] = []
        working = threading.Event()
        reader = threading.Thread(
            target=_watch, args=(proc, lines, working, working_line), daemon=True
        )
        reader.start()
        working.wait(timeout=60)
        time.sleep(rng.uniform(*delay))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
        assert proc.returncode in (0, -signal.SIGKILL), "".join(lines)
        killed += proc.returncode == -signal.SIGKILL
    return killed
