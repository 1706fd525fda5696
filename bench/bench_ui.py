"""What the live view (`statestream run --ui`) costs a run: throughput with no view, with the
view polled once a second (the page), and with a hostile client (a connection held
open and 1,000 requests as fast as it can), in interleaved pairs.

    python bench/bench_ui.py [--sentences 50000] [--rounds 5]

Each run is the stateful word count (examples/wordcount.py, memory provider) over
the benchmark corpus in this process; the view is the one `--ui` starts
(statestream._ui.source.live_view on port 0); the clients run in a process of
their own, as a browser or a scraper would, so that only the server's own work
competes with the run. A round is two pairs, (off, polled) and (off, hostile),
each pair run back to back in alternating order, so that a slow phase of a
shared machine hits both runs of a pair alike. Prints every pair's words per
second and ratio, and per mode the median ratio over the pairs; the goal is at
most 5% slower under the hostile client.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import corpus_path

from statestream import testing
from statestream._run import as_config, load_topology, make_runtime
from statestream._ui.source import live_view

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "wordcount.py"


def _poll(address: tuple[str, int], stop: Any, every: float) -> None:
    while not stop.wait(every):
        conn = http.client.HTTPConnection(*address, timeout=5)
        conn.request("GET", "/api/v1/topology")
        conn.getresponse().read()
        conn.close()


def _hostile(address: tuple[str, int], stop: Any, sent: Any) -> None:
    with socket.create_connection(address) as held:
        held.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
        for _ in range(1000):
            if stop.is_set():
                break
            conn = http.client.HTTPConnection(*address, timeout=5)
            conn.request("GET", "/api/v1/topology")
            conn.getresponse().read()
            conn.close()
            with sent.get_lock():
                sent.value += 1
        stop.wait()


def one_run(corpus: Path, words: int, mode: str) -> tuple[float, int]:
    """Words per second of one run in ``mode`` (off, polled, hostile); requests sent."""
    testing.reset()  # an empty memory store: each run counts the whole corpus
    topo = load_topology(str(EXAMPLE))
    conf = as_config(
        {"wordcount.input": str(corpus), "topology.state.provider": "memory"}, (topo.name,)
    )
    rt = make_runtime(topo, conf)
    rt.open()
    ctx = multiprocessing.get_context("fork")
    stop, sent = ctx.Event(), ctx.Value("i", 0)
    view: Any = None
    client: Any = None
    try:
        if mode != "off":
            view = live_view(rt, topo, 0).__enter__()
            target, args = (
                (_poll, (view.address, stop, 1.0))
                if mode == "polled"
                else (_hostile, (view.address, stop, sent))
            )
            client = ctx.Process(target=target, args=args, daemon=True)
            client.start()
        t0 = time.perf_counter()
        rt.run(until_idle=True)
        elapsed = time.perf_counter() - t0
    finally:
        stop.set()
        if client is not None:
            client.join(10)
        if view is not None:
            view.close()
        rt.close()
    return words / elapsed, int(sent.value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    corpus = corpus_path(args.sentences)
    words = args.sentences * 10
    ratios: dict[str, list[float]] = {"polled": [], "hostile": []}
    requests: list[int] = []
    print(f"command: python bench/bench_ui.py --sentences {args.sentences} --rounds {args.rounds}")
    print(f"{args.sentences:,} sentences ({words:,} words) a run\n")
    print("| round | pair | first | off words/s | with words/s | ratio |")
    print("|---:|---|---|---:|---:|---:|")
    for r in range(args.rounds):
        for i, mode in enumerate(("polled", "hostile")):
            order = ("off", mode) if (r + i) % 2 == 0 else (mode, "off")
            got = {}
            for m in order:
                got[m], sent = one_run(corpus, words, m)
                if m == "hostile":
                    requests.append(sent)
            ratio = got[mode] / got["off"]
            ratios[mode].append(ratio)
            print(
                f"| {r + 1} | off/{mode} | {order[0]} | {got['off']:,.0f} | {got[mode]:,.0f} "
                f"| {ratio:.3f} |",
                flush=True,
            )
    print("\n| mode | median ratio to off | lowest | highest | pairs |")
    print("|---|---:|---:|---:|---:|")
    for mode, rs in ratios.items():
        print(
            f"| {mode} | {statistics.median(rs):.3f} | {min(rs):.3f} | {max(rs):.3f} | {len(rs)} |"
        )
    print(
        f"\nhostile client: a connection held open, and {statistics.median(requests):,.0f} "
        "requests answered per run (median; at most 1,000)"
    )


if __name__ == "__main__":
    main()
