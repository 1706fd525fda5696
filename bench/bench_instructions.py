"""Instructions per word of the word count, counted by valgrind: a figure noise cannot move.

    python bench/bench_instructions.py [--sentences 5000]
        [--topology plain|lines|words|stateful] [--python PATH]
        [--exactly-once auto|true|false]
        [--metrics default|off|on|served[,...]]
    python bench/bench_instructions.py --seed [--seed-words 10000,100000]
        [--seed-profile DIR] [--seed-set KEY=VALUE ...] [--seed-literal] [--python PATH]

Wall-clock benchmarks on a shared 2-core machine swing by 30% from run to
run; an instruction count does not (callgrind counts the same total for the
same binary and input whatever else the machine does). This runs the word
count of bench_stateful.py under ``valgrind --tool=callgrind`` and counts only
the instructions executed inside ``LocalRuntime.run`` (the run is called
through ``functools.reduce``, a C function callgrind can toggle collection
on), so interpreter start-up, imports and the exactness check are left out
(the state provider's modules included: they are imported before the run,
see import_provider).

``plain`` is the word count with a plain counting bolt, acking on;
``lines`` is the spout feeding a bolt that only acks each line, ``words``
the spout and the split feeding a bolt that only acks each word (with the
groupings and parallelism of ``plain``; bench_components.py takes the
differences); ``stateful`` is examples/wordcount.py on the memory provider
with the checkpoint interval stretched to an hour, so that the count does
not depend on how fast valgrind runs (only the checkpoint at the end of the
input is taken). Use it to compare two versions of the runtime: run it on each and
compare the instructions per word. It needs valgrind (Debian: valgrind).

``--lines-per-second N`` puts the checkpoints where a real run at N lines a
second would take them, so that issue 14's setting (a checkpoint every
second, on the 2,000,000-word corpus) can be counted: the run's clock is a
fake one that the spout moves 1/N s forward at every line it reads (the
spout is examples/wordcount.py's ``FileSpout``, subclassed only for that),
and ``--interval-ms`` is read on that clock. Under valgrind the system
clock runs some 50 times slower than the code, which would put 50 times
more checkpoints per word; with a fixed N every build takes the same
checkpoints at the same lines, so counts compare across builds. 23,000 is
the measured rate of the stateful SQLite count on this machine kind
(200,000 lines in 8.7 s, bench/RESULTS-wallclock.md).

``--seed`` counts issue 49's figure instead (bench/seed_count.py): the seed word
count as a user runs it, ``statestream run examples/wordcount.py --until-idle``
on SQLite with every other setting at its default, in exactly-once and in
at-least-once mode (``--set statestream.state.exactly.once=true|false``), under
``valgrind --tool=callgrind --trace-children=yes``: every instruction of every
process from start to exit. Each run is in a fresh directory (a fresh store).
The marginal figure, ``(I_large - I_small) / (words_large - words_small)``
(corpora of 10,000 and 100,000 words by default, bench/corpus.py), cancels
start-up, imports and the fixed costs. The checkpoints are on the wall clock,
which callgrind slows some 50 times: the checkpoint interval, the message
timeout and the status lines' period are scaled by callgrind's slowdown,
measured first (the output says by how much), so that the runs take the
checkpoints a native run takes; the table
prints each run's checkpoint tuples beside a native run's. ``--seed-literal``
runs the settings as they are under callgrind (a checkpoint a second of its
slowed clock: the count then moves with the machine's load). ``--seed-set
KEY=VALUE`` (repeatable) adds to the runs' ``--set``: ``--seed-set
topology.state.checkpoint.interval.ms=3600000 --seed-set
topology.message.timeout.secs=7200`` takes only the checkpoints at the start
and the end of the input, a count that compares two builds of the tuple path
exactly. ``--seed-profile DIR`` keeps the callgrind files there
(``callgrind.out.<mode>.<words>.<pid>``) for ``callgrind_annotate``.

``--python PATH`` runs the measured word count under another interpreter
(this one by default), e.g. a venv's into which a wheel was installed, so
that an installed package counts against the editable checkout
(bench/RESULTS-core.md). valgrind runs ``PATH`` itself: give the real
interpreter or a venv's ``bin/python``, never a pyenv shim (a bash script).
The run imports statestream as that interpreter finds it (mind
``PYTHONPATH``); the table's heading says which package and which core it
measured.

``--metrics`` says what the metrics bank collects (issue 33: collection on,
with the page served and polled once a second, costs at most 3% more
instructions per word than off); a comma-separated list runs each in turn and
prints one row each with its ratio to the first:

- ``default``: the config as it is (for a tree older than the bank, which
  has no such key);
- ``off``: ``topology.stats.sample.rate: 0``, no latency timed;
- ``on``: ``topology.stats.sample.rate: 0.05`` (the default);
- ``served``: ``on``, and the live view served from the measured process
  (statestream._ui, on a free loopback port) and polled once a second of the
  run's clock: ``--lines-per-second`` is required, and at every
  ``lines-per-second``-th line the spout renders the bodies as the
  publisher thread does (``LiveView.publish``: one ``metrics_snapshot()``,
  ``/api/v1/topology`` and ``/metrics``) and waits while a poller thread
  GETs both paths. The publisher's own wall-clock timer is not used: under
  valgrind it would render some 50 times more often per word than in a real
  run (``--poll-lines N`` polls every N lines instead: many polls in a
  corpus valgrind runs in minutes; one poll costs the difference to ``on``
  over the number of polls, which is printed). Counted: the render and the
  push of the bodies to the server process (in the run's thread); not
  counted: the poller (it stands for the browser) and the requests, which
  the server process of statestream._ui.httpd answers outside the run's
  (before it, they were counted in request threads of the run's process).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

import seed_count  # noqa: E402  (bench/ is on the path from here on)


def ack_only_topology(words: bool) -> Any:
    """The spout, the split if ``words``, and a bolt that acks each tuple and does nothing else.

    Parallelism and groupings are plain_topology's: the acking bolt takes the
    lines by shuffle (as the split does) or the words by fields on ``word``
    (as the count does), 2 tasks each.
    """
    import wordcount

    from statestream import Bolt, FileSpout, TopologyBuilder

    class AckOnly(Bolt):
        def execute(self, tup: Any) -> None:
            self.collector.ack(tup)

    b = TopologyBuilder("wordcount")
    b.set_spout("sentences", FileSpout(path_key="wordcount.input"))
    if words:
        b.set_bolt("split", wordcount.SplitSentence(), 2).shuffle_grouping("sentences")
        b.set_bolt("ack", AckOnly(), 2).fields_grouping("split", ["word"])
    else:
        b.set_bolt("ack", AckOnly(), 2).shuffle_grouping("sentences")
    return b.build()


def ticking_topology(
    clock: Any,
    lines_per_second: int,
    each_second: Callable[[], None] | None = None,
    poll_lines: int = 0,
) -> Any:
    """examples/wordcount.py's topology, its spout moving ``clock`` 1/``lines_per_second`` s
    forward per line read (and calling ``each_second`` at every ``poll_lines``-th,
    by default every ``lines_per_second``-th)."""
    import wordcount

    from statestream import FileSpout, TopologyBuilder

    step = 1.0 / lines_per_second
    every = poll_lines or lines_per_second

    class TickingFileSpout(FileSpout):
        lines = 0

        def next_tuple(self) -> None:
            clock.advance(step)
            if each_second is not None:
                self.lines += 1
                if self.lines == every:
                    self.lines = 0
                    each_second()
            super().next_tuple()

    b = TopologyBuilder("wordcount")
    spout = TickingFileSpout(path_key="wordcount.input", default_path=wordcount.CORPUS, resume=True)
    b.set_spout("sentences", spout)
    b.set_bolt("split", wordcount.SplitSentence(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", wordcount.WordCount(), 2).fields_grouping("split", ["word"])
    return b.build()


class PolledView:
    """The live view of a run in this process, published and polled on demand
    (``--metrics served``; see the module docstring)."""

    def __init__(self) -> None:
        self.view: Any = None
        self.polls = 0
        self._asked = threading.Event()
        self._answered = threading.Event()
        self._stop = False

    def __getstate__(self) -> dict[str, Any]:
        # The build checks that the spout (whose class calls each_second) pickles;
        # its tasks are copies of it sharing this class, so this one is never copied.
        return {}

    def start(self, runtime: Any, topology: Any) -> None:
        from statestream._ui.server import LiveView
        from statestream._ui.source import renderer

        # The publisher's timer never fires within a run: each_second publishes.
        self.view = LiveView(("127.0.0.1", 0), renderer(runtime, topology), interval=1e9)
        self.view.__enter__()
        threading.Thread(target=self._poller, daemon=True).start()

    def _poller(self) -> None:
        while self._asked.wait() and not self._stop:
            self._asked.clear()
            for path in ("api/v1/topology", "metrics"):
                with urllib.request.urlopen(self.view.url + path, timeout=600) as reply:
                    reply.read()
            self._answered.set()

    def each_second(self) -> None:
        """A second of the run's clock went by: render, as the publisher does, and
        let the poller GET both paths (waited for, so every build serves as many)."""
        self.view.publish()
        self._answered.clear()
        self._asked.set()
        self._answered.wait()
        self.polls += 1

    def close(self) -> None:
        self._stop = True
        self._asked.set()
        self.view.close()


def import_provider(name: str) -> None:
    """Import the provider ``name`` and every module of its package, outside the measured part.

    The runtime imports the provider when it opens (``LocalRuntime.open``, inside
    the measured part), and with ``PYTHONDONTWRITEBYTECODE=1`` a tree without
    ``.pyc`` files would count the compilation of the provider's source there
    (some 54M instructions for sqlite, bench/RESULTS-state.md, sixth round):
    a figure that moved with the length of the source, not with the run.
    """
    import importlib
    import pkgutil
    from importlib.metadata import entry_points

    from statestream._registry import ENTRY_POINT_GROUP, resolve_provider

    resolve_provider(name)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == name:
            module = importlib.import_module(entry.module)
            for sub in pkgutil.iter_modules(getattr(module, "__path__", [])):
                importlib.import_module(f"{module.__name__}.{sub.name}")


def one_run(
    topology: str,
    sentences: int,
    exactly_once: str = "auto",
    provider: str = "memory",
    interval_ms: int = 3_600_000,
    acking: bool = True,
    lines_per_second: int = 0,
    metrics: str = "default",
    poll_lines: int = 0,
) -> tuple[Any, dict[str, Any]]:
    """The measured part (runs under valgrind): one word count, inside functools.reduce.

    Returns the run's RunResult and the config it ran with (the output file
    is ``conf["wordcount.output"]``), for checks made after the measured part.
    """
    import bench_stateful
    import wordcount
    from corpus import corpus_path

    from statestream import FakeClock
    from statestream.runtime.local import LocalRuntime

    clock = FakeClock() if lines_per_second else None
    workdir = tempfile.mkdtemp()
    conf: dict[str, Any] = {
        "wordcount.input": str(corpus_path(sentences)),
        "wordcount.output": f"{workdir}/out.jsonl",
    }
    if metrics != "default":
        conf["topology.stats.sample.rate"] = 0 if metrics == "off" else 0.05
    polled = PolledView() if metrics == "served" else None
    if polled is not None and not lines_per_second:
        raise SystemExit("--metrics served polls once a second of the run: give --lines-per-second")
    if topology == "plain":
        topo = bench_stateful.plain_topology()
    elif topology in ("lines", "words"):
        topo = ack_only_topology(words=topology == "words")
    else:
        conf.update(bench_stateful.provider_conf(provider, workdir))
        import_provider(str(conf["topology.state.provider"]))
        conf["topology.state.checkpoint.interval.ms"] = interval_ms
        conf["topology.message.timeout.secs"] = 7200
        conf["statestream.state.exactly.once"] = {"true": True, "false": False}.get(
            exactly_once, exactly_once
        )
        topo = (
            ticking_topology(
                clock, lines_per_second, polled.each_second if polled else None, poll_lines
            )
            if lines_per_second
            else wordcount.topology()
        )
    if polled is not None and topology != "stateful":
        raise SystemExit("--metrics served needs --topology stateful (its spout ticks the clock)")
    if not acking:
        conf["topology.acker.executors"] = 0
    rt = LocalRuntime(topo, conf, clock)
    if polled is not None:
        polled.start(rt, topo)
    # A two-item list without an initial value: reduce calls the lambda once.
    result = functools.reduce(lambda _, __: rt.run(until_idle=True), [0, 0])
    if polled is not None:
        polled.close()
        print(f"polls: {polled.polls}")
    return result, conf


def callgrind_count(*script_args: str, python: str = sys.executable) -> int:
    """Instructions callgrind counts inside functools.reduce while ``python`` runs
    ``script_args`` (a script and its arguments): the measured part of a bench."""
    count, stdout = callgrind_run(list(script_args), python)
    measured = re.search(r"^measured: (.*)$", stdout, re.M)
    if measured is not None and measured.group(1) not in _MEASURED:
        _MEASURED.append(measured.group(1))
    polls = re.search(r"^polls: (\d+)", stdout, re.M)
    if polls is not None:
        print(f"({script_args[script_args.index('--metrics') + 1]}: {polls.group(1)} polls)")
    return count


def callgrind_run(
    script_args: list[str], python: str = sys.executable, out: str = "/dev/null"
) -> tuple[int, str]:
    """The instructions counted inside functools.reduce while ``python`` runs
    ``script_args``, and what it printed; the callgrind file goes to ``out``."""
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--toggle-collect=functools_reduce",
            f"--callgrind-out-file={out}",
            # The interpreter itself, not a wrapper script (pyenv shims are bash).
            python,
            *script_args,
        ],
        capture_output=True,
        text=True,
        check=True,
        # One string hash seed for every run: dict probing and set order (and so
        # the instructions) then do not vary from run to run.
        env={**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")},
    )
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{proc.stderr[-2000:]}")
    return int(found.group(1)), proc.stdout


METRICS = ("default", "off", "on", "served")
_MEASURED: list[str] = []  # the package and core each measured run imported


def say_measured() -> None:
    """Print (for callgrind_count) which statestream this interpreter runs, and its core."""
    import statestream
    from statestream import _core

    print(f"measured: statestream from {Path(statestream.__file__).parent}, {_core.describe()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=5000)
    ap.add_argument("--topology", choices=("plain", "lines", "words", "stateful"), default="plain")
    ap.add_argument("--exactly-once", choices=("auto", "true", "false"), default="auto")
    ap.add_argument("--provider", choices=("memory", "sqlite"), default="memory")
    ap.add_argument("--interval-ms", type=int, default=3_600_000)
    ap.add_argument("--no-acking", action="store_true")
    ap.add_argument("--lines-per-second", type=int, default=0)
    ap.add_argument(
        "--metrics",
        default="default",
        help=f"comma-separated, each of {', '.join(METRICS)} (see the module docstring)",
    )
    ap.add_argument("--poll-lines", type=int, default=0, help="served: poll every N lines")
    ap.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter to measure under (default: this one); not a pyenv shim",
    )
    ap.add_argument("--seed", action="store_true", help="issue 49's figure (see the docstring)")
    ap.add_argument("--seed-words", default="10000,100000", help="the two corpus sizes, in words")
    ap.add_argument("--seed-profile", default=None, help="keep the callgrind files in this dir")
    ap.add_argument(
        "--seed-set", action="append", default=[], help="KEY=VALUE for the seed runs; repeatable"
    )
    ap.add_argument(
        "--seed-literal",
        action="store_true",
        help="the checkpoint settings as they are under callgrind, not scaled by its slowdown",
    )
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    modes = args.metrics.split(",")
    if unknown := [m for m in modes if m not in METRICS]:
        ap.error(f"--metrics {unknown[0]!r}: pick from {', '.join(METRICS)}")
    if args.one:
        say_measured()
        one_run(
            args.topology,
            args.sentences,
            args.exactly_once,
            args.provider,
            args.interval_ms,
            not args.no_acking,
            args.lines_per_second,
            modes[0],
            args.poll_lines,
        )
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    from corpus import corpus_path

    corpus_path(args.sentences)  # written outside the measured run
    common = [
        "--topology",
        args.topology,
        "--sentences",
        str(args.sentences),
        "--exactly-once",
        args.exactly_once,
        "--provider",
        args.provider,
        "--interval-ms",
        str(args.interval_ms),
        *(["--no-acking"] if args.no_acking else []),
        *(["--lines-per-second", str(args.lines_per_second)] if args.lines_per_second else []),
        *(["--poll-lines", str(args.poll_lines)] if args.poll_lines else []),
    ]
    python = shutil.which(args.python) or args.python
    if Path(python).read_bytes()[:2] == b"#!":
        raise SystemExit(f"--python {args.python}: a script, not an interpreter (a pyenv shim?)")
    if args.seed:
        sizes = [int(n) for n in args.seed_words.split(",")]
        if len(sizes) != 2 or sizes[0] >= sizes[1] or any(n % 10 for n in sizes):
            ap.error(f"--seed-words {args.seed_words!r}: two sizes, small,large, multiples of 10")
        cmd = "python bench/bench_instructions.py --seed"
        if args.seed_words != "10000,100000":
            cmd += f" --seed-words {args.seed_words}"
        cmd += "".join(f" --seed-set {kv}" for kv in args.seed_set)
        if args.python != sys.executable:
            cmd += f" --python {args.python}"
        if args.seed_literal:
            cmd += " --seed-literal"
        seed_count.seed_main(
            python, sizes, args.seed_profile, args.seed_set, cmd, literal=args.seed_literal
        )
        return
    totals = [
        callgrind_count(__file__, "--one", *common, "--metrics", m, python=python) for m in modes
    ]
    words = args.sentences * 10
    cmd = "python bench/bench_instructions.py"
    if args.sentences != 5000:
        cmd += f" --sentences {args.sentences}"
    if args.topology != "plain":
        cmd += f" --topology {args.topology}"
    if args.exactly_once != "auto":
        cmd += f" --exactly-once {args.exactly_once}"
    if args.provider != "memory":
        cmd += f" --provider {args.provider}"
    if args.interval_ms != 3_600_000:
        cmd += f" --interval-ms {args.interval_ms}"
    if args.no_acking:
        cmd += " --no-acking"
    if args.lines_per_second:
        cmd += f" --lines-per-second {args.lines_per_second}"
    if args.metrics != "default":
        cmd += f" --metrics {args.metrics}"
    if args.poll_lines:
        cmd += f" --poll-lines {args.poll_lines}"
    if args.python != sys.executable:
        cmd += f" --python {args.python}"
    print(f"command: {cmd}")
    for measured in _MEASURED:
        print(f"measured: {measured}")
    print()
    print("| topology | metrics | words | instructions in LocalRuntime.run | per word | ratio |")
    print("|---|---|---:|---:|---:|---:|")
    for mode, total in zip(modes, totals, strict=True):
        print(
            f"| {args.topology} | {mode} | {words:,} | {total:,} | {total / words:,.0f} "
            f"| {total / totals[0]:.4f} |"
        )


if __name__ == "__main__":
    main()
