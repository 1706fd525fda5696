"""A live view on a terminal that keeps the log: what is written to stderr prints above it.

A live table (rich's ``Live``) redraws itself in place by moving the cursor
up over its last drawing. Anything else written to the terminal meanwhile
breaks that: a worker process's warning is drawn over (it never reaches the
scrollback), and the table's next drawing starts lower, so its header repeats
and lines come out cut. The writers are many (this process's logging, the
forked worker processes, a JVM's log4j), and most write to file descriptor 2
directly, so the screen takes the descriptor itself: while it is open, fd 2
(and fd 1 when it is the terminal too) is a pipe, and each line read from it
is printed through the live display's console, above the table. On close the
pipe is drained, the table removed and the descriptors given back, so that
what follows (the run's summary) prints once, below the log.
"""

from __future__ import annotations

import os
import select
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any

__all__ = ["Screen"]

# How long close() waits for the lines already written to be printed.
_DRAIN_SECS = 2.0


class Screen:
    """A live display on the terminal at fd 2, with every line written to fd 2 (and
    to fd 1 when it is a terminal) printed above it.

    ``render`` gives the display's current content (a rich renderable);
    :meth:`update` redraws it. A context manager: the descriptors are taken on
    enter and always given back on exit, after the lines written so far are
    printed. Lines written after the exit by a process still holding the
    pipe (a lingering child) go to the terminal directly.
    """

    def __init__(self, render: Callable[[], Any]) -> None:
        self._render = render
        self._lock = threading.Lock()
        self._live: Any = None
        self._saved: dict[int, int] = {}  # fd -> a duplicate of what it was
        self._pipe_r = -1
        self._out: IO[str] | None = None
        self._pump: threading.Thread | None = None
        self._drain = threading.Event()
        self._drained = threading.Event()

    def __enter__(self) -> Screen:
        from rich.console import Console
        from rich.live import Live

        sys.stdout.flush()
        sys.stderr.flush()
        terminal = os.dup(2)
        self._out = open(terminal, "w", buffering=1, encoding="utf-8", errors="replace")
        # rich measures the terminal through fds 0-2; with fd 2 a pipe, it may
        # find none of them a terminal (stdin and stdout redirected).
        width = None if os.isatty(0) or os.isatty(1) else os.get_terminal_size(terminal).columns
        console = Console(file=self._out, width=width)
        self._pipe_r, write = os.pipe()
        for fd in (2, 1) if os.isatty(1) else (2,):
            self._saved[fd] = os.dup(fd)
            os.dup2(write, fd)
        os.close(write)
        self._live = Live(
            self._render(),
            console=console,
            auto_refresh=False,
            transient=True,  # the summary that follows shows the last counts once
            redirect_stdout=False,  # they come through the pipe, in order
            redirect_stderr=False,
        )
        self._live.start(refresh=True)
        self._pump = threading.Thread(
            target=self._pump_lines, name="statestream-screen", daemon=True
        )
        self._pump.start()
        return self

    def update(self) -> None:
        """Redraw the display with what ``render`` gives now."""
        with self._lock:
            if self._live is not None:
                self._live.update(self._render(), refresh=True)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self._drain.set()
        self._drained.wait(_DRAIN_SECS)
        with self._lock:
            live, self._live = self._live, None
            if live is not None:
                live.stop()
            for fd, saved in self._saved.items():
                os.dup2(saved, fd)
                os.close(saved)
            self._saved.clear()

    def _print(self, line: str) -> None:
        with self._lock:
            if self._live is not None:
                # soft_wrap: a long line wraps on the terminal, it is never cut.
                self._live.console.print(line, markup=False, highlight=False, soft_wrap=True)
            elif self._out is not None:
                self._out.write(line + "\n")

    def _pump_lines(self) -> None:
        """Print each line written to the pipe; on :meth:`__exit__`'s request, say when
        the pipe is empty (what was written before the exit is printed)."""
        pending = b""
        while True:
            # While draining, an empty pipe is the answer: look without waiting.
            draining = self._drain.is_set() and not self._drained.is_set()
            ready, _, _ = select.select([self._pipe_r], [], [], 0 if draining else 0.1)
            if not ready:
                if draining:
                    if pending:
                        self._print(pending.decode("utf-8", "replace"))
                        pending = b""
                    self._drained.set()
                continue
            chunk = os.read(self._pipe_r, 65536)
            if not chunk:  # every writer closed it
                if pending:
                    self._print(pending.decode("utf-8", "replace"))
                self._drained.set()
                os.close(self._pipe_r)
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                self._print(raw.decode("utf-8", "replace").rstrip("\r"))
