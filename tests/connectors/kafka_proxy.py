"""A tansu broker the tests can cut off: reached only through a TCP proxy of the test's own.

tansu keeps everything in memory, so a broker restart is a broker that forgot
every topic, record and group: no way to test a sink riding out a lost broker.
Here the broker stays up, and it advertises the proxy's port, so every
connection of every client (bootstrap and broker connections alike) goes
through the proxy, which can cut them all (as a broker restart or a network
fault would) or refuse new ones (the broker away) and take them again.

The proxy runs in a thread of the test process and is told what to do on a
control port, so that a worker process forked by ``topology.workers`` (which
has only a copy of the thread's objects, and no thread) can cut too.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

from tests.kafka_broker import KafkaBroker, tansu_binary
from tests.redis_server import free_port

__all__ = ["CutOffBroker", "cut_off_broker", "tell"]


class _Proxy:
    def __init__(self, port: int, upstream: int) -> None:
        self.port = port
        self.upstream = upstream
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.listener: socket.socket | None = None
        self.control = socket.create_server(("127.0.0.1", 0))
        self.control_port = self.control.getsockname()[1]
        self.stopped = False
        self.controller = threading.Thread(target=self._control, daemon=True)
        self.controller.start()
        self.acceptor: threading.Thread | None = None

    def listen(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self.listener = listener
        self.acceptor = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self.acceptor.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed: the broker is away
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)  # an idle connection stays (the timeout was the connect's)
            with self.lock:
                self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> int:
        """Close every proxied connection; how many client connections there were."""
        with self.lock:
            cut, self.open = self.open, []
        for s in cut:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        return len(cut) // 2

    def away(self) -> int:
        if self.listener is not None:
            _wake_and_close(self.listener)
            self.listener = None
        return self.cut()

    def _control(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.control.accept()
            except OSError:
                return
            with conn:
                command = conn.makefile().readline().strip()
                if command == "cut":
                    answer = self.cut()
                elif command == "away":
                    answer = self.away()
                elif command == "back":
                    self.listen()
                    answer = 0
                else:
                    answer = -1
                conn.sendall(f"{answer}\n".encode())

    def close(self) -> None:
        """Stop serving; the proxy's threads end (joined, each within a few seconds)."""
        self.stopped = True
        self.away()
        _wake_and_close(self.control)
        for thread in (self.controller, self.acceptor):
            if thread is not None:
                thread.join(5)


def _wake_and_close(listener: socket.socket) -> None:
    """Close a listening socket and wake the thread blocked in its ``accept``: a
    close alone leaves that thread blocked for good (Linux), which outlived the
    test (tests/conftest.py fails a Spark test that leaves a thread running)."""
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)
    listener.close()


def tell(control_port: int, command: str) -> int:
    """Send ``command`` (``cut``, ``away``, ``back``) to the proxy on ``control_port``
    (from any process); its answer (connections cut)."""
    with socket.create_connection(("127.0.0.1", control_port), timeout=10) as conn:
        conn.sendall(f"{command}\n".encode())
        return int(conn.makefile().readline())


class CutOffBroker:
    """A tansu broker behind a proxy: ``bootstrap`` is the proxy's address;
    :meth:`cut`, :meth:`away` and :meth:`back` act on every client's connections."""

    def __init__(self) -> None:
        port = free_port()
        self.broker = KafkaBroker(tansu_binary(), advertised=port)
        self.proxy = _Proxy(port, self.broker.port)
        self.bootstrap = f"127.0.0.1:{port}"
        self.control_port = self.proxy.control_port

    def start(self) -> None:
        self.broker.start()
        self.proxy.listen()

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        self.broker.create_topic(topic, partitions)

    def cut(self) -> int:
        return tell(self.control_port, "cut")

    def away(self) -> int:
        return tell(self.control_port, "away")

    def back(self) -> None:
        tell(self.control_port, "back")

    def stop(self) -> None:
        self.proxy.close()
        self.broker.stop()


@contextlib.contextmanager
def cut_off_broker() -> Iterator[Any]:
    """A :class:`CutOffBroker` running for the ``with`` block."""
    broker = CutOffBroker()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
