"""A store outage exactly at the COMMIT of a prepared checkpoint (issue 44, item 6).

The stateful bolt's store refuses the commit of a prepared txid (each attempt
raises ProviderUnavailableError, as a Redis restarting does) a given number of
times. Ridden out within ``statestream.state.outage.secs``, the commit
completes once (the store applies that txid once) and the counts are exact;
longer, the run stops with the one line, and a rerun once the store is back
finishes exact. On the local runtime, in one process and on two workers (the
provider is this module's class, by dotted path; the workers fork with it).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import Runner
from test_stateful import committed, counter_topology

from statestream import StoreOutageError
from statestream._errors import ProviderUnavailableError
from statestream._kvstate import CommitOutcome
from statestream_providers.sqlite import SQLiteStateProvider

#: A file holding how many commit attempts are still to fail, and one where each
#: applied commit appends ``namespace txid`` (set per test; workers inherit it).
CONTROL_ENV = "SSTREAM_TEST_COMMIT_OUTAGE"
AT_TXID = 2  # the first txid whose commit meets the outage
ITEMS = [f"k{i % 40}" for i in range(600)]


def _control() -> tuple[Path, Path]:
    base = Path(os.environ[CONTROL_ENV])
    return base / "fails-left", base / "applied"


class _CommitOutageBackend:
    """A backend whose ``apply_prepared`` fails while the control file says so."""

    def __init__(self, backend: Any, namespace: str) -> None:
        self._backend = backend
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def apply_prepared(self, txid: int) -> CommitOutcome:
        fails, applied = _control()
        mode, left = fails.read_text().split()
        failing = txid >= AT_TXID and int(left) > 0 and "count-" in self._namespace
        if failing:
            fails.write_text(f"{mode} {int(left) - 1}")
            if mode == "refused":
                raise ProviderUnavailableError("the store went away at the commit (test)")
        outcome: CommitOutcome = self._backend.apply_prepared(txid)
        if outcome is CommitOutcome.APPLIED:
            with applied.open("a") as f:
                f.write(f"{self._namespace} {txid}\n")
        if failing:  # "reply-lost": the store committed, its answer never came
            raise ProviderUnavailableError("the store went away at the commit (test)")
        return outcome


class CommitOutageProvider(SQLiteStateProvider):
    """The sqlite provider, its stateful bolts' commits refused (see the module)."""

    def _open_backend(self, namespace: str) -> Any:
        return _CommitOutageBackend(super()._open_backend(namespace), namespace)


def _config(tmp_path: Path, outage_secs: float) -> dict[str, Any]:
    return {
        "topology.state.provider": f"{__name__}:CommitOutageProvider",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "statestream.state.outage.secs": outage_secs,
        "topology.state.checkpoint.interval.ms": 20,
        "topology.max.spout.pending": 50,
    }


def _applied_once(applied: Path) -> None:
    lines = applied.read_text().splitlines()
    assert lines, "no commit was applied"
    assert len(lines) == len(set(lines)), f"a txid was applied twice: {Counter(lines)}"
    assert any(int(line.split()[1]) >= AT_TXID for line in lines)


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv(CONTROL_ENV, str(tmp_path))
    fails, applied = _control()
    applied.write_text("")
    return fails, applied


@pytest.mark.parametrize("mode", ["refused", "reply-lost"])
def test_an_outage_at_the_commit_ridden_out_commits_once_and_counts_exactly(
    local_runner: Runner, tmp_path: Path, control: tuple[Path, Path], mode: str
) -> None:
    fails, applied = control
    fails.write_text(f"{mode} 4")
    config = _config(tmp_path, outage_secs=60.0)
    result = local_runner.run(counter_topology(ITEMS, rewind=True), config)
    assert result.reason == "idle"
    assert fails.read_text() == f"{mode} 0", "the outage was never met"
    _applied_once(applied)
    assert committed(config) == dict(Counter(ITEMS))


def test_an_outage_at_the_commit_past_the_bound_stops_with_one_line_and_a_rerun_is_exact(
    local_runner: Runner, tmp_path: Path, control: tuple[Path, Path]
) -> None:
    fails, applied = control
    fails.write_text("refused 1000000")
    config = _config(tmp_path, outage_secs=1.0)
    with pytest.raises(StoreOutageError) as info:
        local_runner.run(counter_topology(ITEMS, rewind=True), config)
    line = str(info.value)
    assert "\n" not in line and "the store went away at the commit" in line
    assert all(int(entry.split()[1]) < AT_TXID for entry in applied.read_text().splitlines())

    fails.write_text("refused 0")  # the store is back
    result = local_runner.run(counter_topology(ITEMS, rewind=True), config)
    assert result.reason == "idle"
    _applied_once(applied)
    assert committed(config) == dict(Counter(ITEMS))
