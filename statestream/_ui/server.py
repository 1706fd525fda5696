"""The live view's HTTP server: the page, ``/metrics`` and ``/api/v1/topology`` while a run runs.

Standard library only (``http.server.ThreadingHTTPServer``) in a daemon thread
of the process that runs the topology (the supervisor of ``topology.workers:
N``, Spark's driver), so there is no extra server to run. Why it cannot slow
the topology down, whatever a client does:

- A publisher thread renders the response bodies (``/metrics``,
  ``/api/v1/topology``) about once a second from the runtime's numbers and
  swaps them in as one immutable :class:`_Bodies`; request threads only read
  that reference. No request reaches the runtime, holds a lock it needs, or
  does work that grows with the topology.
- At most :data:`MAX_CONNECTIONS` connections are served at once; the rest
  are closed at accept. A connection that sends nothing is dropped after
  :data:`IDLE_SECS`.
- Requests are paced to :data:`REQUESTS_PER_SEC` (a burst of as many): a
  request past the budget waits, asleep, for its turn. Answering one costs
  about 0.4 M instructions under the interpreter lock the run needs too, so
  without a cap a client sending requests as fast as it can takes a share of
  the run's time that grows with its rate (measured: 1,000 requests in a run
  of 500,000 words, about 6% of its instructions); with the cap, at most
  ``REQUESTS_PER_SEC`` x 0.4 M instructions a second, whatever the client does.
  The page asks twice a second at most, a Prometheus scrape once in seconds.
- Every other path is a 404 looked up in a dict: the assets are read from the
  package once, at start, by exact name; no request touches the file system,
  so ``/../`` or ``/%2e%2e/`` cannot reach a file. GET and HEAD only (405).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from .._errors import ConfigError

__all__ = ["IDLE_SECS", "MAX_CONNECTIONS", "REQUESTS_PER_SEC", "LiveView", "Pacer", "parse_address"]

#: Connections served at once; a further one is closed at accept, so that a client
#: opening thousands costs the run a few threads, not thousands.
MAX_CONNECTIONS = 32
#: Seconds a connection may stay silent (a request half sent, a keep-alive held).
IDLE_SECS = 10.0
#: Requests answered a second, over all clients (the rest wait their turn).
REQUESTS_PER_SEC = 50.0

PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
JSON_TYPE = "application/json"

# The page's files, served by these exact paths and no others.
_ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}


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


@dataclass(frozen=True)
class _Bodies:
    """What the dynamic paths answer, rendered together by the publisher."""

    api: bytes
    metrics: bytes


#: Renders the dynamic bodies: ``() -> (api JSON, Prometheus text)``.
Renderer = Callable[[], tuple[bytes, bytes]]


class Pacer:
    """A token bucket over wall-clock time: :meth:`delay` reserves the next turn.

    ``rate`` turns a second with a burst of ``burst``; a caller past the budget
    is told how long to wait (its turn is reserved, so waiting callers are
    served in order and the rate holds however many wait). Thread-safe.
    ``clock`` is an input so the pacing is tested without sleeping.
    """

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # server_close() must not wait for a client that holds its connection open.
    block_on_close = False

    def __init__(self, address: tuple[str, int], view: LiveView) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.view = view
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

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up or stalled is its own problem, not the run's log's

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


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
        self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"405 method not allowed: GET or HEAD only\n",
                   "text/plain; charset=utf-8", body=True, extra={"Allow": "GET, HEAD"})

    def _answer(self, *, body: bool) -> None:
        view = self.server.view
        wait = view.pacer.delay()
        if wait > 0:
            time.sleep(wait)  # asleep, this thread costs the run nothing
        path = urlsplit(self.path).path
        found: tuple[bytes, str] | None
        if path == "/api/v1/topology":
            found = (view.bodies.api, JSON_TYPE)
        elif path == "/metrics":
            found = (view.bodies.metrics, PROMETHEUS_TYPE)
        else:
            found = view.assets.get(path)
        if found is None:
            self._send(HTTPStatus.NOT_FOUND, b"404 not found\n", "text/plain; charset=utf-8", body=body)
        else:
            self._send(HTTPStatus.OK, found[0], found[1], body=body)

    def _send(
        self, status: HTTPStatus, payload: bytes, ctype: str, *, body: bool,
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


def load_assets() -> dict[str, tuple[bytes, str]]:
    """The page's files by their path, read from the package once."""
    folder = resources.files(__package__ or "statestream._ui").joinpath("assets")
    return {path: (folder.joinpath(name).read_bytes(), ctype) for path, (name, ctype) in _ASSETS.items()}


class LiveView:
    """Serves the live view of one run at ``address`` while used as a context manager.

    ``render`` gives the dynamic bodies; the publisher thread calls it every
    ``interval`` seconds, once at start and once more at exit (so that a
    last scrape sees the run's final figures). Making it binds the socket
    (ConfigError naming the address if it cannot); entering starts both
    threads; exiting (or :meth:`close`) stops them and closes the socket.
    :attr:`url` is where to look.
    """

    def __init__(
        self, address: tuple[str, int], render: Renderer, *, interval: float = 1.0,
        requests_per_sec: float = REQUESTS_PER_SEC,
    ) -> None:
        self._render = render
        #: Paces the requests of every client together (module docstring).
        self.pacer = Pacer(requests_per_sec, requests_per_sec)
        self._interval = interval
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.assets = load_assets()
        #: The latest bodies; replaced whole, read without a lock.
        self.bodies = _Bodies(b"{}", b"")
        try:
            self._server = _Server(address, self)
        except OSError as exc:
            raise ConfigError(
                f"the live view cannot listen on {address[0]}:{address[1]}: "
                f"{exc.strerror or exc}; pick another port (0 picks a free one)"
            ) from exc
        self._closed = False

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)``: the port the system picked for port 0."""
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def publish(self) -> None:
        """Render the bodies now and swap them in."""
        api, metrics = self._render()
        self.bodies = _Bodies(api, metrics)

    def _publishing(self) -> None:
        while not self._stopping.wait(self._interval):
            with contextlib.suppress(Exception):  # a failed render keeps the last bodies
                self.publish()

    def __enter__(self) -> LiveView:
        self.publish()
        self._threads = [
            threading.Thread(target=self._publishing, name="statestream-ui-publisher", daemon=True),
            threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.2},
                name="statestream-ui",
                daemon=True,
            ),
        ]
        for t in self._threads:
            t.start()
        return self

    def close(self) -> None:
        """Stop serving and close the socket; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        with contextlib.suppress(Exception):
            self.publish()  # the run's final figures, for a scrape racing the end
        if self._threads:
            self._server.shutdown()
        self._server.server_close()
        for t in self._threads:
            t.join(timeout=5)

    def __exit__(self, *exc: object) -> None:
        self.close()
