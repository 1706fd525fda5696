"""`statestream state clear` claims the topology's part of the store as a run does:
refused (exit 1, the one line of StateLockedError) while a run holds it, and a
run started while a clear holds it is refused likewise; `state info` and
`state dump` are read-only and take no claim (sqlite, and a real Redis).

A run holding the store is played by a claim holder in another process
(``tests/claims.py``): the claim is the one a run takes (see
``tests/runtime/test_store_claim.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from claims import Store, claims_elsewhere, holding
from click.testing import CliRunner
from word_bolts import word_count

from statestream import StateLockedError
from statestream._cli import main
from statestream._registry import open_provider
from statestream.runtime.local import LocalRuntime
from statestream.testing import FakeClock, random_text


def _with_state(store: Store, tmp_path: Path) -> Path:
    """Commit some state of 'wordcount' and 'clicks'; the config file of ``store``."""
    for topology in ("wordcount", "clicks"):
        with open_provider(store.spec, store.config, scope=topology) as provider:
            state = provider.get_state("count-0")
            state.put("the", 3)
            state.commit()
    conf = tmp_path / "store.json"
    conf.write_text(json.dumps({**store.run_config(), "topology.state.claim.wait.secs": 0.3}))
    return conf


def _counts(store: Store, topology: str) -> dict[str, int]:
    with open_provider(store.spec, store.config, scope=topology) as provider:
        return dict(provider.get_state("count-0").items())


def test_clear_is_refused_while_a_run_holds_the_topology(store: Store, tmp_path: Path) -> None:
    conf = _with_state(store, tmp_path)
    runner = CliRunner()
    with holding(store, "wordcount") as holder:
        refused = runner.invoke(
            main, ["state", "clear", "-c", str(conf), "--topology", "wordcount", "--yes"]
        )
        assert refused.exit_code == 1, refused.output
        lines = [line for line in refused.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
        assert lines[0].startswith(
            "statestream: error: another `statestream run` or `state clear` of topology "
            f"'wordcount' holds {store.where('wordcount')} (pid {holder.pids[0]}"
        ), lines[0]
        assert "did not let go within 0.3 s; wait for it to end or stop it" in lines[0]
        assert _counts(store, "wordcount") == {"the": 3}, "the refused clear deleted state"

        # Read-only commands take no claim; another topology's clear is not held up.
        info = runner.invoke(main, ["state", "info", "-c", str(conf)])
        assert info.exit_code == 0 and "topology: wordcount" in info.stdout, info.output
        dump = runner.invoke(
            main,
            ["state", "dump", "-c", str(conf), "--topology", "wordcount", "--component", "count"],
        )
        assert dump.exit_code == 0 and '"key":"the"' in dump.stdout, dump.output
        other = runner.invoke(
            main, ["state", "clear", "-c", str(conf), "--topology", "clicks", "--yes"]
        )
        assert other.exit_code == 0, other.output
    assert _counts(store, "clicks") == {}

    done = runner.invoke(
        main, ["state", "clear", "-c", str(conf), "--topology", "wordcount", "--yes"]
    )
    assert done.exit_code == 0, done.output
    assert _counts(store, "wordcount") == {}
    assert claims_elsewhere(store, "wordcount"), "the clear kept its claim"


def test_a_run_is_refused_while_a_clear_holds_the_topology(store: Store, tmp_path: Path) -> None:
    conf = _with_state(store, tmp_path)
    # The clear waits at its confirmation, holding the claim.
    clear = subprocess.Popen(
        [sys.executable, "-m", "statestream", "state", "clear", "-c", str(conf),
         "--topology", "wordcount"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert clear.stdout is not None and clear.stdin is not None
        prompt = clear.stdout.read(len("delete the state of topology 'wordcount'"))
        assert prompt == "delete the state of topology 'wordcount'", prompt

        text = tmp_path / "text.txt"
        random_text(text, 50, vocabulary=10, seed=3)
        config = {**store.run_config(), "topology.state.claim.wait.secs": 0.3}
        rt = LocalRuntime(word_count("wordcount", text), config, clock=FakeClock())
        with pytest.raises(StateLockedError) as info:
            rt.run(until_idle=True)
        assert f"holds {store.where('wordcount')} (pid {clear.pid}" in str(info.value)

        out, err = clear.communicate("y\n", timeout=60)
        assert clear.returncode == 0, err
        assert "cleared 1 namespaces of topology 'wordcount'" in out
    finally:
        if clear.poll() is None:
            clear.kill()
            clear.communicate(timeout=10)
    assert _counts(store, "wordcount") == {}
    assert claims_elsewhere(store, "wordcount")
