"""Bytewax 0.21.1's running word count, with and without recovery, measured on this machine.

    python bench/bench_bytewax.py [--sentences 200000] [--repeat 3]

Gives a reference figure measured here, next to statestream's own stateful word
count, on the corpus every other benchmark uses (bench/corpus.py: 200,000
sentences of 10 words, 2,000,000 words, one sentence a line).

Bytewax is not a dependency of the project: the first run creates a separate
venv under bench/results/venv-bytewax (git-ignored) with `python3 -m venv` and
installs bytewax==0.21.1 into it; later runs reuse it. Each dataflow then runs
in that venv as a subprocess (this same file, with hidden options), one process
per configuration and repetition.

The dataflow: `FileSource(corpus)` -> `flat_map(str.split)` -> `key_on(word)`
-> `stateful_map` keeping a running count per word (it emits (word, count) for
every word, 2,000,000 items) -> a DynamicSink whose partitions keep only the
last count seen per word in a dict and write it to a JSON file when the
dataflow completes. The parent merges those files and checks them exactly
against collections.Counter of the corpus words.

Configurations:

- 1 worker, recovery: a recovery directory initialised with
  `python -m bytewax.recovery DIR PARTS`, `RecoveryConfig(DIR)`, and
  `epoch_interval=timedelta(seconds=1)` (a state snapshot every 1 s), run with
  `bytewax.run.cli_main` as `python -m bytewax.run` does. The primary figure.
- 1 worker, no recovery: the same with `recovery_config=None` (epoch still 1 s).
- 2 workers in 1 process (`-w 2`, threads sharing one GIL), recovery.
- 2 processes x 1 worker (`-i 0/1 -a host:port;host:port` over loopback),
  recovery. FileSource reads one file on one worker only; splitting happens
  there, counting is spread over both workers by key.

Time is measured inside the dataflow process(es), from just before `cli_main`
to just after it returns (for 2 processes: earliest start to latest end), so
venv creation, interpreter start-up and the exactness check are excluded.

The statestream row runs `python bench/bench_stateful.py --one throughput --arg
CORPUS,sqlite` (examples/wordcount.py: StatefulBolt on the sqlite provider,
acking on, a checkpoint every 1 s, 2 split + 2 count tasks in one process) the
same number of times.

Configurations are run round-robin, `--repeat` times each, one process (or one
2-process cluster) at a time; the table gives the best and the median words/s,
as this 2-core machine is noisy.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV = HERE / "results" / "venv-bytewax"
BYTEWAX_VERSION = "0.21.1"
TIMEOUT_S = 1800


@dataclass(frozen=True)
class Config:
    system: str
    label: str
    workers: int = 1  # workers per process
    processes: int = 1
    recovery: bool = True


@dataclass
class Row:
    config: Config
    elapsed: list[float] = field(default_factory=list)
    exact: list[bool] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


CONFIGS = [
    Config("Bytewax 0.21.1", "1 worker, recovery (sqlite), epoch 1 s"),
    Config("Bytewax 0.21.1", "1 worker, no recovery, epoch 1 s", recovery=False),
    Config("Bytewax 0.21.1", "2 workers in 1 process (-w 2), recovery, epoch 1 s", workers=2),
    Config("Bytewax 0.21.1", "2 processes x 1 worker (-i/-a), recovery, epoch 1 s", processes=2),
]
STATESTREAM = Config("statestream", "StatefulBolt, sqlite, checkpoint 1 s (bench_stateful.py)")


# --- inside the bytewax venv ----------------------------------------------------------


def dataflow_worker(
    corpus: str,
    workdir: str,
    workers: int,
    recovery_dir: str | None,
    process_id: int | None,
    addresses: list[str] | None,
) -> None:
    """Build and run the dataflow in this process; print its start and end time."""
    from datetime import timedelta

    import bytewax.operators as op
    from bytewax.connectors.files import FileSource
    from bytewax.dataflow import Dataflow
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.recovery import RecoveryConfig
    from bytewax.run import cli_main

    class FinalCountPartition(StatelessSinkPartition[tuple[str, int]]):
        def __init__(self, path: Path) -> None:
            self.path = path
            self.counts: dict[str, int] = {}

        def write_batch(self, items: list[tuple[str, int]]) -> None:
            counts = self.counts
            for word, n in items:
                counts[word] = n

        def close(self) -> None:
            self.path.write_text(json.dumps(self.counts))

    class FinalCountSink(DynamicSink[tuple[str, int]]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> FinalCountPartition:
            return FinalCountPartition(Path(workdir) / f"counts-{worker_index}.json")

    def running_count(state: int | None, _word: str) -> tuple[int, int]:
        n = (state or 0) + 1
        return n, n

    flow = Dataflow("wordcount")
    lines = op.input("lines", flow, FileSource(corpus))
    words = op.flat_map("split", lines, str.split)
    keyed = op.key_on("key", words, lambda w: w)
    counts = op.stateful_map("count", keyed, running_count)
    op.output("out", counts, FinalCountSink())

    recovery = RecoveryConfig(Path(recovery_dir)) if recovery_dir else None
    start = time.time()
    cli_main(
        flow,
        workers_per_process=workers,
        process_id=process_id,
        addresses=addresses,
        epoch_interval=timedelta(seconds=1),
        recovery_config=recovery,
    )
    end = time.time()
    print(json.dumps({"start": start, "end": end}), flush=True)


# --- in the project's interpreter -----------------------------------------------------


def ensure_venv() -> Path:
    """Create bench/results/venv-bytewax with bytewax==0.21.1 unless it is already there."""
    py = VENV / "bin" / "python"
    probe = [str(py), "-c", "import importlib.metadata as m; print(m.version('bytewax'))"]
    if py.exists():
        r = subprocess.run(probe, capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip() == BYTEWAX_VERSION:
            return py
    else:
        print(f"creating {VENV.relative_to(ROOT)} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print(f"installing bytewax=={BYTEWAX_VERSION} ...", file=sys.stderr)
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", f"bytewax=={BYTEWAX_VERSION}"], check=True
    )
    r = subprocess.run(probe, capture_output=True, text=True, check=True)
    if r.stdout.strip() != BYTEWAX_VERSION:
        raise SystemExit(f"bytewax {r.stdout.strip()} in {VENV}, expected {BYTEWAX_VERSION}")
    return py


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def tail(text: str, lines: int = 3) -> str:
    return " / ".join(text.strip().splitlines()[-lines:])


def run_dataflow(
    py: Path, script: Path, args: list[str], workdir: str, cfg: Config
) -> list[dict[str, Any]]:
    """Run `script --worker ARGS` in the bytewax venv as `cfg` says (workers, processes,
    recovery), `workdir` its scratch directory; the last stdout line of each process
    (a JSON object with at least "start" and "end"), one per process.

    Shared with bench_windows.py: the script takes the hidden options --workdir,
    --workers, --recovery-dir, --process-id and --addresses besides its own ARGS.
    """
    cmd = [str(py), str(script), "--worker", *args, "--workdir", workdir]
    cmd += ["--workers", str(cfg.workers)]
    if cfg.recovery:
        db_dir = f"{workdir}/recovery"
        os.mkdir(db_dir)  # bytewax.recovery wants an existing directory
        parts = str(cfg.workers * cfg.processes)
        init = subprocess.run(
            [str(py), "-m", "bytewax.recovery", db_dir, parts],
            capture_output=True,
            text=True,
        )
        if init.returncode != 0:
            raise RuntimeError(f"bytewax.recovery exit {init.returncode}: {tail(init.stderr)}")
        cmd += ["--recovery-dir", db_dir]
    if cfg.processes > 1:
        addrs = ";".join(f"127.0.0.1:{p}" for p in free_ports(cfg.processes))
        cmds = [[*cmd, "--process-id", str(i), "--addresses", addrs] for i in range(cfg.processes)]
    else:
        cmds = [cmd]
    procs = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds
    ]
    stamps: list[dict[str, Any]] = []
    failures: list[str] = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT_S)
            if p.returncode != 0:
                failures.append(f"exit {p.returncode}: {tail(err)}")
            else:
                stamps.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:  # a cluster peer left waiting for a failed one
            if p.poll() is None:
                p.kill()
                p.wait()
    if failures:
        raise RuntimeError("; ".join(failures))
    return stamps


def run_bytewax(
    py: Path, corpus: str, cfg: Config, expected: collections.Counter[str]
) -> tuple[float, bool]:
    workdir = tempfile.mkdtemp(prefix="bench-bytewax-")
    try:
        stamps = run_dataflow(py, Path(__file__).resolve(), ["--corpus", corpus], workdir, cfg)
        elapsed = max(s["end"] for s in stamps) - min(s["start"] for s in stamps)
        got: dict[str, int] = {}
        parts_seen = 0
        for f in sorted(Path(workdir).glob("counts-*.json")):
            part = json.loads(f.read_text())
            parts_seen += len(part)
            got.update(part)
        exact = parts_seen == len(got) and got == dict(expected)
        return elapsed, exact
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_statestream(corpus: str) -> tuple[float, bool]:
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / "bench_stateful.py"),
            "--one",
            "throughput",
            "--arg",
            f"{corpus},sqlite",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {tail(proc.stderr)}")
    r: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(r["elapsed"]), bool(r["exact"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--sentences", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    # Hidden: one dataflow process, run by the parent inside the bytewax venv.
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--recovery-dir", help=argparse.SUPPRESS)
    ap.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--addresses", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        dataflow_worker(
            args.corpus,
            args.workdir,
            args.workers,
            args.recovery_dir,
            args.process_id,
            args.addresses.split(";") if args.addresses else None,
        )
        return

    sys.path.insert(0, str(HERE))
    from corpus import corpus_path

    cmd = "python bench/bench_bytewax.py"
    if args.sentences != 200_000:
        cmd += f" --sentences {args.sentences}"
    if args.repeat != 3:
        cmd += f" --repeat {args.repeat}"
    print(f"command: {cmd}", flush=True)

    py = ensure_venv()
    corpus = str(corpus_path(args.sentences))
    with open(corpus) as f:
        expected = collections.Counter(f.read().split())
    words = sum(expected.values())

    rows = [Row(c) for c in [*CONFIGS, STATESTREAM]]
    load_before = os.getloadavg()
    for rep in range(args.repeat):
        for row in rows:
            try:
                if row.config is STATESTREAM:
                    elapsed, exact = run_statestream(corpus)
                else:
                    elapsed, exact = run_bytewax(py, corpus, row.config, expected)
            except Exception as exc:
                row.errors.append(str(exc))
                print(
                    f"  run {rep + 1}: {row.config.system}, {row.config.label}: FAILED {exc}",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            row.elapsed.append(elapsed)
            row.exact.append(exact)
            print(
                f"  run {rep + 1}: {row.config.system}, {row.config.label}: "
                f"{words / elapsed:,.0f} words/s, exact={exact}",
                file=sys.stderr,
                flush=True,
            )

    print(
        f"\ncorpus: {args.sentences:,} sentences, {words:,} words, {len(expected):,} distinct; "
        f"{args.repeat} runs per configuration, round-robin; python {platform.python_version()}, "
        f"{os.cpu_count()} cores; 1-min load average {load_before[0]:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after (other work on the machine skews the figures)\n"
    )
    print("| system | configuration | words | best words/s | median words/s | exact |")
    print("|---|---|---:|---:|---:|---|")
    for row in rows:
        c = row.config
        if row.elapsed:
            rates = [words / e for e in row.elapsed]
            best, median = f"{max(rates):,.0f}", f"{statistics.median(rates):,.0f}"
            exact = str(all(row.exact))
            if len(row.elapsed) < args.repeat:
                exact += f" ({len(row.elapsed)}/{args.repeat} runs ok)"
        else:
            best = median = "failed"
            exact = "-"
        print(f"| {c.system} | {c.label} | {words:,} | {best} | {median} | {exact} |")
    for row in rows:
        for err in dict.fromkeys(row.errors):
            print(f"\n{row.config.system}, {row.config.label}: failed: {err}")


if __name__ == "__main__":
    main()
