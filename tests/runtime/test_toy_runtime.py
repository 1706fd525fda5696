"""A fourth runtime is one registration: the toy runner, in this module alone (issue 45).

The toy runtime satisfies :class:`~statestream.runtime.contract.Runtime` by
running the topology on the local runtime's tasks, on a fake clock of its
own; its registry entry says what it can do. ``statestream run`` runs the
word count on it with ``topology.runner: toy`` and nothing else in the
package knows its name: the CLI, the config validation, the plan's
refusals and the run mode ask the entry. A capability it lacks changes
what is decided (it starts no worker processes, it cannot rewind within a
run), which the last tests show.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from statestream import _runners
from statestream._cli import main
from statestream._clock import Clock, FakeClock
from statestream._config import Config, config_keys, settings_of
from statestream._config_kinds import _POSITIVE_INT, _key
from statestream._exactly_once import run_mode
from statestream._results import RunResult, TaskMetrics, WorkerInfo
from statestream._topology import Topology
from statestream.runtime.contract import Capabilities, Runtime, register_runner
from statestream.runtime.local import LocalRuntime
from statestream.runtime.metrics import MetricsSnapshot
from statestream.testing import RewindableListSpout

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = str(ROOT / "examples" / "wordcount.py")
CORPUS = ROOT / "examples" / "corpus.txt"

NAME = "toy"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToySettings:
    """The toy's own key, declared as the shared ones are."""

    statestream_toy_speed: int = _key(
        "statestream.toy.speed", _POSITIVE_INT, 1, "How fast the toy runs (it does not)."
    )


#: One process that acks per tuple, cannot rewind within a run (so at-least-once
#: state at best) and starts no worker processes; its own key, and ``toy.*`` keys
#: handed to its engine untouched.
TOY = Capabilities(
    rewinds_within_run=False,
    workers_advice="the toy runs in one process",
    settings=ToySettings,
    pass_through=("toy",),
)


#: Every toy runtime made in this test, oldest first (what the tests look at).
MADE: list[ToyRuntime] = []


class ToyRuntime:
    """The word count's fourth runtime: the local tasks, on a fake clock of its own."""

    def __init__(self, topology: Topology, conf: Config, clock: Clock | None) -> None:
        # The CLI passes no clock: the toy keeps its own, so time never waits.
        self.clock = clock if clock is not None else FakeClock()
        self._inner = LocalRuntime(topology, conf, clock=self.clock)
        self.speed = settings_of(conf, ToySettings).statestream_toy_speed
        self.engine = conf.topology_keys("toy")
        self.deadletter_path = self._inner.deadletter_path
        MADE.append(self)

    @property
    def exactly_once(self) -> bool:
        """Whether the run keeps exactly-once state (decided from the toy's entry)."""
        return self._inner.exactly_once

    def open(self) -> None:
        self._inner.open()

    def run(self, until_idle: bool = False, duration: float | None = None) -> RunResult:
        return self._inner.run(until_idle=until_idle, duration=duration)

    def stop(self) -> None:
        self._inner.stop()

    def close(self) -> None:
        self._inner.close()

    def metrics(self) -> dict[str, TaskMetrics]:
        return self._inner.metrics()

    def counters(self) -> dict[str, int]:
        return self._inner.counters()

    def worker_rows(self) -> list[WorkerInfo]:
        return []

    def metrics_snapshot(self) -> MetricsSnapshot:
        return self._inner.metrics_snapshot()


def _toy(topology: Topology, conf: Config, clock: Clock | None) -> Runtime:
    return ToyRuntime(topology, conf, clock)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The toy runner registered, for this test only."""
    monkeypatch.setattr(_runners, "_RUNNERS", dict(_runners._RUNNERS))
    register_runner(NAME, _toy, TOY)
    MADE.clear()
    yield
    MADE.clear()


def _run(*args: str) -> tuple[int, str]:
    memory = f"topology.state.provider.config={{name: {uuid.uuid4()}}}"
    result = CliRunner().invoke(
        main,
        [
            "run",
            WORDCOUNT,
            "--until-idle",
            "--runner",
            NAME,
            "--set",
            memory,
            *args,
        ],
    )
    return result.exit_code, result.stderr


def test_statestream_run_counts_the_words_on_the_toy_runtime(
    toy: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "counts.jsonl"
    code, stderr = _run("--set", f"wordcount.output={out}")
    assert code == 0, stderr
    assert f"running 'wordcount' on {NAME} " in stderr
    counts = Counter(
        {row["word"]: row["count"] for row in map(orjson.loads, out.read_bytes().splitlines())}
    )
    assert counts == Counter(CORPUS.read_text(encoding="utf-8").split())
    [runtime] = MADE
    assert isinstance(runtime.clock, FakeClock)
    assert (runtime.speed, runtime.engine) == (1, {})
    # The toy cannot rewind within a run: its entry made the run at-least-once,
    # where the local runner runs the same word count exactly-once.
    assert not runtime.exactly_once
    assert "exactly-once state is off: the toy runtime cannot rewind" in caplog.text


def test_the_toy_entry_refuses_worker_processes_with_its_own_advice(toy: None) -> None:
    code, stderr = _run("--set", "topology.workers=2")
    assert code == 2
    assert (
        f"topology.workers is 2, but the {NAME} runner does not start worker processes "
        "itself: the toy runs in one process"
    ) in stderr
    assert MADE == []


def test_an_unregistered_runner_is_a_usage_error_naming_the_registered(toy: None) -> None:
    result = CliRunner().invoke(main, ["run", WORDCOUNT, "--until-idle", "--runner", "flink"])
    assert result.exit_code == 2
    assert f"registered: 'local', 'spark', '{NAME}'" in result.stderr


def test_the_toy_entry_decides_the_run_mode(toy: None) -> None:
    spouts = {"lines": RewindableListSpout(["a"], fields=["line"])}
    toy_mode = run_mode(NAME, "auto", True, spouts, 1)
    assert not toy_mode.exactly_once
    assert toy_mode.note is not None and f"the {NAME} runtime cannot rewind" in toy_mode.note
    assert run_mode("local", "auto", True, spouts, 1).exactly_once


def test_the_toy_entry_brings_its_own_keys_typed_and_its_engines_untouched(
    toy: None, tmp_path: Path
) -> None:
    out = tmp_path / "counts.jsonl"
    code, stderr = _run(
        *("--set", f"wordcount.output={out}", "--set", "statestream.toy.speed=3"),
        *("--set", "toy.engine.threads=4"),
    )
    assert code == 0, stderr
    [runtime] = MADE
    assert (runtime.speed, runtime.engine) == (3, {"toy.engine.threads": 4})
    assert "statestream.toy.speed" in [key.name for key in config_keys()]


def test_a_wrong_value_of_the_toy_key_is_one_line_naming_it(toy: None) -> None:
    code, stderr = _run("--set", "statestream.toy.speed=fast")
    assert code == 2
    assert (
        "config key 'statestream.toy.speed' from --set: expected a positive integer, got 'fast'"
    ) in stderr
    assert MADE == []


def test_without_the_toy_registered_its_keys_are_unknown() -> None:
    code, stderr = _run("--set", "statestream.toy.speed=3")
    assert code == 2
    assert "unknown config key 'statestream.toy.speed' in --set" in stderr
    code, stderr = _run("--set", "toy.engine.threads=4")
    assert code == 2
    assert "unknown config key 'toy.engine.threads' in --set" in stderr


@dataclass(frozen=True)
class _Stray:
    wordcount_speed: int = _key("wordcount.speed", _POSITIVE_INT, 1, "A key outside the toy's.")


def test_a_runners_keys_must_be_under_its_own_name_or_pass_through_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_runners, "_RUNNERS", dict(_runners._RUNNERS))
    with pytest.raises(TypeError, match=r"'wordcount.speed' must be dotted and start with one of"):
        register_runner(NAME, _toy, Capabilities(settings=_Stray))
    with pytest.raises(ValueError, match="pass-through root 'topology' must be one segment"):
        register_runner(NAME, _toy, Capabilities(pass_through=("topology",)))
    assert NAME not in _runners.runners()
