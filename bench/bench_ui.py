"""What the live view (`statestream run --ui`) costs a run: throughput with no view, with the
view polled once a second (the page), and with a hostile client (a connection held
open and 1,000 requests as fast as it can), rounds interleaved.

    python bench/bench_ui.py [--sentences 50000] [--rounds 5]

Each run is the stateful word count (examples/wordcount.py, memory provider) over
the benchmark corpus in this process; the view is the one `--ui` starts
(statestream._ui.source.live_view on port 0). Prints words per second per mode
(median of the rounds) and each mode's ratio to the run without a view; the goal
is at most 5% slower under the hostile client. Wall-clock figures on a shared
machine swing; the rounds are interleaved so that a slow phase of the machine
hits every mode alike.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import corpus_path

from statestream import testing
from statestream._run import as_config, load_topology, make_runtime
from statestream._ui.source import live_view

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "wordcount.py"


def _poll(address: tuple[str, int], stop: threading.Event, every: float) -> None:
    while not stop.wait(every):
        conn = http.client.HTTPConnection(*address, timeout=5)
        conn.request("GET", "/api/v1/topology")
        conn.getresponse().read()
        conn.close()


def _hostile(address: tuple[str, int], stop: threading.Event, sent: list[int]) -> None:
    with socket.create_connection(address) as held:
        held.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
        for _ in range(1000):
            if stop.is_set():
                break
            conn = http.client.HTTPConnection(*address, timeout=5)
            conn.request("GET", "/api/v1/topology")
            conn.getresponse().read()
            conn.close()
            sent[0] += 1
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
    stop, sent = threading.Event(), [0]
    view: Any = None
    try:
        if mode != "off":
            view = live_view(rt, topo, 0).__enter__()
            target, args = (
                (_poll, (view.address, stop, 1.0))
                if mode == "polled"
                else (_hostile, (view.address, stop, sent))
            )
            threading.Thread(target=target, args=args, daemon=True).start()
        t0 = time.perf_counter()
        rt.run(until_idle=True)
        elapsed = time.perf_counter() - t0
    finally:
        stop.set()
        if view is not None:
            view.close()
        rt.close()
    return words / elapsed, sent[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    corpus = corpus_path(args.sentences)
    words = args.sentences * 10
    modes = ("off", "polled", "hostile")
    rates: dict[str, list[float]] = {m: [] for m in modes}
    requests: list[int] = []
    for r in range(args.rounds):
        for mode in modes[r % 3 :] + modes[: r % 3]:  # a different mode first each round
            rate, sent = one_run(corpus, words, mode)
            rates[mode].append(rate)
            if mode == "hostile":
                requests.append(sent)
    base = statistics.median(rates["off"])
    print(f"{args.sentences:,} sentences ({words:,} words), {args.rounds} rounds interleaved")
    print(f"{'mode':<10} {'words/s (median)':>18} {'ratio to off':>13}  rounds")
    for mode in modes:
        med = statistics.median(rates[mode])
        each = ", ".join(f"{x:,.0f}" for x in rates[mode])
        print(f"{mode:<10} {med:>18,.0f} {med / base:>13.3f}  {each}")
    print(f"hostile client: a connection held open, and {statistics.median(requests):,.0f} "
          "requests answered per run (median; at most 1,000)")


if __name__ == "__main__":
    main()
