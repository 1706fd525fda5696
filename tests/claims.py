"""Claims of a store held by other processes, for the tests of one run per topology
and store (``BackendStateProvider.claim``: sqlite's file lock, redis's lease).

A store is a :class:`Store` (a provider spec and its config), or the path of
a sqlite database, which stands for the sqlite store of that file.

Holders are real processes (a child Python that claims and waits for the
test's word), never forks of the test process, which would share its
descriptors and so its locks.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis_server import REDIS_HOST, REDIS_PORT, delete_prefix, require_real_redis, unique_prefix

__all__ = [
    "Holder",
    "Store",
    "claims_elsewhere",
    "holding",
    "redis_store",
    "with_pid_gone",
]


@dataclass(frozen=True)
class Store:
    """A state store: ``topology.state.provider`` and its config."""

    spec: str
    config: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def sqlite(cls, db: Path) -> Store:
        return cls("sqlite", {"path": str(db)})

    def run_config(self) -> dict[str, Any]:
        """The config keys that point a run at this store."""
        return {
            "topology.state.provider": self.spec,
            "topology.state.provider.config": dict(self.config),
        }

    def held_by(self, pid: int) -> str:
        """How StateLockedError names a process ``pid`` of this machine that holds a claim."""
        if self.spec == "sqlite":
            return f"(pid {pid})"
        return f"(pid {pid} on {socket.gethostname()})"

    def where(self, scope: str) -> str:
        """How StateLockedError names what a claim of ``scope`` holds."""
        if self.spec == "sqlite":
            return str(self.config["path"])
        key = f"{self.config.get('key_prefix', '')}{{{scope}}}$claim"
        return f"{key!r} on redis at {self.config['host']}:{self.config['port']}"

    def untouched(self) -> bool:
        """Nothing but claims in the store: no state was read into being or written."""
        if self.spec == "sqlite":
            return not Path(self.config["path"]).exists()
        import redis

        client = redis.Redis(host=self.config["host"], port=self.config["port"])
        try:
            keys = list(client.scan_iter(match=f"{self.config['key_prefix']}*"))
        finally:
            client.close()
        return all(key.endswith(b"$claim") for key in keys)


def _store(store: Store | Path) -> Store:
    return store if isinstance(store, Store) else Store.sqlite(store)


@contextmanager
def redis_store(**config: Any) -> Iterator[Store]:
    """The real Redis server under a key prefix of this test's own, deleted afterwards
    (skipped without a server, as every ``redis`` test)."""
    require_real_redis()
    prefix = unique_prefix("ssclaim")
    try:
        yield Store(
            "redis", {"host": REDIS_HOST, "port": REDIS_PORT, "key_prefix": prefix, **config}
        )
    finally:
        delete_prefix(prefix)


# A claimer in its own process. argv: provider spec, its config as JSON, scope,
# mode: "hold"; "fork" (also fork a child that shares the claim, as a
# supervisor's workers do, and sleeps); "fork-release" (the child releases
# the claim it inherited and exits at once, before "held" is printed).
# Prints "held <pid> [<child pid>]", releases on the first line of stdin,
# prints "released", then waits for stdin to close.
_HOLDER = """
import json, os, sys, time
from statestream._registry import open_provider
spec, config, scope, mode = sys.argv[1:5]
claim = open_provider(spec, json.loads(config)).claim(scope, 0)
pids = [os.getpid()]
if mode in ("fork", "fork-release"):
    child = os.fork()
    if child == 0:
        if mode == "fork-release":
            claim.release()
        else:
            time.sleep(120)
        os._exit(0)
    if mode == "fork":
        pids.append(child)
    else:
        os.waitpid(child, 0)
print("held", *pids, flush=True)
sys.stdin.readline()
claim.release()
print("released", flush=True)
sys.stdin.readline()
"""


class Holder:
    """A process holding a claim of ``scope`` on ``store`` until told to let go or killed."""

    def __init__(self, store: Store | Path, scope: str, mode: str = "hold") -> None:
        store = _store(store)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, store.spec, json.dumps(store.config), scope, mode],
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


def claims_elsewhere(store: Store | Path, scope: str) -> bool:
    """Whether another process is granted ``scope`` on ``store`` now (it lets go at once)."""
    store = _store(store)
    code = (
        "import json, sys\n"
        "from statestream._errors import StateLockedError\n"
        "from statestream._registry import open_provider\n"
        "try:\n"
        "    open_provider(sys.argv[1], json.loads(sys.argv[2])).claim(sys.argv[3], 0).release()\n"
        "except StateLockedError:\n"
        "    sys.exit(3)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, store.spec, json.dumps(store.config), scope], timeout=30
    )
    assert proc.returncode in (0, 3), proc
    return proc.returncode == 0


@contextmanager
def holding(store: Store | Path, scope: str, mode: str = "hold") -> Iterator[Holder]:
    holder = Holder(store, scope, mode)
    try:
        yield holder
    finally:
        holder.kill()
