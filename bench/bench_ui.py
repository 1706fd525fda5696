"""What the live view (`statestream run --ui`) costs a run: the run with no view, with the
view polled once a second (the page), and with a hostile client (a connection held
open and 1,000 requests as fast as it can), interleaved.

    python bench/bench_ui.py [--sentences 400000] [--rounds 6]

Each run is the stateful word count (examples/wordcount.py, memory provider) over
the benchmark corpus, in a fresh process of its own (``--child MODE``), with the
view that `--ui` starts (statestream._ui.source.live_view on port 0). The clients
run in this process, as a browser or a scraper would, never in a fork of the
run's (a forked client makes the run pay a copy-on-write fault for every page it
writes). A round runs the three modes once each, in an order rotated from round
to round, so that a slow phase of a shared machine hits every mode alike; each
mode's ratios are against the off run of the same round.

Figures per run, all measured around ``runtime.run`` in the run's process:

- words/s (wall clock: noisy on a shared machine);
- the run process's CPU time (user + sys over all its threads, getrusage):
  what the view adds to the run's own process, whatever else the machine does;
- the run thread's CPU time (``time.thread_time``), and the difference of the
  two, the CPU time of the run process's other threads: what the view's
  threads there (the publisher; before 0b742f8 also every request) cost it;
- the run thread's wall clock less the time it waited in the CPU's run queue
  (``/proc/thread-self/schedstat``): what the run took had it never waited for
  a core that other programs held, so a figure the machine's load barely
  moves; it still counts the thread's waits for the interpreter lock (while
  another thread of its process runs) and for I/O;
- the view's server process's CPU time (getrusage of the run's children,
  taken once the view has stopped): the work moved out of the run's process.

The goal (issue 33): polled and hostile each within 5% of the run without the view.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import corpus_path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "wordcount.py"
MODES = ("off", "polled", "hostile")


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _queued() -> float:
    """Seconds this thread has waited in a run queue for a CPU (Linux schedstat)."""
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def child(mode: str, sentences: int) -> None:
    """One run in this process; says its view's address, waits for ``go``, prints its figures."""
    from statestream import testing
    from statestream._run import as_config, load_topology, make_runtime
    from statestream._ui.source import live_view

    testing.reset()
    topo = load_topology(str(EXAMPLE))
    conf = as_config(
        {"wordcount.input": str(corpus_path(sentences)), "topology.state.provider": "memory"},
        (topo.name,),
    )
    rt = make_runtime(topo, conf)
    rt.open()
    view: Any = None
    try:
        if mode != "off":
            view = live_view(rt, topo, 0)
            view.__enter__()
            print("ADDR", *view.address, flush=True)
        else:
            print("ADDR - 0", flush=True)
        sys.stdin.readline()  # the clients are in place
        cpu0, served0, thread0 = (
            _cpu(resource.RUSAGE_SELF),
            _cpu(resource.RUSAGE_CHILDREN),
            time.thread_time(),
        )
        queued0 = _queued()
        t0 = time.perf_counter()
        rt.run(until_idle=True)
        wall = time.perf_counter() - t0
        cpu, thread = _cpu(resource.RUSAGE_SELF) - cpu0, time.thread_time() - thread0
        unqueued = wall - (_queued() - queued0)
    finally:
        if view is not None:
            view.close()
        rt.close()
    served = _cpu(resource.RUSAGE_CHILDREN) - served0
    print(
        "RESULT",
        json.dumps(
            {"wall": wall, "unqueued": unqueued, "cpu": cpu, "thread": thread, "served": served}
        ),
        flush=True,
    )


def _get(address: tuple[str, int]) -> None:
    conn = http.client.HTTPConnection(*address, timeout=30)
    conn.request("GET", "/api/v1/topology")
    conn.getresponse().read()
    conn.close()


def _poll(address: tuple[str, int], stop: threading.Event, sent: list[int]) -> None:
    while not stop.wait(1.0):
        try:
            _get(address)
        except OSError:
            break  # the run ended and its view with it
        sent[0] += 1


def _hostile(address: tuple[str, int], stop: threading.Event, sent: list[int]) -> None:
    with socket.create_connection(address) as held:
        held.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
        for _ in range(1000):
            if stop.is_set():
                break
            try:
                _get(address)
            except OSError:
                break  # the run ended and its view with it
            sent[0] += 1
        stop.wait()


def one_run(mode: str, sentences: int) -> dict[str, float]:
    """Run ``mode`` in a fresh process with its clients; its figures and the requests answered."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", mode, "--sentences", str(sentences)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    line = proc.stdout.readline().split()
    while line[:1] != ["ADDR"]:
        line = proc.stdout.readline().split()
    stop, sent = threading.Event(), [0]
    client = None
    if mode != "off":
        address = (line[1], int(line[2]))
        client = threading.Thread(
            target=_poll if mode == "polled" else _hostile, args=(address, stop, sent), daemon=True
        )
        client.start()
        if mode == "hostile":
            time.sleep(0.2)  # the held connection is in place before the run starts
    proc.stdin.write("go\n")
    proc.stdin.flush()
    result: dict[str, float] = {}
    for out in proc.stdout:
        if out.startswith("RESULT "):
            result = json.loads(out[len("RESULT ") :])
    stop.set()
    proc.wait()
    if client is not None:
        client.join(5)
    result["requests"] = sent[0]
    return result


def _median_row(name: str, values: list[float]) -> str:
    return f"| {name} | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.sentences)
        return
    corpus_path(args.sentences)  # made once, before any run is timed
    words = args.sentences * 10
    print(f"command: python bench/bench_ui.py --sentences {args.sentences} --rounds {args.rounds}")
    print(f"{words:,} words a run; load before: {os.getloadavg()[0]:.2f}\n")
    print(
        "| round | mode | words/s | wall - queued s | run CPU s | run thread CPU s "
        "| other threads CPU s | server CPU s | requests |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    ratios: dict[str, dict[str, list[float]]] = {
        m: {
            "words/s": [],
            "wall - queued": [],
            "run CPU": [],
            "run thread CPU": [],
            "other threads CPU / off run CPU": [],
        }
        for m in MODES[1:]
    }
    served: dict[str, list[float]] = {m: [] for m in MODES[1:]}
    requests: list[int] = []
    for r in range(args.rounds):
        order = MODES[r % 3 :] + MODES[: r % 3]
        got = {m: one_run(m, args.sentences) for m in order}
        for m in order:
            g = got[m]
            print(
                f"| {r + 1} | {m} | {words / g['wall']:,.0f} | {g['unqueued']:.3f} | {g['cpu']:.3f} "
                f"| {g['thread']:.3f} "
                f"| {g['cpu'] - g['thread']:.3f} | {g['served']:.3f} | {g['requests']:,.0f} |",
                flush=True,
            )
        off = got["off"]
        for m in MODES[1:]:
            ratios[m]["words/s"].append(off["wall"] / got[m]["wall"])
            ratios[m]["wall - queued"].append(got[m]["unqueued"] / off["unqueued"])
            ratios[m]["run CPU"].append(got[m]["cpu"] / off["cpu"])
            ratios[m]["run thread CPU"].append(got[m]["thread"] / off["thread"])
            ratios[m]["other threads CPU / off run CPU"].append(
                (got[m]["cpu"] - got[m]["thread"]) / off["cpu"]
            )
            served[m].append(got[m]["served"] / off["cpu"])
        requests.append(int(got["hostile"]["requests"]))
    print(f"\nload after: {os.getloadavg()[0]:.2f}\n")
    print("| mode | figure (with the view / off) | median | lowest | highest |")
    print("|---|---|---:|---:|---:|")
    for m in MODES[1:]:
        for name, values in ratios[m].items():
            print(_median_row(f"{m} | {name}", values))
        print(_median_row(f"{m} | server CPU / off run CPU", served[m]))
    print(
        f"\nhostile client: a connection held open, and {statistics.median(requests):,.0f} "
        "requests answered per run (median; at most 1,000)"
    )


if __name__ == "__main__":
    main()
