"""`statestream state clear` deletes everything of the topology, whatever its keys are
called: a user word "checkpoint" (the name of the checkpoint spout's own record)
is gone after a clear like any other, `state info` lists nothing of the topology,
and the next run starts as on a new store, without the warning about a checkpoint
"taken without exactly-once" (sqlite and a real Redis, 1 and 2 workers; real
`statestream` processes, as a user types them).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from claims import Store

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = str(ROOT / "examples" / "wordcount.py")


def _statestream(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "statestream", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    assert done.returncode == 0, f"statestream {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.parametrize("workers", [1, 2])
def test_clear_deletes_a_user_key_named_checkpoint_and_the_rerun_starts_fresh(
    store: Store, tmp_path: Path, workers: int
) -> None:
    text = tmp_path / "in.txt"
    text.write_text("checkpoint a\n")
    conf = tmp_path / "store.json"
    conf.write_text(json.dumps({**store.run_config(), "topology.workers": workers}))
    config = ["-c", str(conf), "--set", f"wordcount.input={text}"]

    def run() -> str:
        done = _statestream(
            "run", WORDCOUNT, "--until-idle", "--no-progress", *config, cwd=tmp_path
        )
        return done.stderr

    def counts() -> dict[str, int]:
        dump = _statestream("state", "dump", "--component", "count", *config, cwd=tmp_path)
        return {e["key"]: e["value"] for e in map(json.loads, dump.stdout.splitlines())}

    run()
    assert counts() == {"checkpoint": 1, "a": 1}
    cleared = _statestream(
        "state", "clear", "--topology", "wordcount", "--yes", *config, cwd=tmp_path
    )
    assert "of topology 'wordcount'" in cleared.stdout
    info = _statestream("state", "info", *config, cwd=tmp_path)
    assert "wordcount" not in info.stdout, info.stdout
    assert "no committed state in this store" in info.stdout
    log = run()
    assert "without exactly-once" not in log, log
    assert counts() == {"checkpoint": 1, "a": 1}
