"""At-least-once state resumes where the spouts were acked (issue 30, item 3).

With ``statestream.state.exactly.once: false`` each checkpoint stores the data
spouts' ``acked_position()`` (Storm's Kafka spout commits the offset below
which everything is acked): a rerun after a clean finish reads nothing, a
crash replays only what was not acked, and one line at start says where each
spout resumes. On every runtime (local, two workers, Spark).
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import Runner
from word_bolts import Count, Split

from statestream import FileSpout, SpoutOutputCollector, Topology, TopologyBuilder, TopologyContext
from statestream._checkpoint import Phase
from statestream.runtime.local import LocalRuntime
from statestream.testing import SimulatedCrash, StepClock, committed_state, random_text

LINES = 3000
PENDING = 100  # topology.max.spout.pending, and the Spark batch size


class CountingFileSpout(FileSpout):
    """A FileSpout that writes a byte to the file ``alo.read.log`` for each line it
    reads from its input (not for a failed line it emits again), and dies
    (SimulatedCrash) once it has read ``alo.crash.at`` lines, if set. (A plain
    file: on Spark the spout runs on the driver, on workers in a worker.)"""

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self.crash_at = int(conf.get("alo.crash.at") or 0)
        self.read_log = os.open(conf["alo.read.log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def next_tuple(self) -> None:
        if self.crash_at and self._next_line >= self.crash_at:
            raise SimulatedCrash(f"crash at line {self.crash_at}")
        before = self._next_line
        super().next_tuple()
        if self._next_line != before:
            os.write(self.read_log, b"r")

    def close(self) -> None:
        super().close()
        if getattr(self, "read_log", None) is not None:
            os.close(self.read_log)
            self.read_log = None


def _read(tmp_path: Path) -> int:
    """Lines the spouts read from the input so far, over every run."""
    path = tmp_path / "read.log"
    return path.stat().st_size if path.exists() else 0


def _topology(corpus: Path) -> Topology:
    b = TopologyBuilder("alo")
    b.set_spout("sentences", CountingFileSpout(corpus))
    b.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    return b.build()


def _config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "alo.read.log": str(tmp_path / "read.log"),
        "statestream.state.exactly.once": False,
        "topology.max.spout.pending": PENDING,
        "topology.state.checkpoint.interval.ms": 10,
        **extra,
    }


def _counts(runner: Runner, corpus: Path) -> collections.Counter[str]:
    return collections.Counter(committed_state(_topology(corpus), runner.config(), "count"))


@pytest.fixture
def log_lines(tmp_path: Path) -> Iterator[Path]:
    """The statestream log of the test in a file: worker processes (forked) write
    there too."""
    path = tmp_path / "log.txt"
    handler = logging.FileHandler(path)
    logger = logging.getLogger("statestream")
    logger.addHandler(handler)
    try:
        yield path
    finally:
        logger.removeHandler(handler)
        handler.close()


def _said(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("sentences:")]


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_rerun_after_a_clean_finish_reads_nothing(
    runner: Runner, tmp_path: Path, log_lines: Path, exactly_once: bool
) -> None:
    # The start line is the same in both modes; exactly-once resumed before.
    corpus = tmp_path / "input.txt"
    expected = random_text(corpus, LINES, words_per_line=6, vocabulary=200, seed=3)
    config = _config(tmp_path, **{"statestream.state.exactly.once": exactly_once})
    first = runner.run(_topology(corpus), config, batch_size=PENDING)
    assert first.reason == "idle"
    assert _counts(runner, corpus) == expected
    assert _read(tmp_path) == LINES
    assert _said(log_lines) == ["sentences: reading from the start (no position stored yet)"]

    log_lines.write_text("")
    again = runner.run(_topology(corpus), config, batch_size=PENDING)
    assert again.reason == "idle"
    assert _read(tmp_path) == LINES, "the rerun read the file again"
    assert again.components["sentences"].emitted == 0
    assert _counts(runner, corpus) == expected
    assert _said(log_lines) == [f"sentences: resuming input.txt after line {LINES:,}"]


def test_a_crash_replays_only_what_was_not_acked(
    runner: Runner, tmp_path: Path, log_lines: Path
) -> None:
    corpus = tmp_path / "input.txt"
    expected = random_text(corpus, LINES, words_per_line=6, vocabulary=200, seed=5)
    crash_at = 2050
    with pytest.raises(SimulatedCrash):
        runner.run(
            _topology(corpus),
            _config(tmp_path, **{"alo.crash.at": crash_at}),
            batch_size=PENDING,
            clock=StepClock(0.0003),
        )
    assert _read(tmp_path) == crash_at
    log_lines.write_text("")
    result = runner.run(_topology(corpus), _config(tmp_path), batch_size=PENDING)
    assert result.reason == "idle"
    got = _counts(runner, corpus)
    assert all(got[w] >= n for w, n in expected.items()), "a word was lost"
    # Read twice: what was in flight (at most PENDING unacked lines, or one
    # Spark batch) when the last checkpoint before the crash was prepared, and
    # what was read and acked since; never the whole file.
    replayed = _read(tmp_path) - LINES
    print(f"{runner.name}: {replayed} of {crash_at} lines read again")
    assert 0 <= replayed <= 3 * PENDING
    (line,) = _said(log_lines)
    assert line.startswith("sentences: resuming input.txt after line ")
    assert int(line.rsplit(" ", 1)[1].replace(",", "")) == crash_at - replayed


@pytest.mark.parametrize(("commits", "ackers"), [(3, 1), (7, 1), (5, 3)])
def test_a_run_stopped_right_after_a_commit_resumes_where_that_commit_acked(
    tmp_path: Path, commits: int, ackers: int
) -> None:
    # Issue 44, item 4: the stateful executors hold their acks until the
    # checkpoint covering them commits, so acked positions taken when
    # PREPARING(t) is stored lag a checkpoint; those stored with COMMITTED(t)
    # must not. (The local runtime: the stop is a hook after its step.)
    corpus = tmp_path / "input.txt"
    expected = random_text(corpus, LINES, words_per_line=6, vocabulary=200, seed=11)
    config = {
        **_config(tmp_path, **{"topology.acker.executors": ackers}),
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    rt = LocalRuntime(_topology(corpus), config, clock=StepClock(0.0003))
    seen: dict[str, Any] = {}

    def stop_after_commit() -> None:
        cp = rt.checkpoint_spout
        assert cp is not None
        cs = cp.record.state
        if cs.phase is Phase.COMMITTED and cs.txid >= commits:
            # Every ack that commit released, delivered to the spout: nothing
            # else is acked between two commits (each tree passes the count).
            (spout,) = rt.data_spouts
            spout.drain_completions()
            seen["acked"] = spout.spout.acked_position()
            seen["stored"] = cp.record.resume_point()
            raise SimulatedCrash("stopped right after a commit")

    rt.after_step = stop_after_commit
    with pytest.raises(SimulatedCrash):
        rt.run(until_idle=True)
    txid, stored, exact = seen["stored"]
    assert txid >= commits and not exact
    assert stored == {"sentences-0": seen["acked"]}, "the stored acked position lags"

    # Nothing was in flight: the rerun reads each line it had not acked, once.
    read = _read(tmp_path)
    again = LocalRuntime(_topology(corpus), config, clock=StepClock(0.0003))
    assert again.run(until_idle=True).reason == "idle"
    assert _read(tmp_path) - read == LINES - seen["acked"]["line"]
    got = collections.Counter(committed_state(_topology(corpus), config, "count"))
    assert got == expected
