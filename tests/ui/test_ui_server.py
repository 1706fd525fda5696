"""The live view's server (statestream/_ui/server.py, serving from the process of
statestream/_ui/httpd.py) is safe to leave running: it binds loopback unless told
otherwise, answers its own paths only (no request reads a file, traversal tried),
refuses every method but GET and HEAD, never renders per request (the runtime is
read by the publisher only), and its process does not outlive the run's, not even
a run killed with SIGKILL."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import statestream._ui.server as server_module
from statestream._errors import ConfigError
from statestream._ui.server import REQUESTS_PER_SEC, LiveView, Pacer, parse_address

ASSETS = Path(server_module.__file__).with_name("assets")
ROOT = Path(__file__).resolve().parents[2]


class Renders:
    """The bodies a run would give, and how often the server asked for them."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> tuple[bytes, bytes]:
        self.calls += 1
        return (
            b'{"topology": "t"}',
            b"# TYPE statestream_x_total counter\nstatestream_x_total 1.0\n",
        )


@pytest.fixture(scope="module")
def view() -> Iterator[tuple[LiveView, Renders]]:
    renders = Renders()
    # An hour between renders: whatever a test sees was rendered at start. No
    # pacing to speak of, so a thousand requests take no time (the pacer is
    # tested on its own below).
    with LiveView(parse_address("0"), renders, interval=3600, requests_per_sec=1e9) as v:
        yield v, renders


def get(view: LiveView, path: str, method: str = "GET") -> http.client.HTTPResponse:
    """``method path`` sent as is (http.client does not normalise the path)."""
    conn = http.client.HTTPConnection(*view.address, timeout=10)
    conn.request(method, path)
    response = conn.getresponse()
    response.read()
    conn.close()
    return response


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("8080", ("127.0.0.1", 8080)),
        (8080, ("127.0.0.1", 8080)),
        (":8080", ("127.0.0.1", 8080)),
        ("0.0.0.0:9", ("0.0.0.0", 9)),
        ("[::1]:0", ("::1", 0)),
    ],
)
def test_an_address_without_a_host_is_loopback(text: str | int, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["", "http", "70000", "host:", "1.2.3.4:port"])
def test_a_bad_address_is_a_config_error_quoting_it(text: str) -> None:
    with pytest.raises(ConfigError, match=f"--ui {text!r} is not a port or HOST:PORT"):
        parse_address(text)


def test_the_socket_is_bound_to_loopback_by_default(view: tuple[LiveView, Renders]) -> None:
    v, _ = view
    assert v.address[0] == "127.0.0.1"
    assert v.url == f"http://127.0.0.1:{v.address[1]}/"


def test_a_port_in_use_is_one_config_error_naming_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            LiveView(("127.0.0.1", port), Renders())


@pytest.mark.parametrize(
    ("path", "ctype"),
    [
        ("/", "text/html; charset=utf-8"),
        ("/?refresh=1", "text/html; charset=utf-8"),
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/style.css", "text/css; charset=utf-8"),
        ("/api/v1/topology", "application/json"),
        ("/metrics", "text/plain; version=0.0.4; charset=utf-8"),
    ],
)
def test_the_views_own_paths_are_served(
    view: tuple[LiveView, Renders], path: str, ctype: str
) -> None:
    response = get(view[0], path)
    assert (response.status, response.getheader("Content-Type")) == (200, ctype)


def test_the_bodies_are_what_the_publisher_rendered_not_rendered_per_request() -> None:
    renders = Renders()
    with LiveView(parse_address("0"), renders, interval=3600, requests_per_sec=1e9) as v:
        conn = http.client.HTTPConnection(*v.address, timeout=10)
        conn.request("GET", "/metrics")
        assert conn.getresponse().read() == renders()[1]
        conn.close()
        for _ in range(50):
            assert get(v, "/api/v1/topology").status == 200
        assert renders.calls == 2  # at start, and the one above


TRAVERSALS = [
    "/secret.txt",
    "/assets/secret.txt",
    "/../secret.txt",
    "/assets/../secret.txt",
    "/%2e%2e/secret.txt",
    "/%2E%2E%2Fsecret.txt",
    "/..%2fsecret.txt",
    "/static/../../secret.txt",
    "//secret.txt",
    "/index.html",
    "/assets/app.js",
    "/etc/passwd",
    "/../../../../etc/passwd",
    "http://127.0.0.1/etc/passwd",
    "/app.js/",
    "/favicon.ico",
]


def test_no_path_outside_the_views_own_reads_a_file(view: tuple[LiveView, Renders]) -> None:
    # Files beside the assets and beside the package's module: only the map made at
    # start is served, so none of them can be fetched, however the path is spelt.
    made = [ASSETS / "secret.txt", ASSETS.parent / "secret.txt"]
    try:
        for f in made:
            f.write_text("secret")
        statuses = {path: get(view[0], path).status for path in TRAVERSALS}
    finally:
        for f in made:
            f.unlink(missing_ok=True)
    assert statuses == dict.fromkeys(TRAVERSALS, 404)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"])
def test_methods_other_than_get_and_head_are_refused(
    view: tuple[LiveView, Renders], method: str
) -> None:
    response = get(view[0], "/api/v1/topology", method)
    assert (response.status, response.getheader("Allow")) == (405, "GET, HEAD")


def test_head_answers_the_headers_without_the_body(view: tuple[LiveView, Renders]) -> None:
    conn = http.client.HTTPConnection(*view[0].address, timeout=10)
    conn.request("HEAD", "/app.js")
    response = conn.getresponse()
    assert response.status == 200
    assert int(response.getheader("Content-Length") or 0) == (ASSETS / "app.js").stat().st_size
    assert response.read() == b""
    conn.close()


def test_a_connection_held_open_does_not_stop_a_thousand_requests(
    view: tuple[LiveView, Renders],
) -> None:
    v, _ = view
    with socket.create_connection(v.address) as held:
        held.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
        statuses = {get(v, "/api/v1/topology").status for _ in range(1000)}
    assert statuses == {200}


def test_closing_the_view_frees_its_port() -> None:
    with LiveView(parse_address("0"), Renders()) as v:
        address = v.address
    with socket.socket() as again:
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(address)  # raises if the view still held it


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_pacer_lets_a_burst_through_then_one_turn_per_interval() -> None:
    clock = Clock()
    pacer = Pacer(rate=10, burst=3, clock=clock)
    assert [pacer.delay() for _ in range(3)] == [0, 0, 0]  # the burst
    # Past it, each caller's turn is reserved a tenth of a second after the last.
    assert [round(pacer.delay(), 6) for _ in range(3)] == [0.1, 0.2, 0.3]
    clock.now += 0.3  # the three waiters were served; the budget refills from here
    assert round(pacer.delay(), 6) == 0.1
    clock.now += 10  # idle: back to a full burst, never more
    assert [pacer.delay() for _ in range(3)] == [0, 0, 0]
    assert pacer.delay() > 0


def test_a_client_asking_as_fast_as_it_can_is_held_to_the_rate() -> None:
    # 2,000 requests at once against the default rate: how long the server
    # makes them wait in all, on its own clock (no wall-clock assertion).
    clock = Clock()
    pacer = Pacer(REQUESTS_PER_SEC, REQUESTS_PER_SEC, clock=clock)
    waits = [pacer.delay() for _ in range(2000)]
    assert max(waits) == pytest.approx((2000 - REQUESTS_PER_SEC) / REQUESTS_PER_SEC)
    assert sum(w == 0 for w in waits) == REQUESTS_PER_SEC


def test_the_view_paces_its_requests() -> None:
    # A budget of one request in 1,000 s: the first request waits its turn far
    # longer than the client's patience, so it times out; the view still closes.
    with LiveView(parse_address("0"), Renders(), interval=3600, requests_per_sec=1e-3) as v:
        conn = http.client.HTTPConnection(*v.address, timeout=1)
        conn.request("GET", "/metrics")
        with pytest.raises(TimeoutError):
            conn.getresponse()
        conn.close()


def _refused(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in {"Z", "X"}
    except FileNotFoundError:
        return True


def test_closing_the_view_stops_its_server_process() -> None:
    with LiveView(parse_address("0"), Renders()) as v:
        pid = v.server_pid
        assert get(v, "/metrics").status == 200
    assert _gone(pid) and _refused(v.address)


def test_the_server_runs_below_the_runs_priority(view: tuple[LiveView, Renders]) -> None:
    # When every core is busy, the kernel serves the run before a client's requests.
    get(view[0], "/metrics")  # the server is past its start (it lowers itself there)
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, view[0].server_pid) >= min(mine + 10, 19)


def test_the_server_does_not_outlive_a_run_killed_with_sigkill() -> None:
    # A run's process that serves its view, killed as a crash would kill it: the
    # server process sees its stdin end and exits, and the port answers no more.
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\n"
                "from statestream._ui.server import LiveView, parse_address\n"
                "v = LiveView(parse_address('0'), lambda: (b'{}', b''))\n"
                "v.__enter__()\n"
                "print(v.server_pid, v.address[1], flush=True)\n"
                "time.sleep(600)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert run.stdout is not None
        pid, port = map(int, run.stdout.readline().split())
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        assert conn.getresponse().status == 200
        conn.close()
        os.kill(run.pid, signal.SIGKILL)
        run.wait()
        deadline = time.monotonic() + 30  # a bound on a loaded machine, not a timing
        while not (_gone(pid) and _refused(("127.0.0.1", port))) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid) and _refused(("127.0.0.1", port))
    finally:
        run.kill()
        run.wait()
        if run.stdout is not None:
            run.stdout.close()
