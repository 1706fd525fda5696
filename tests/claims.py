"""Claims of the sqlite provider held by other processes, for the tests of one run
per topology and store (``SQLiteStateProvider.claim``).

Holders are real processes (a child Python that claims and waits for the
test's word), never forks of the test process, which would share its
descriptors and so its locks.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

__all__ = ["Holder", "claims_elsewhere", "holding", "with_pid_gone"]

# A claimer in its own process. argv: database, scope, mode ("hold" or "fork":
# also fork a child that shares the claim, as a supervisor's workers do).
# Prints "held <pid> [<child pid>]", releases on the first line of stdin,
# prints "released", then waits for stdin to close.
_HOLDER = """
import os, sys, time
from statestream_providers.sqlite import SQLiteStateProvider
db, scope, mode = sys.argv[1:4]
claim = SQLiteStateProvider(db).claim(scope, 0)
pids = [os.getpid()]
if mode == "fork":
    child = os.fork()
    if child == 0:
        time.sleep(120)
        os._exit(0)
    pids.append(child)
print("held", *pids, flush=True)
sys.stdin.readline()
claim.release()
print("released", flush=True)
sys.stdin.readline()
"""


class Holder:
    """A process holding a claim of ``scope`` on ``db`` until told to let go or killed."""

    def __init__(self, db: Path, scope: str, mode: str = "hold") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(db), scope, mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        assert line and line[0] == "held", f"the holder did not claim: {line}"
        self.pids = [int(p) for p in line[1:]]

    def release(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "released"

    def kill(self) -> None:
        for pid in reversed(self.pids):
            with_pid_gone(pid)
        self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def with_pid_gone(pid: int) -> None:
    """SIGKILL ``pid`` (if it is still there) and wait until it is gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # Our child is reaped here; the holder's child, by init once the holder is gone.
        with suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if _is_zombie(pid):
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} did not go away")


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return False


def claims_elsewhere(db: Path, scope: str) -> bool:
    """Whether another process is granted ``scope`` on ``db`` now (it lets go at once)."""
    code = (
        "import sys\n"
        "from statestream._errors import StateLockedError\n"
        "from statestream_providers.sqlite import SQLiteStateProvider\n"
        "try:\n"
        "    SQLiteStateProvider(sys.argv[1]).claim(sys.argv[2], 0).release()\n"
        "except StateLockedError:\n"
        "    sys.exit(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(db), scope], timeout=30)
    assert proc.returncode in (0, 3), proc
    return proc.returncode == 0


@contextmanager
def holding(db: Path, scope: str, mode: str = "hold") -> Iterator[Holder]:
    holder = Holder(db, scope, mode)
    try:
        yield holder
    finally:
        holder.kill()
