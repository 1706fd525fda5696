"""The frame and pipe parts of bench_workers.py (its docstring says what they measure):
word-count tuples moved between workers in one process (``frame``) and through a real
pipe pair between two forked processes (``pipe``).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Frames worker 1 (tasks 1, 3, 5 of the example: the spout, split 3, count 5) sends worker
# 0 (tasks 0, 2, 4), in columns as RemoteInbox builds them: the lines for split task 2 (one
# group) and the words of split 3 for count task 4 (one group), plus acker messages for
# the acker in worker 0. "words" and "lines" isolate a kind; "round" is the frame of the
# earlier bench (64-line spout batches, one step per round); "w1->w0" and "w0->w1" have the
# sizes of the frames of a round of the example on 2 workers at 8a04c23 (the wall part's
# tuples and acker messages sent per round on 20,000 lines; 341 and 319 + 180 on 200,000:
# worker 1 sends lines and words, worker 0 words and the acks of its bolts to the spout's
# acker).
FRAMES = {
    "words": (0, 320, 0),  # (lines, words, acker messages)
    "lines": (32, 0, 0),
    "round": (32, 160, 160),
    "w1->w0": (56, 262, 0),
    "w0->w1": (0, 294, 166),
}


WORDS_PER_ROOT = 5


def root_id(rng: random.Random) -> int:
    """A root id as LocalRuntime.next_root draws one: 62 random bits and bit 62."""
    return rng.getrandbits(62) | 1 << 62


def frame_setup(kind: str) -> dict[str, Any]:
    """Links of worker 1 (sender) and worker 0 (receiver) of the example, and the Tuples
    and acker messages of a frame of ``kind`` (values and ids as a real run carries them)."""
    from types import SimpleNamespace

    import wordcount
    from corpus import corpus_path

    from statestream._tuple import Tuple
    from statestream.runtime.local import LocalRuntime
    from statestream.runtime.plan import RuntimePlan, as_config
    from statestream.runtime.workers import Link
    from statestream.runtime.workers.worker import _Status

    topo = wordcount.topology()
    # One acker (task 0 of the acker, in worker 0): the receiver takes the acker messages.
    conf = as_config(
        {"topology.workers": 2, "topology.state.provider": "memory"},
        topology_prefixes=(topo.name,),
    )
    plan = RuntimePlan(topo, conf)
    split, count = plan.component_tasks["split"], plan.component_tasks["count"]
    spout_task = plan.component_tasks["sentences"][0]
    sender, receiver = Link(1, 2, plan), Link(0, 2, plan)
    owned = [t for tids in plan.component_tasks.values() for t in tids if t % 2 == 0]
    # Worker 0's runtime as Worker builds it (not opened): its inboxes and acker ledger.
    receiver.rt = LocalRuntime(topo, conf, None, owned=owned, link=receiver)
    to_split = next(t for t in split if t % 2 == 0)
    to_count = next(t for t in count if t % 2 == 0)
    from_split = next(t for t in split if t % 2 == 1)
    inboxes = [receiver.rt.bolt_by_id[t].inbox for t in (to_split, to_count)]
    sender.rt = SimpleNamespace(fail_causes={}, task_names={})
    n_lines, n_words, n_acks = FRAMES[kind]
    rng = random.Random(15)
    text = corpus_path(20_000).read_text().splitlines()
    offsets = [0]
    for line in text:
        offsets.append(offsets[-1] + len(line) + 1)
    line_origin = sender.origins[(spout_task, "default")]
    word_origin = sender.origins[(from_split, "default")]
    lines = [
        Tuple(
            [offsets[i], text[i]], line_origin, None, to_split,
            root_id(rng), rng.getrandbits(62),
        )
        for i in range(n_lines)
    ]  # fmt: skip
    all_words = [w for line in text[1000:1200] for w in line.split()]
    # The words of one line that go to one count task follow each other and
    # share the line's root: about half of a line's 10 words, on 2 count tasks.
    word_roots = [root_id(rng) for _ in range(n_words // WORDS_PER_ROOT + 1)]
    words = [
        Tuple(
            [all_words[i % len(all_words)]], word_origin, None, to_count,
            word_roots[i // WORDS_PER_ROOT], rng.getrandbits(62),
        )
        for i in range(n_words)
    ]  # fmt: skip
    # As Acking.ack appends an ack for another worker's acker: root, then XOR.
    acks = [w for _ in range(n_acks) for w in (root_id(rng), rng.getrandbits(62))]
    ack_list = sender.ack_pair_lists()[0]
    q_split, q_count = sender.queue(to_split, False), sender.queue(to_count, False)
    status = _Status(busy=True, sent=True, emitted=64, lengths={3: 12, 5: 40}).wire()
    for t in lines:
        q_split.add_drawn(t.values, t.origin, t.root)
    for t in words:
        q_count.add_drawn(t.values, t.origin, t.root)
    ack_list.extend(acks)
    box = sender.out[0]
    # The wire form, to refill an outbox without RemoteInbox.append.
    wire_tuples, wire_acks = list(box.tuples), list(box.pairs)
    frame = sender.encode(0, status)
    sender.next_round()
    return dict(
        sender=sender,
        receiver=receiver,
        box=box,
        lines=lines,
        words=words,
        acks=acks,
        ack_list=ack_list,
        q_split=q_split,
        q_count=q_count,
        status=status,
        wire_tuples=wire_tuples,
        wire_acks=wire_acks,
        frame=frame,
        inboxes=inboxes,
        n=n_lines + n_words,
        n_acks=n_acks,
        groups=len(wire_tuples),
    )


def frame_ops(f: dict[str, Any]) -> dict[str, Any]:
    """One repetition of each measured operation on the frame ``f`` (see frame_setup)."""
    sender, receiver, box = f["sender"], f["receiver"], f["box"]
    lines, words, acks, ack_list = f["lines"], f["words"], f["acks"], f["ack_list"]
    q_split, q_count, status = f["q_split"], f["q_count"], f["status"]
    wire_tuples, wire_acks, frame = f["wire_tuples"], f["wire_acks"], f["frame"]
    inboxes = f["inboxes"]
    _, rest = receiver.decode(frame)

    def append() -> None:  # routes hand the frame's tuples (and the acker its messages)
        # as a spout's and an anchored emit's routes do: an edge drawn by the queue
        for t in lines:
            q_split.add_drawn(t.values, t.origin, t.root)
        for t in words:
            q_count.add_drawn(t.values, t.origin, t.root)
        for m in acks:
            ack_list.append(m)
        sender.clear()

    def refill() -> None:  # the baseline encode is measured against
        box.tuples.extend(wire_tuples)
        box.pairs.extend(wire_acks)
        box.clear()

    def encode() -> None:
        box.tuples.extend(wire_tuples)
        box.pairs.extend(wire_acks)
        sender.encode(0, status)

    def decode() -> None:
        receiver.decode(frame)

    def deliver() -> None:
        receiver.deliver(rest)
        for q in inboxes:
            q.clear()
        receiver.clear()  # what the acker sends back

    def decode_deliver() -> None:
        receiver.deliver(receiver.decode(frame)[1])
        for q in inboxes:
            q.clear()
        receiver.clear()

    return {
        "append": append,
        "refill": refill,
        "encode": encode,
        "decode": decode,
        "deliver": deliver,
        "decode+deliver": decode_deliver,
    }


def _wall_per_rep(fn: Any, reps: int, repeat: int = 7) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def frames_note() -> str:
    kinds = "; ".join(
        f"{k}: {a} lines, {b} words, {c} acker messages" for k, (a, b, c) in FRAMES.items()
    )
    return (
        f"frames ({kinds}; acker messages count in the per-frame figures, not in the "
        f"tuples); encode = Link.encode minus refilling the outbox (list.extend + clear); "
        f"decode+deliver into worker 0's LocalRuntime, built as Worker builds it but not "
        f"opened (its bolts' inbox deques, its acker ledger)"
    )


def part_frame(args: argparse.Namespace, cmd: str) -> None:
    import gc

    print(f"command: {cmd}\n")
    print(
        "Microseconds per tuple of moving word-count tuples between workers, in one process "
        f"(best of 7 x 2,000 repetitions, garbage collector off); {frames_note()}:\n"
    )
    print(
        "| frame | tuples | groups | acker msgs | bytes | append us/tuple | encode us/tuple "
        "| decode us/tuple | deliver us/tuple | decode+deliver us/tuple | total us/tuple "
        "| total us/frame |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    gc.disable()
    for kind in FRAMES:
        f = frame_setup(kind)
        ops = frame_ops(f)
        us = {k: _wall_per_rep(fn, 2000) * 1e6 for k, fn in ops.items()}
        enc = us["encode"] - us["refill"]
        n = f["n"]
        total = us["append"] + enc + us["decode+deliver"]
        print(
            f"| {kind} | {n} | {f['groups']} | {f['n_acks']} | {len(f['frame']):,} "
            f"| {us['append'] / n:.3f} | {enc / n:.3f} | {us['decode'] / n:.3f} "
            f"| {us['deliver'] / n:.3f} | {us['decode+deliver'] / n:.3f} | {total / n:.3f} "
            f"| {total:.1f} |"
        )
    gc.enable()
    print()


def part_pipe(args: argparse.Namespace, cmd: str) -> None:
    """Rounds between two forked processes over a real pipe pair, as Worker._exchange
    does them: encode frame r, Mesh.exchange (write it; read the peer's frame r-1),
    decode and deliver that."""
    from statestream.runtime.workers import Mesh
    from statestream.runtime.workers.worker import _Status

    print(f"command: {cmd}\n")
    print(
        "Rounds through a real pipe pair: two forked processes, each with a Mesh; a round = "
        "both encode frame r, Mesh.exchange(frames, need) writes it and reads the peer's "
        "frame r-1 (lag 1, as Worker._exchange), both decode and deliver it. 'empty' frames "
        "carry only the status. Median of 5 trials of 1,000 rounds; the machine's load "
        "average is shown, since a round waits for the peer process to be scheduled:\n"
    )
    print(
        "| frame | tuples/frame | bytes/frame | load | us/round | us/tuple (one way) | rounds/s |"
    )
    print("|---|---:|---:|---|---:|---:|---:|")
    rounds = 1000
    for kind in ("empty", *FRAMES):
        f = frame_setup("round" if kind == "empty" else kind)
        n = 0 if kind == "empty" else f["n"]
        sender, receiver, box = f["sender"], f["receiver"], f["box"]
        wire_tuples, wire_acks = f["wire_tuples"], f["wire_acks"]
        empty = _Status().wire()
        inboxes = f["inboxes"]
        trials = []
        load = Path("/proc/loadavg").read_text().split()[0]
        frame_len = 0
        for _ in range(5):
            a_to_b, b_to_a = os.pipe(), os.pipe()
            pid = os.fork()
            me = 1 if pid == 0 else 0
            if me == 1:
                mesh = Mesh(1, {0: b_to_a[1]}, {0: a_to_b[0]})
                os.close(a_to_b[1])
                os.close(b_to_a[0])
            else:
                mesh = Mesh(0, {1: a_to_b[1]}, {1: b_to_a[0]})
                os.close(a_to_b[0])
                os.close(b_to_a[1])
            peer = 1 - me

            def deliver(got: dict[int, bytes], peer: int = peer, receiver: Any = receiver) -> None:
                _, rest = receiver.decode(got[peer])
                receiver.deliver(rest)
                for q in inboxes:  # noqa: B023 - called within this iteration only
                    q.clear()
                receiver.clear()

            t0 = time.perf_counter()
            for r in range(rounds):
                if kind == "empty":
                    data = sender.encode(0, empty)
                else:
                    box.tuples.extend(wire_tuples)
                    box.pairs.extend(wire_acks)
                    data = sender.encode(0, f["status"])
                frame_len = len(data)
                got = mesh.exchange({peer: data}, r > 0)
                if r > 0:
                    deliver(got)
            dt = time.perf_counter() - t0
            deliver(mesh.exchange({}, True))  # the peer's last frame; flushes ours
            if me == 1:
                os._exit(0)
            os.waitpid(pid, 0)
            for fd in (*mesh.writers.values(), *mesh.readers.values()):
                os.close(fd)
            trials.append(dt / rounds)
        per_round = statistics.median(trials) * 1e6
        per_tuple = f"{per_round / n:.2f}" if n else "-"
        print(
            f"| {kind} | {n} | {frame_len:,} | {load} | {per_round:.1f} | {per_tuple} "
            f"| {1e6 / per_round:,.0f} |"
        )
    print()


CG_OPS = ("append", "refill", "encode", "decode", "deliver", "decode+deliver")
CG_REPS = (30, 90)
