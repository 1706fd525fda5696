"""SIGKILL a `statestream run` process at random moments of its work, several times.

Shared by the SIGKILL tests. Each run prints plain progress lines (stderr is
a pipe) every 50 ms. A kill lands either at a random share of the whole
input (``work``: the tuples the watched component executes in all; each run
is killed up to 0.1 s after it has executed a random 1-6% of that), which holds on any
machine and core, however fast; or, without ``work``, a random ``delay``
after the first line showing the watched component at work (not after
process start, so a slow start on a loaded machine cannot turn every kill
into a kill before any work).
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
    threshold: int,
) -> None:
    """Set ``working`` once the watched component has executed ``threshold`` tuples
    (or the process ended)."""
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        found = pattern.search(line)
        if found and int(found.group(1).replace(",", "")) >= threshold:
            working.set()
    working.set()


def sigkill_runs(
    run_args: Sequence[str],
    *,
    kills: int,
    component: str,
    rng: random.Random,
    delay: tuple[float, float] = (0.05, 0.35),
    work: int | None = None,
) -> int:
    """Start ``statestream run <run_args>`` ``kills`` times and SIGKILL each run: once
    ``component`` has executed a random 1-6% of ``work`` tuples in that run, or
    (no ``work``) a random ``delay`` after it first executed one. Returns how
    many runs were killed (the others ended by themselves, with exit 0)."""
    executed = re.compile(rf"\b{re.escape(component)} emitted=[\d,]+ executed=([\d,]+)")
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
        threshold = 1 if work is None else max(1, int(work * rng.uniform(0.01, 0.06)))
        reader = threading.Thread(
            target=_watch, args=(proc, lines, working, executed, threshold), daemon=True
        )
        reader.start()
        working.wait(timeout=60)
        # With ``work``, a little more: progress lines come on a timer, and a
        # kill right after one would fall at the same phase of every checkpoint.
        time.sleep(rng.uniform(*delay) if work is None else rng.uniform(0.0, 0.1))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()
        assert proc.returncode in (0, -signal.SIGKILL), "".join(lines)
        killed += proc.returncode == -signal.SIGKILL
    return killed
