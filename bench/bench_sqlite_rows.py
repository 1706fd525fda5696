"""Instructions per row of the sqlite provider's checkpoint writes, counted by valgrind.

    python bench/bench_sqlite_rows.py [--rows 20000] [--op prepared|direct]

Counts, under ``valgrind --tool=callgrind``, only the instructions executed
inside one checkpoint of ``--rows`` rows through the provider's
StateBackend (the call goes through ``functools.reduce``, a C function
callgrind can toggle collection on, as in bench_instructions.py), so
interpreter start-up, imports, opening the file and building the delta are
left out. ``prepared`` is ``write_prepared`` then ``apply_prepared`` (the
exactly-once path), ``direct`` is ``commit_direct`` (at-least-once). Two
checkpoints are counted apart: the first inserts every key into an empty
namespace, the second updates every one of them (the steady state of a
word count). Keys and values are encoded as the json serializer encodes a
word and its count. ``synchronous`` is ``normal``, as fsyncs are not
instructions worth counting. It needs valgrind (Debian: valgrind).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_instructions import callgrind_count

PHASES = ("insert", "update")


def _delta(rows: int, generation: int) -> list[tuple[bytes, bytes | None]]:
    # Dict order, not key order: the provider sorts, as it must for a real delta.
    return [
        (f'"w{(i * 7919) % rows:07d}"'.encode(), str(i + generation).encode()) for i in range(rows)
    ]


def one_run(rows: int, op: str, phase: str) -> None:
    """The measured part (runs under valgrind): the checkpoint of ``phase``, in reduce."""
    from statestream._registry import open_provider

    workdir = tempfile.mkdtemp()
    provider: Any = open_provider(
        "sqlite", {"path": f"{workdir}/state.db", "synchronous": "normal"}
    )
    backend = provider._open_backend("count-0")
    backend.load_txids()  # opens and creates the file, outside the measure

    def checkpoint(txid: int, delta: list[tuple[bytes, bytes | None]]) -> None:
        if op == "direct":
            backend.commit_direct(delta)
        else:
            backend.write_prepared(txid, delta)
            backend.apply_prepared(txid)

    if phase == "update":
        checkpoint(0, _delta(rows, 0))
    delta = _delta(rows, 1)
    txid = 1 if phase == "update" else 0
    # A two-item list without an initial value: reduce calls the lambda once.
    functools.reduce(lambda _, __: checkpoint(txid, delta), [0, 0])
    stored = dict(backend.scan())
    assert len(stored) == rows and stored[delta[0][0]] == delta[0][1], "not what was written"
    provider.close()


def count(rows: int, op: str, phase: str) -> int:
    return callgrind_count(__file__, "--one", phase, "--rows", str(rows), "--op", op)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--op", choices=("prepared", "direct"), default="prepared")
    ap.add_argument("--one", choices=PHASES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one_run(args.rows, args.op, args.one)
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    print(f"command: python bench/bench_sqlite_rows.py --rows {args.rows} --op {args.op}\n")
    print("| checkpoint | rows | instructions | per row |")
    print("|---|---:|---:|---:|")
    for phase in PHASES:
        total = count(args.rows, args.op, phase)
        print(f"| {args.op} {phase} | {args.rows:,} | {total:,} | {total / args.rows:,.0f} |")


if __name__ == "__main__":
    main()
