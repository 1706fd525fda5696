"""Memory per pending tree and throughput of the acker ledger.

Run from the repository root::

    python bench/bench_acker_memory.py

It prints markdown tables:

* bytes per pending tree for 100,000 trees held by one ``AckerLedger``,
  measured with :mod:`tracemalloc` (CPython's requested sizes) and, from
  the same traces, rounded up the way pymalloc really allocates small
  objects (16-byte size classes up to 512 bytes);
  - "ledger only": root ids exist before tracing starts (in-process they
    arrive in a message and are shared with the spout's pending map), so
    only the ledger's own dict tables and packed entry ints are counted;
  - "with root ids": each root id is a fresh 64-bit int created by
    ``new_id()`` while tracing, owned by the ledger alone;
  - "burst": all trees inserted between two ticks (one bucket holds all);
    "steady": inserted over three tick periods (three smaller dicts), as a
    ledger under constant load looks;
* init+ack cycles per second over 1,000,000 roots (each cycle completes a
  tree: one init, one ack, one ``Outcome``).

Storm's Java acker needs about 20 bytes per tree; the goal here is at most
100 bytes (tracemalloc, ledger only).
"""

from __future__ import annotations

import gc
import platform
import random
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

# Run as a script from a checkout without installing: make the package importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from statestream._acker import AckerLedger, new_id

N_PENDING = 100_000
N_CYCLES = 1_000_000
SPOUT_TASKS = 8
BUCKETS = 3
PYMALLOC_LIMIT = 512  # larger requests go to the system allocator
PYMALLOC_ALIGN = 16  # size classes of 16 bytes on 64-bit CPython >= 3.8


def _rounded(size: int) -> int:
    if size > PYMALLOC_LIMIT:
        return size
    return -(-size // PYMALLOC_ALIGN) * PYMALLOC_ALIGN


def measure(fill: Callable[[AckerLedger], None]) -> tuple[float, float, AckerLedger]:
    """Bytes per pending tree that ``fill`` leaves allocated: (tracemalloc, pymalloc-rounded)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    ledger = AckerLedger(BUCKETS)
    fill(ledger)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    # Only what is still allocated counts: transient ints (the ack values
    # XORed into an entry, loop counters) are freed by now.
    requested = sum(t.size for t in after.traces) - sum(t.size for t in before.traces)
    rounded = sum(_rounded(t.size) for t in after.traces) - sum(
        _rounded(t.size) for t in before.traces
    )
    assert len(ledger) == N_PENDING, len(ledger)
    return requested / N_PENDING, rounded / N_PENDING, ledger


def filler(roots: list[int] | None, vals: list[int], ticks: int) -> Callable[[AckerLedger], None]:
    """Insert N_PENDING trees in ``ticks + 1`` cohorts, with given or fresh root ids."""
    cohorts = ticks + 1

    def fill(ledger: AckerLedger) -> None:
        per = N_PENDING // cohorts
        for c in range(cohorts):
            lo, hi = c * per, (N_PENDING if c == cohorts - 1 else (c + 1) * per)
            if roots is None:
                for i in range(lo, hi):
                    ledger.init(new_id(), i % SPOUT_TASKS, vals[i])
            else:
                for i in range(lo, hi):
                    ledger.init(roots[i], i % SPOUT_TASKS, vals[i])
            if c < cohorts - 1:
                ledger.tick()

    return fill


def memory_rows() -> list[tuple[str, str, float, float]]:
    rng = random.Random(42)
    roots = [new_id(rng) for _ in range(N_PENDING)]
    vals = [new_id(rng) for _ in range(N_PENDING)]
    rows = []
    for load, ticks in (("burst", 0), ("steady", BUCKETS - 1)):
        for what, given in (("ledger only", roots), ("with root ids", None)):
            requested, rounded, ledger = measure(filler(given, vals, ticks))
            del ledger
            rows.append((load, what, requested, rounded))
    return rows


def throughput(with_new_id: bool) -> float:
    """init+ack cycles per second over N_CYCLES roots, each completing its tree."""
    rng = random.Random(7)
    ids = None if with_new_id else [new_id(rng) for _ in range(N_CYCLES)]
    edge = new_id(rng)
    ledger = AckerLedger(BUCKETS)
    init, ack = ledger.init, ledger.ack
    gc.collect()
    start = time.perf_counter()
    if ids is None:
        for i in range(N_CYCLES):
            root = new_id()
            init(root, i & 7, edge)
            ack(root, edge)
    else:
        for i, root in enumerate(ids):
            init(root, i & 7, edge)
            ack(root, edge)
    elapsed = time.perf_counter() - start
    assert len(ledger) == 0
    return N_CYCLES / elapsed


def main() -> None:
    print("command: `python bench/bench_acker_memory.py`")
    print(
        f"python {platform.python_version()} ({platform.python_implementation()}), "
        f"{platform.machine()}, {platform.system()}; "
        f"{N_PENDING:,} pending trees, {BUCKETS} timeout buckets"
    )
    print()
    print("| load | counted | bytes/tree (tracemalloc) | bytes/tree (pymalloc-rounded) |")
    print("|---|---|---:|---:|")
    for load, what, requested, rounded in memory_rows():
        print(f"| {load} | {what} | {requested:.1f} | {rounded:.1f} |")
    print()
    print("| loop (1,000,000 roots) | cycles/s | messages/s |")
    print("|---|---:|---:|")
    for label, with_id in (("init+ack", False), ("new_id+init+ack", True)):
        rate = throughput(with_id)
        print(f"| {label} | {rate:,.0f} | {2 * rate:,.0f} |")


if __name__ == "__main__":
    main()
