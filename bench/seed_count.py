"""Issue 49's per-word figure: the seed word count as a user runs it, every process
counted by callgrind (``bench_instructions.py --seed``; its docstring says what and why).

The checkpoints a run takes. ``statestream run`` with the defaults takes a
checkpoint every second of the wall clock (``topology.state.checkpoint.interval.ms``
1000, below ``topology.message.timeout.secs`` 30), and callgrind runs the code some
50 times slower: left as they are, the settings give the run under callgrind a
checkpoint for every 1/50 s of native work, some 50 times as many a word as a
native run takes, and how many fall in a run then moves with the machine's load
(a count of one build went from 9,401 to 11,861 a word between two runs, and to
12,897 at a load of 12, where several commits folded the SQLite log). So by
default both settings (and the period of the status lines, each of which takes
a metrics snapshot) are scaled by callgrind's slowdown, measured in the same
invocation: the 100,000-word exactly-once run's own elapsed time (the CLI's
``idle after N s``: the topology's run, without start-up) natively, the least of
three, against the same run under callgrind with no checkpoint between its first
and its last (the settings stretched to an hour). The table prints the
checkpoint tuples of every run beside those of the same run made natively with
the unscaled settings, so that the schedule can be checked. ``--seed-literal``
runs the settings as they are under callgrind instead.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

INTERVAL = "topology.state.checkpoint.interval.ms"
TIMEOUT = "topology.message.timeout.secs"
# The status lines' period: each takes a metrics snapshot of the run.
PROGRESS = "statestream.progress.interval.secs"
# No checkpoint or status line between the first and the last of a run (the calibration's).
STRETCHED = [f"{INTERVAL}=3600000", f"{TIMEOUT}=7200", f"{PROGRESS}=7200"]


@dataclass(frozen=True)
class SeedRun:
    """What one run of the seed word count gave."""

    instructions: int  # every process's, summed (0 for a native run)
    checkpoints: int  # tuples $checkpointspout emitted (-1: not printed)
    elapsed: float  # seconds, the CLI's "idle after N s"


def seed_args(words: int, exactly_once: bool, extra: list[str]) -> list[str]:
    """``-m statestream run ...`` of examples/wordcount.py on SQLite over ``words`` words."""
    from corpus import corpus_path

    corpus = corpus_path(words // 10)  # ten words a line
    settings = [
        "topology.state.provider=sqlite",
        f"statestream.state.exactly.once={str(exactly_once).lower()}",
        f"wordcount.input={corpus}",
        *extra,
    ]
    return [
        "-m",
        "statestream",
        "run",
        str(HERE.parent / "examples" / "wordcount.py"),
        "--until-idle",
        "--no-progress",
        *(arg for kv in settings for arg in ("--set", kv)),
    ]


def seed_run(
    python: str,
    words: int,
    exactly_once: bool,
    extra: list[str],
    *,
    callgrind: bool = True,
    profile: str | None = None,
    cores: list[str] | None = None,
) -> SeedRun:
    """One run in a fresh directory (a fresh store), under callgrind with every process
    counted unless ``callgrind`` is false; ``cores`` collects the core it says it ran."""
    mode = "eo" if exactly_once else "alo"
    out = f"{profile}/callgrind.out.{mode}.{words}.%p" if profile else "/dev/null"
    tool = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}"]
    with tempfile.TemporaryDirectory() as work:
        proc = subprocess.run(
            [*(tool if callgrind else []), python, *seed_args(words, exactly_once, extra)],
            cwd=work,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")},
        )
    if proc.returncode != 0:
        raise SystemExit(f"seed run {mode} {words:,} failed:\n{proc.stderr[-3000:]}")
    counts = [int(c) for c in re.findall(r"==\d+== Collected : (\d+)", proc.stderr)]
    checkpoints = re.search(r"^\$checkpointspout\s+(\d[\d,]*)", proc.stderr, re.M)
    elapsed = re.search(r"^statestream: \w+ after ([\d.]+) s", proc.stderr, re.M)
    core = re.search(r"with the (.*?core[^;]*);", proc.stderr)
    if cores is not None and core is not None and core.group(1) not in cores:
        cores.append(core.group(1))
    return SeedRun(
        sum(counts),
        int(checkpoints.group(1).replace(",", "")) if checkpoints else -1,
        float(elapsed.group(1)) if elapsed else math.nan,
    )


def setting(extra: list[str], key: str, default: float) -> float:
    """The value of ``key`` the runs take: the last ``--seed-set`` of it, else ``default``."""
    given = [kv.split("=", 1)[1] for kv in extra if kv.split("=", 1)[0] == key]
    return float(given[-1]) if given else default


def scaled_settings(
    python: str, large: int, extra: list[str], say: Callable[[str], None]
) -> list[str]:
    """``extra`` with the checkpoint interval, the message timeout and the status lines'
    period times callgrind's slowdown, measured on the large exactly-once run (see the
    module docstring)."""
    from statestream._config import settings_of

    defaults = settings_of({})
    native = min(seed_run(python, large, True, extra, callgrind=False).elapsed for _ in range(3))
    slowed = seed_run(python, large, True, [*extra, *STRETCHED]).elapsed
    slowdown = slowed / native
    interval = round(setting(extra, INTERVAL, defaults.topology_state_checkpoint_interval_ms))
    timeout = round(setting(extra, TIMEOUT, defaults.topology_message_timeout_secs))
    progress = setting(extra, PROGRESS, defaults.statestream_progress_interval_secs)
    scaled = [
        f"{INTERVAL}={round(interval * slowdown)}",
        f"{TIMEOUT}={math.ceil(timeout * slowdown)}",
        f"{PROGRESS}={progress * slowdown:.1f}",
    ]
    say(
        f"checkpoint schedule: callgrind ran the {large:,}-word exactly-once run "
        f"{slowdown:.1f} times slower than a native run ({slowed:.2f} s against "
        f"{native:.2f} s, the run's own elapsed time), so the runs below take "
        f"{INTERVAL}={interval}, {TIMEOUT}={timeout} and {PROGRESS}={progress:g} "
        f"times {slowdown:.1f}: {' '.join(scaled)}, the checkpoints and status lines a "
        "native run takes (--seed-literal: the settings as they are under callgrind)"
    )
    kept = [kv for kv in extra if kv.split("=", 1)[0] not in (INTERVAL, TIMEOUT, PROGRESS)]
    return kept + scaled


def seed_main(
    python: str,
    sizes: list[int],
    profile: str | None,
    extra: list[str],
    cmd: str,
    literal: bool = False,
) -> None:
    """Print issue 49's per-word figure: both modes, marginal between the two sizes."""
    if profile:
        Path(profile).mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    small, large = sizes
    runs = extra if literal else scaled_settings(python, large, extra, notes.append)
    cores: list[str] = []
    found = {
        (eo, n): seed_run(python, n, eo, runs, profile=profile, cores=cores)
        for eo in (True, False)
        for n in sizes
    }
    native = {
        (eo, n): seed_run(python, n, eo, extra, callgrind=False).checkpoints
        for eo in (True, False)
        for n in sizes
    }
    print(f"command: {cmd}")
    for core in cores:
        print(f"measured: {core}")
    for note in notes:
        print(note)
    print()
    print(
        f"| mode | instructions, {small:,} words | instructions, {large:,} words "
        "| checkpoint tuples | the same natively | marginal per word |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for eo in (True, False):
        s, g = found[(eo, small)], found[(eo, large)]
        print(
            f"| {'exactly-once' if eo else 'at-least-once'} | {s.instructions:,} "
            f"| {g.instructions:,} | {s.checkpoints}/{g.checkpoints} "
            f"| {native[(eo, small)]}/{native[(eo, large)]} "
            f"| {(g.instructions - s.instructions) / (large - small):,.0f} |"
        )
    sys.stdout.flush()
