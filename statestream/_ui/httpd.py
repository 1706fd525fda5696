"""The live view's HTTP server process: serves the bodies the run pushes to it, and nothing else.

Run as a script by :class:`statestream._ui.server.LiveView` (``python -I -S
httpd.py OPTIONS``), never imported into it for serving: standard library only,
so that it starts in a few tens of milliseconds and shares nothing with the run.
All client traffic (requests, held connections, the pacer's sleepers) lands in
this process, so that whatever a client does costs the run's process nothing:
measured in bench/RESULTS-observability.md, where a request answered inside the
run's process cost it about 0.4 M instructions under the interpreter lock the
run needs too.

Lifecycle, from the run's side (``server.LiveView``):

1. It starts this process with the address, the limits and its own pid as JSON
   in ``argv[1]``.
   This process binds, then writes one line to stdout: ``ok PORT HOST`` or
   ``error MESSAGE`` (and exits 1).
2. It pushes frames on this process's stdin: a :func:`bodies_frame` (the
   rendered ``/api/v1/topology`` and ``/metrics``) about once a second; the
   first one arrives before anything is served (a request that comes earlier
   waits in the listen backlog), so no client ever sees an empty body.
3. :data:`QUIT`, or the end of stdin, stops serving and exits. The end of
   stdin comes when the run's process dies, ``kill -9`` included (the kernel
   closes its end of the pipe); a process forked from the run (a worker) may
   hold that end too, so the parent's pid is also checked at every poll of the
   accept loop: re-parented means the run is gone.

What a client can do (the same limits as when the server ran in the run's
process): at most :data:`MAX_CONNECTIONS` connections at once, the rest closed at
accept; a connection silent for :data:`IDLE_SECS` is dropped; requests paced to
:data:`REQUESTS_PER_SEC` over all clients (a request past the budget waits,
asleep, for its turn); GET and HEAD only (405); every path is looked up in a
dict (the page's three assets read once at start by exact name, and the two
bodies), so no request touches the file system and ``/../`` reaches nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

__all__ = [
    "IDLE_SECS",
    "MAX_CONNECTIONS",
    "QUIT",
    "REQUESTS_PER_SEC",
    "Pacer",
    "bodies_frame",
    "main",
]

#: Connections served at once; a further one is closed at accept, so that a client
#: opening thousands costs a few threads, not thousands.
MAX_CONNECTIONS = 32
#: Seconds a connection may stay silent (a request half sent, a keep-alive held).
IDLE_SECS = 10.0
#: Requests answered a second, over all clients (the rest wait their turn). The
#: page asks once a second, a Prometheus scrape once in seconds.
REQUESTS_PER_SEC = 50.0
#: Seconds between two checks that the run's process is still this one's parent.
POLL_SECS = 0.5
#: How much lower than the run's the server's scheduling priority is (nice).
NICE = 10

PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
JSON_TYPE = "application/json"

# The page's files, served by these exact paths and no others.
_ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}

# Frames on stdin: a kind byte, then for bodies two lengths and the two bodies.
_BODIES = b"B"
_LENGTHS = struct.Struct(">II")
#: The frame that asks the server to stop.
QUIT = b"Q"


def bodies_frame(api: bytes, metrics: bytes) -> bytes:
    """The frame that makes ``api`` and ``metrics`` what the dynamic paths answer."""
    return b"".join((_BODIES, _LENGTHS.pack(len(api), len(metrics)), api, metrics))


@dataclass(frozen=True)
class _Bodies:
    """What the dynamic paths answer, swapped in whole (read without a lock)."""

    api: bytes
    metrics: bytes


def _read_frame(stream: BinaryIO) -> _Bodies | None:
    """The next bodies from ``stream``; None at QUIT or the end of the stream."""
    kind = stream.read(1)
    if kind != _BODIES:
        return None
    head = stream.read(_LENGTHS.size)
    if len(head) < _LENGTHS.size:
        return None
    n_api, n_metrics = _LENGTHS.unpack(head)
    api, metrics = stream.read(n_api), stream.read(n_metrics)
    if len(api) < n_api or len(metrics) < n_metrics:
        return None
    return _Bodies(api, metrics)


class Pacer:
    """A token bucket over wall-clock time: :meth:`delay` reserves the next turn.

    ``rate`` turns a second with a burst of ``burst``; a caller past the budget
    is told how long to wait (its turn is reserved, so waiting callers are
    served in order and the rate holds however many wait). Thread-safe.
    ``clock`` is an input so the pacing is tested without sleeping.
    """

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate
        self._burst = burst
        self._clock = clock
        self._tokens = burst
        self._last = clock()
        self._lock = threading.Lock()

    def delay(self) -> float:
        """Take a turn; returns the seconds to wait before it (0 within the budget)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
            self._last = now
            self._tokens -= 1
            return 0.0 if self._tokens >= 0 else -self._tokens / self._rate


def load_assets() -> dict[str, tuple[bytes, str]]:
    """The page's files by their path, read once from the ``assets`` folder beside this file."""
    folder = Path(__file__).with_name("assets")
    return {path: ((folder / name).read_bytes(), ctype) for path, (name, ctype) in _ASSETS.items()}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # server_close() must not wait for a client that holds its connection open.
    block_on_close = False

    def __init__(self, address: tuple[str, int], pacer: Pacer, parent: int) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.pacer = pacer
        self.parent = parent
        self.assets = load_assets()
        self.bodies = _Bodies(b"{}", b"")
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: close at once rather than queue
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up or stalled is its own problem, not the run's log's

    def service_actions(self) -> None:
        # Called by serve_forever at every poll: a run killed while a process it
        # forked still holds the pipe's other end ends here (re-parented).
        if os.getppid() != self.parent:
            os._exit(0)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = IDLE_SECS
    server_version = "statestream"
    sys_version = ""

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def __getattr__(self, name: str) -> Any:
        # http.server looks up do_<METHOD> and answers 501 when it is missing; any
        # method other than GET and HEAD is refused as not allowed here instead.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED,
            b"405 method not allowed: GET or HEAD only\n",
            "text/plain; charset=utf-8",
            body=True,
            extra={"Allow": "GET, HEAD"},
        )

    def _answer(self, *, body: bool) -> None:
        server = self.server
        wait = server.pacer.delay()
        if wait > 0:
            time.sleep(wait)
        path = urlsplit(self.path).path
        found: tuple[bytes, str] | None
        if path == "/api/v1/topology":
            found = (server.bodies.api, JSON_TYPE)
        elif path == "/metrics":
            found = (server.bodies.metrics, PROMETHEUS_TYPE)
        else:
            found = server.assets.get(path)
        if found is None:
            self._send(
                HTTPStatus.NOT_FOUND, b"404 not found\n", "text/plain; charset=utf-8", body=body
            )
        else:
            self._send(HTTPStatus.OK, found[0], found[1], body=body)

    def _send(
        self,
        status: HTTPStatus,
        payload: bytes,
        ctype: str,
        *,
        body: bool,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        # The page loads its own script and style and nothing else (its icon is an
        # empty data: URL, so that the browser asks for no /favicon.ico).
        self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self' data:")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per poll would bury the run's own log


def main(argv: list[str]) -> int:
    """Bind, say so on stdout, serve the pushed bodies until QUIT or the end of stdin."""
    # Ctrl-C reaches the whole process group: the run decides when its view stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Below the run in the scheduler's eyes: when the cores are all busy (workers,
    # a loaded machine), a client's requests wait rather than the run.
    with contextlib.suppress(OSError):
        os.nice(NICE)
    options = json.loads(argv[1])
    parent = int(options["parent"])
    if os.getppid() != parent:
        return 1  # the run died while this process started
    rate = float(options["rate"])
    try:
        server = _Server((options["host"], int(options["port"])), Pacer(rate, rate), parent)
    except OSError as exc:
        print("error", exc.strerror or exc, flush=True)
        return 1
    host, port = server.server_address[:2]
    print("ok", port, host, flush=True)
    frames = sys.stdin.buffer
    first = _read_frame(frames)
    if first is None:  # closed before it was entered
        server.server_close()
        return 0
    server.bodies = first
    serving = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_SECS}, daemon=True
    )
    serving.start()
    while (bodies := _read_frame(frames)) is not None:
        server.bodies = bodies
    # No shutdown() handshake (it waits out a poll of the accept loop): closing the
    # socket and leaving the process (see below) is the whole of stopping.
    server.server_close()
    return 0


if __name__ == "__main__":
    # os._exit: the request threads (one may sleep for the pacer) are not waited for.
    os._exit(main(sys.argv))
