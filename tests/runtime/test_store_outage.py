"""A store that cannot be written (a sqlite database on a full file system) is retried
for statestream.state.outage.secs, then stops the run with one line naming the store and
the cause; what was committed stays, and a rerun with space finishes exact. On every
runtime (the ``runner`` fixture). The Redis cases, killed and restarted, are in
tests/cli/test_cli_store_outage.py (a real run, on the real clock)."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from runtime_harness import Runner
from test_stateful import committed, counter_topology

from statestream import StoreOutageError

# Long keys, each seen three times: a few hundred KiB of state, more than the
# file system below holds, and a count of 3 each when the run is exact.
ITEMS = [f"key-{i % 3000:05d}-" + "x" * 60 for i in range(9000)]


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs mounted in the test's directory (root only; CI runs as root),
    unmounted at the end."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI must run as root to mount a small file system")
        pytest.skip("mounting a small file system needs root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.slow
def test_a_full_disk_stops_the_run_with_one_line_and_a_rerun_with_space_is_exact(
    runner: Runner, tiny_fs: Path
) -> None:
    db = tiny_fs / "state.db"
    config = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(db)},
        "statestream.state.outage.secs": 1.0,
        "topology.state.checkpoint.interval.ms": 50,
    }
    topology = counter_topology(ITEMS, rewind=True)
    with pytest.raises(StoreOutageError) as info:
        runner.run(topology, config)
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith(f"the state store (sqlite {str(db)!r}) could not be written for ")
    assert "database or disk is full" in line and "statestream.state.outage.secs: 1" in line
    before = committed(config)
    assert all(n <= 3 for n in before.values())

    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_fs)], check=True)
    runner.run(counter_topology(ITEMS, rewind=True), config)
    after = committed(config)
    assert after == dict(Counter(ITEMS))
