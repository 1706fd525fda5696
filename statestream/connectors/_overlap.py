"""A sink task's overlapped target writes: one writer thread, one write in flight.

:class:`~statestream.connectors.TwoPhaseSink` holds one as a field
(``writes``); the protocol that decides *when* to write (after a COMMIT,
before the next PREPARE replaces the stage) is the sink's, and this object
only runs the writes and waits for them:

* :meth:`OverlappedWrites.start` (at the task's ``prepare``) names the task
  and waits for a write another instance of it may still have in flight in
  this process (one a rewind dropped without ``cleanup``: two writers of one
  guard must never run at once);
* :meth:`OverlappedWrites.submit` hands a write to the writer thread and
  returns at once (the target's client waits on the server without the GIL);
* :meth:`OverlappedWrites.settle` waits for it and raises what it raised;
  :meth:`OverlappedWrites.abandon` waits for it and drops its outcome (a
  dropped instance's: recovery writes what it did not);
* :meth:`OverlappedWrites.close` runs a last call (closing the target) on the
  writer thread, whose client may be bound to it (sqlite3's is), and ends
  the thread.

The writes in flight of the whole process are kept by task key, so that
:meth:`~OverlappedWrites.start` can find another instance's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

__all__ = ["OverlappedWrites"]

# The write in flight of each sink task of this process, by task key.
_IN_FLIGHT: dict[Hashable, Future[None]] = {}
_IN_FLIGHT_LOCK = threading.Lock()


class OverlappedWrites:
    """The writes of one sink task instance, each on its writer thread while the task
    goes on (see the module docstring). Not thread-safe: the task's own thread
    calls it; the writes run on the writer thread, one at a time, in order."""

    def __init__(self) -> None:
        self.key: Hashable = None
        """The task's key (set by :meth:`start`): whose writes in flight are one."""
        self.thread_name = "statestream-sink"
        self._writer: ThreadPoolExecutor | None = None  # made at the first submit
        self._writing: Future[None] | None = None  # the write in flight, if any

    def start(self, key: Hashable, thread_name: str) -> None:
        """The task ``key`` begins (its ``prepare``): wait until a write of another
        instance of it in this process has ended, however it ended."""
        self.key, self.thread_name = key, thread_name
        self._writing = None
        with _IN_FLIGHT_LOCK:
            other = _IN_FLIGHT.get(key)
        if other is not None:
            wait([other])  # its outcome is the dropped instance's: recovery writes what it did not

    @property
    def in_flight(self) -> bool:
        """Whether a write was submitted and not yet settled (or abandoned)."""
        return self._writing is not None

    def submit(self, write: Callable[[], None]) -> None:
        """Run ``write()`` on the writer thread and return; :meth:`settle` the write
        before (only one is ever in flight)."""
        if self._writing is not None:
            raise RuntimeError("a write is in flight: settle it before the next")
        if self._writer is None:
            # One thread a task: the target's client is only ever used from it.
            self._writer = ThreadPoolExecutor(1, self.thread_name)
        future = self._writing = self._writer.submit(write)
        with _IN_FLIGHT_LOCK:
            _IN_FLIGHT[self.key] = future

    def settle(self) -> None:
        """Wait for the write in flight, if any; raise what it raised."""
        future, self._writing = self._writing, None
        if future is None:
            return
        try:
            future.result()
        finally:
            self._forget(future)

    def abandon(self) -> None:
        """Wait for the write in flight, if any, and drop its outcome (an instance
        that a rewind dropped: its write's outcome is no one's to raise)."""
        future, self._writing = self._writing, None
        if future is not None:
            wait([future])
            self._forget(future)

    def close(self, last: Callable[[], None]) -> None:
        """Run ``last()`` (closing the target) where the writes ran (the writer
        thread, if there was one; here otherwise) and end the thread. Settle or
        abandon the write in flight first. Idempotent as to the thread."""
        writer, self._writer = self._writer, None
        if writer is None:
            last()
            return
        try:
            writer.submit(last).result()
        finally:
            writer.shutdown()

    def _forget(self, future: Future[None]) -> None:
        with _IN_FLIGHT_LOCK:
            if _IN_FLIGHT.get(self.key) is future:
                del _IN_FLIGHT[self.key]

    def __getstate__(self) -> dict[str, Any]:
        # A thread and a future do not travel (Spark ships the sink to executors).
        return {**self.__dict__, "_writer": None, "_writing": None}
