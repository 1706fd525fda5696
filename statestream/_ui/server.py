"""The live view of a run, from the run's side: render once a second, push to a server process.

The page, ``/metrics`` and ``/api/v1/topology`` are served by a small process of
their own (:mod:`statestream._ui.httpd`, standard library only), started with
the view and stopped with it, so there is still no server for the user to run.
The run's process (the topology's, the supervisor of ``topology.workers: N``,
Spark's driver) keeps one job: a publisher thread renders the two bodies about
once a second from the runtime's numbers and writes them to the server's stdin.
Why a process and not threads (bench/RESULTS-observability.md): served from
threads of the run's process, each request cost about 0.4 M instructions under
the interpreter lock the run needs too, and under a hostile client (a
connection held open, 1,000 requests; paced) those threads took 7-12% of the
run's CPU time on a loaded machine, which the run waited out for the lock. Now
client traffic costs the run's process nothing, whatever a client does, and
the run pays only the render (about 11 M instructions a second).

The server process cannot outlive the run: it stops at :meth:`LiveView.close`,
at the end of its stdin (the run's process died, ``kill -9`` included) and when
it finds itself re-parented. Its safety limits (loopback by default, no file
read for any path, GET/HEAD only, a connection cap, idle connections dropped,
requests paced) are described in :mod:`statestream._ui.httpd`.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from .._errors import ConfigError, RuntimeFailure
from . import httpd
from .httpd import IDLE_SECS, MAX_CONNECTIONS, REQUESTS_PER_SEC, Pacer

__all__ = [
    "IDLE_SECS",
    "MAX_CONNECTIONS",
    "REQUESTS_PER_SEC",
    "LiveView",
    "Pacer",
    "Renderer",
    "parse_address",
]

#: Seconds the server process may take to stop before it is killed.
STOP_SECS = 5.0


def parse_address(text: str | int, what: str = "--ui") -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[IPv6]:PORT`` as ``(host, port)``; the host is
    127.0.0.1 unless given (loopback: only this machine sees the run)."""
    raw = str(text).strip()
    host, sep, port = raw.rpartition(":")
    if not sep:
        host = ""
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(
            f"{what} {raw!r} is not a port or HOST:PORT; e.g. {what} 8080 or "
            f"{what} 0.0.0.0:8080 (0 picks a free port)"
        )
    return host, int(port)


#: Renders the dynamic bodies: ``() -> (api JSON, Prometheus text)``.
Renderer = Callable[[], tuple[bytes, bytes]]


class LiveView:
    """Serves the live view of one run at ``address`` while used as a context manager.

    ``render`` gives the dynamic bodies; the publisher thread calls it every
    ``interval`` seconds, once at start and once more at exit (so that a last
    scrape sees the run's final figures), and pushes them to the server
    process. Making it starts that process and binds the socket (ConfigError
    naming the address if it cannot); entering publishes the first bodies
    (nothing is served before them) and starts the publisher; exiting (or
    :meth:`close`) stops both and frees the port. :attr:`url` is where to look.
    """

    def __init__(
        self,
        address: tuple[str, int],
        render: Renderer,
        *,
        interval: float = 1.0,
        requests_per_sec: float = REQUESTS_PER_SEC,
    ) -> None:
        self._render = render
        self._interval = interval
        self._stopping = threading.Event()
        self._publisher: threading.Thread | None = None
        self._writing = threading.Lock()  # the publisher and close() both write frames
        self._closed = False
        options = {
            "host": address[0],
            "port": address[1],
            "rate": requests_per_sec,
            "parent": os.getpid(),
        }
        # -I -S: the server imports the standard library only, nothing of the
        # user's environment or site-packages, and starts in milliseconds.
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(Path(httpd.__file__)), json.dumps(options)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._frames = self._proc.stdin
        kind, _, said = self._proc.stdout.readline().decode(errors="replace").strip().partition(" ")
        self._proc.stdout.close()
        if kind != "ok":
            self._frames.close()
            code = self._proc.wait()
            if kind == "error":
                raise ConfigError(
                    f"the live view cannot listen on {address[0]}:{address[1]}: {said}; "
                    "pick another port (0 picks a free one)"
                )
            raise RuntimeFailure(
                f"the live view's server process exited at start (code {code}); "
                f"run {sys.executable} {httpd.__file__} to see why"
            )
        port, _, host = said.partition(" ")
        #: The bound ``(host, port)``: the port the system picked for port 0.
        self.address: tuple[str, int] = (host, int(port))

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    @property
    def server_pid(self) -> int:
        """The pid of the process that serves the view."""
        return self._proc.pid

    def publish(self) -> None:
        """Render the bodies now and push them to the server."""
        api, metrics = self._render()
        frame = httpd.bodies_frame(api, metrics)
        with self._writing:
            # The server reads as fast as it is written; if it is gone, the
            # write fails here, in the publisher's thread, never the run's.
            self._frames.write(frame)
            self._frames.flush()

    def _publishing(self) -> None:
        while not self._stopping.wait(self._interval):
            with contextlib.suppress(Exception):  # a failed render keeps the last bodies
                self.publish()

    def __enter__(self) -> LiveView:
        self.publish()
        self._publisher = threading.Thread(
            target=self._publishing, name="statestream-ui-publisher", daemon=True
        )
        self._publisher.start()
        return self

    def close(self) -> None:
        """Stop serving, stop the server process and free the port; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        if self._publisher is not None:
            self._publisher.join(timeout=STOP_SECS)
            with contextlib.suppress(Exception):
                self.publish()  # the run's final figures, for a scrape racing the end
        # A publisher stuck writing to a server that stopped reading cannot hold
        # the run's exit: after STOP_SECS the server is killed instead.
        if self._writing.acquire(timeout=STOP_SECS):
            try:
                with contextlib.suppress(OSError):
                    self._frames.write(httpd.QUIT)
                    self._frames.flush()
                with contextlib.suppress(OSError):
                    self._frames.close()
            finally:
                self._writing.release()
        try:
            self._proc.wait(timeout=STOP_SECS)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __exit__(self, *exc: object) -> None:
        self.close()
