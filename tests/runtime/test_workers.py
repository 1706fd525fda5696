"""What ``topology.workers`` adds beyond the behaviour tests every runtime passes
(those run on two workers through the ``runner`` fixture): backpressure across
processes, values the fast codec cannot carry, errors naming the value that
cannot cross, the progress rows and the round-robin placement.

Task ids follow the topological order, and task ``t`` runs in worker ``t % 2``:
in these topologies the spout (task 0) and the first bolt (task 1) are in
different workers.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from runtime_harness import Records, records
from word_bolts import Count, Split

from statestream import (
    Bolt,
    OutputCollector,
    OutputFieldsDeclarer,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from statestream._errors import ConfigError, UnpicklableTupleError
from statestream._run import make_runtime
from statestream._tuple import Fields, Origin
from statestream.runtime.local import FLAT, LocalRuntime, RemoteInbox, pack_ids, unpack_ids
from statestream.runtime.plan import RuntimePlan, as_config
from statestream.runtime.workers import Link, Mesh, WorkerSupervisor, worker_of_task
from statestream.runtime.workers.link import _JOINED, LAG, _DelayedControl, _wire_group
from statestream.runtime.workers.mesh import _PIPE_SIZE, pipe
from statestream.runtime.workers.worker import _Status
from statestream.testing import ListSpout


class FanOut(Bolt):
    """Emits ``k`` tuples per input (anchored), appending ("emit", value) for each to a
    shared record file."""

    def __init__(self, log: str, k: int) -> None:
        self.log = Records(log)
        self.k = k

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)

    def execute(self, tup: Tuple) -> None:
        for j in range(self.k):
            value = tup[0] * self.k + j
            self.log.append(("emit", value))
            self.collector.emit([value], anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])


class SlowBolt(Bolt):
    """Takes ``delay`` seconds of real time per tuple and appends ("done", value)."""

    def __init__(self, log: str, delay: float) -> None:
        self.log = Records(log)
        self.delay = delay

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)

    def execute(self, tup: Tuple) -> None:
        time.sleep(self.delay)
        self.log.append(("done", tup[0]))
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


def _supervisor(topology: Any, tmp_path: Path, **extra: Any) -> WorkerSupervisor:
    conf = {
        "topology.workers": 2,
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        **extra,
    }
    return WorkerSupervisor(topology, conf)


@pytest.mark.parametrize(("capacity", "slack"), [(40, 0), (40, 200), (100_000, 4096)])
def test_a_slow_bolt_in_one_worker_holds_back_its_feeder_in_the_other(
    tmp_path: Path, capacity: int, slack: int
) -> None:
    # src (task 0, worker 0) -> fan (task 1, worker 1, 20 tuples per input)
    # -> slow (task 2, worker 0). A round hands fan up to 64 inputs, 1,280
    # tuples for slow; the queue to slow in the other worker must hold fan back.
    n, k = 300, 20
    b = TopologyBuilder("backpressure")
    b.set_spout("src", ListSpout(list(range(n))))
    b.set_bolt("fan", FanOut("log", k)).shuffle_grouping("src")
    b.set_bolt("slow", SlowBolt("log", 0.00005)).shuffle_grouping("fan")
    topo = b.build()
    sup = _supervisor(
        topo,
        tmp_path,
        **{
            "topology.executor.receive.buffer.size": capacity,
            "topology.transfer.buffer.size": slack,
        },
    )
    tasks = sup.component_tasks
    assert worker_of_task(tasks["fan"][0], 2) != worker_of_task(tasks["slow"][0], 2)
    result = sup.run(until_idle=True)
    assert result.reason == "idle"
    assert result.components["slow"].executed == n * k
    log = records("log")
    assert sorted(v for kind, v in log if kind == "done") == list(range(n * k))
    # The record file orders both processes' appends: at every point, how far
    # fan ran ahead of slow.
    ahead = worst = 0
    for kind, _ in log:
        ahead += 1 if kind == "emit" else -1
        worst = max(worst, ahead)
    if capacity < 1000:
        # Bounded by the capacity and the tuples allowed in flight, twice over
        # (what the last status did not show yet), plus the tuples of one
        # input (fan checks the queue between inputs).
        assert worst <= 2 * (capacity + slack) + k, worst
        if slack:
            assert worst > 2 * capacity + k, "the tuples in flight were not allowed"
    else:
        assert worst > 10 * 40, "without backpressure fan runs far ahead: the test can fail"


@dataclass(frozen=True)
class Point:
    x: int
    y: int


class Sink(Bolt):
    def __init__(self, name: str) -> None:
        self.out = Records(name)

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)

    def execute(self, tup: Tuple) -> None:
        self.out.append(tup[0])
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


class Where(Bolt):
    """Records (source task, this task) for every tuple."""

    def __init__(self, name: str) -> None:
        self.out = Records(name)

    def execute(self, tup: Tuple) -> None:
        self.out.append((tup.source_task, self.context.task_id))
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


@pytest.mark.parametrize(
    ("spouts", "sinks", "stays_local"),
    [(2, 2, True), (2, 4, True), (1, 2, False), (2, 3, False), (3, 2, False)],
)
def test_shuffle_keeps_tuples_in_their_worker_when_both_sides_spread_evenly(
    tmp_path: Path, spouts: int, sinks: int, stays_local: bool
) -> None:
    n = 200
    b = TopologyBuilder("local_shuffle")
    b.set_spout("src", ListSpout(list(range(n))), spouts)
    b.set_bolt("sink", Where("where"), sinks).shuffle_grouping("src")
    topo = b.build()
    sup = _supervisor(topo, tmp_path)
    result = sup.run(until_idle=True)
    assert result.reason == "idle" and result.errors == []
    got = records("where")
    assert len(got) == spouts * n  # every spout task emits the whole list
    crossed = sum(worker_of_task(s, 2) != worker_of_task(t, 2) for s, t in got)
    per_sink = [sum(t == tid for _, t in got) for tid in sup.component_tasks["sink"]]
    if stays_local:
        assert crossed == 0
        # Still an equal share for every sink task.
        assert max(per_sink) - min(per_sink) <= spouts
    else:
        assert crossed > 0
        assert all(per_sink)


def test_shuffle_targets_table() -> None:
    plan_free = [
        # (sources, targets, worker) -> what a shuffle from that worker spreads over
        ((0, 1), (2, 3), 0, [2]),
        ((0, 1), (2, 3), 1, [3]),
        ((0, 1), (2, 3, 4, 5), 1, [3, 5]),
        ((0,), (1, 2), 0, [1, 2]),  # one emitter: over every target
        ((0, 1), (2, 3, 4), 0, [2, 3, 4]),  # uneven targets
        ((0, 1, 2), (3, 4), 1, [3, 4]),  # uneven emitters
    ]
    for sources, targets, index, expected in plan_free:
        link = Link.__new__(Link)
        link.index, link.workers = index, 2
        assert link.shuffle_targets(sources, targets) == expected, (sources, targets, index)


def test_ids_cross_as_64_bit_words_or_as_ints_when_one_does_not_fit() -> None:
    table: list[tuple[list[int], bool]] = [
        ([], True),
        ([1, 2], True),
        ([(1 << 64) - 1, 1 << 62, 0, 7], True),
        ([1 << 64, 5], False),
        ([-1, 3], False),
    ]
    for ids, as_words in table:
        packed = pack_ids(ids)
        assert isinstance(packed, bytes) == as_words, ids
        assert unpack_ids(packed) == ids


def test_a_one_field_group_carries_bare_values_and_a_wider_one_lists() -> None:
    out: list[Any] = []
    q = RemoteInbox(out, 7, False)
    one = Origin("a", 1, 0, "default", Fields("w"))
    two = Origin("b", 2, 0, "pairs", Fields("w", "n"))
    q.add(["x"], one, 11, 12)
    q.add(("y",), one, 11, 14)
    q.add(["v"], one, 13, 15)
    q.add(("z", 1), two, 15, 16)
    q.add(["u", 2], two, 17, 18)
    assert out == [
        # edges, then roots as runs: root 11 from tuple 0 on, root 13 from tuple 2
        (7, FLAT, 1, "default", ["x", "y", "v"], [12, 14, 15], [11, 0, 13, 2], None),
        (7, 0, 2, "pairs", [["z", 1], ["u", 2]], [16, 18], [15, 0, 17, 1], None),
    ]


def test_the_mesh_reads_frames_whole_and_in_order_however_the_pipe_cuts_them() -> None:
    # Two meshes over real pipes: worker 0 sends frames of several sizes (empty,
    # small, larger than the pipe and than a 64 KiB read) to worker 1, which reads
    # them one per exchange in a thread, whether a read holds part of a frame,
    # one, or more than one.
    r01, w01 = os.pipe()
    r10, w10 = os.pipe()
    a, b = Mesh(0, {1: w01}, {1: r10}), Mesh(1, {0: w10}, {0: r01})
    frames = [b"", b"x" * 10, os.urandom(200_000), b"tail", os.urandom(70_000), b"y"]
    got: list[bytes] = []

    def read() -> None:
        for _ in frames:
            got.append(bytes(b.exchange({}, need=True)[0]))

    reader = threading.Thread(target=read)
    try:
        for f in frames[:4]:  # some frames wait in the pipe before the reader starts
            a.exchange({1: f}, need=False)
        reader.start()
        for f in frames[4:]:
            a.exchange({1: f}, need=False)
        deadline = time.monotonic() + 10
        while any(a.wbuf.values()) and time.monotonic() < deadline:
            a.exchange({}, need=False)  # what the pipe did not take yet
            time.sleep(0.001)
        reader.join(10)
        assert not reader.is_alive()
        assert got == frames
    finally:
        for fd in (r01, w01, r10, w10):
            with contextlib.suppress(OSError):
                os.close(fd)


def _worker_runtimes(topology: Any, tmp_path: Path) -> list[LocalRuntime]:
    """Both workers' runtimes as Worker builds them (not opened), each with its Link."""
    conf = as_config(
        {
            "topology.workers": 2,
            "topology.acker.executors": 2,  # one per worker, as the supervisor sets it
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        },
        topology_prefixes=(topology.name,),
    )
    plan = RuntimePlan(topology, conf)
    rts = []
    for index in range(2):
        link = Link(index, 2, plan)
        owned = [t for ts in plan.component_tasks.values() for t in ts if t % 2 == index]
        link.rt = LocalRuntime(topology, conf, None, owned=owned, link=link)
        rts.append(link.rt)
    return rts


def test_a_delayed_control_lane_hands_over_when_a_frame_of_the_same_round_arrives() -> None:
    control: deque[Any] = deque()
    lane = _DelayedControl(control)
    lane.append("prepare")  # round r
    assert lane.sent()
    for _ in range(LAG):  # the ends of rounds r .. r+LAG-1
        lane.next_round()
        assert not control and not lane.sent()
    lane.next_round()  # the end of round r+LAG: a frame of round r is delivered now
    assert list(control) == ["prepare"]
    lane.append("commit")
    lane.clear()  # a rewind drops it, as it drops the frames in flight
    for _ in range(LAG + 1):
        lane.next_round()
    assert list(control) == ["prepare"]


def test_the_checkpoint_spouts_hop_is_delayed_in_its_worker_and_no_other_hop_is(
    tmp_path: Path,
) -> None:
    b = TopologyBuilder("delayed")
    b.set_spout("src", ListSpout(["a b", "c d"], fields=["line"]), 2)
    b.set_bolt("fwd", Split(), 2).shuffle_grouping("src")
    b.set_bolt("count", Count(), 2).fields_grouping("fwd", ["word"])
    cp_workers = 0
    for rt in _worker_runtimes(b.build(), tmp_path):
        queues = [
            getattr(put, "__self__", None)  # a route holds each queue's bound append
            for task in rt.spouts + rt.bolts
            for stream in task.streams.values()
            for route in stream.routes
            for put in route.puts
        ]
        delayed = [q for q in queues if isinstance(q, _DelayedControl)]
        cp = [s for s in rt.spouts if s.system]
        if cp:  # the checkpoint spout's worker: its hop to each local first bolt
            cp_workers += 1
            local_fwd = [t for t in rt.bolts if t.component == "fwd"]
            assert local_fwd and [d.control for d in delayed] == [t.control for t in local_fwd]
        else:
            assert delayed == []
    assert cp_workers == 1


def test_acks_cross_as_root_and_xor_words_and_complete_the_tree(tmp_path: Path) -> None:
    b = TopologyBuilder("acks")
    b.set_spout("src", ListSpout(list(range(10))), 2)
    b.set_bolt("fwd", Where("fwd"), 2).shuffle_grouping("src")
    w0, w1 = _worker_runtimes(b.build(), tmp_path)
    spout = w0.spouts[0]
    assert w0.acking is not None and w1.acking is not None
    # A tree of worker 0's spout, acked by bolts of worker 1 (acker 0 is worker 0's).
    roots = [(1 << 63) + 2 * k for k in range(3)]  # acker root % 2 == 0
    edges = [0x1234_5678_9ABC_DEF0 + k for k in range(3)]
    for root, edge in zip(roots, edges, strict=True):
        w0.acking.init(root, spout.task_id, edge)
        w1.acking.ack(root, edge)
    assert w1.link.out[0].pairs == [w for pair in zip(roots, edges, strict=True) for w in pair]
    frame = w1.link.encode(0, _Status().wire())
    assert len(frame) < 200  # 16 bytes per ack, not a record each
    _, rest = w0.link.decode(frame)
    w0.link.deliver(rest)
    assert list(spout.completions) == [(root, True) for root in roots]


def _split_to_count(tmp_path: Path) -> tuple[LocalRuntime, LocalRuntime, Any, Any]:
    """The word count's two worker runtimes, worker 1's split task and worker 0's
    count task: a route that crosses from worker 1 to worker 0."""
    b = TopologyBuilder("group")
    b.set_spout("src", ListSpout(["a b"], fields=["line"]), 2)
    b.set_bolt("split", Split(), 2).shuffle_grouping("src")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    w0, w1 = _worker_runtimes(b.build(), tmp_path)
    count = next(t for t in w0.bolts if t.component == "count")
    split = next(t for t in w1.bolts if t.component == "split")
    return w0, w1, split, count


@pytest.mark.parametrize(
    ("words", "joined"),
    [
        (["x", "y", "z", "x", "w"], True),
        (["x", "", "é€", "", "w"], True),
        (["x", "a\x00b", "z", "x", "w"], False),  # holds the separator: a list
        (["x", 7, "z", None, "w"], False),  # not all strs
    ],
)
def test_a_group_arrives_as_the_tuples_that_were_sent(
    tmp_path: Path, words: list[Any], joined: bool
) -> None:
    w0, w1, split, count = _split_to_count(tmp_path)
    ids = [(5, 50), (5, 51), (9, 52), (0, 0), (5, 53)]
    sent = [(w, r, e) for w, (r, e) in zip(words, ids, strict=True)]
    q = w1.link.queue(count.task_id, False)
    for word, root, edge in sent:
        q.add([word], split.default_stream.origin, root, edge)
    (group,) = w1.link.out[0].tuples
    assert bool(_wire_group(*group)[1] & _JOINED) == joined
    _, rest = w0.link.decode(w1.link.encode(0, _Status().wire()))
    w0.link.deliver(rest)
    got = [(t[0], t.root, t.edge, t.owner, t.origin.task) for t in count.inbox]
    # an untracked tuple (root 0) belongs to no task
    owner = [count.task_id, count.task_id, count.task_id, -1, count.task_id]
    assert got == [(w, r, e, o, split.task_id) for (w, r, e), o in zip(sent, owner, strict=True)]


@pytest.mark.parametrize(("ackers", "mine"), [(2, [0]), (2, [1]), (3, [1]), (5, [0, 3]), (4, [3])])
def test_a_workers_roots_go_to_its_own_ackers(ackers: int, mine: list[int]) -> None:
    b = TopologyBuilder("roots")
    b.set_spout("src", ListSpout([1]))
    b.set_bolt("sink", Where("roots"), 1).shuffle_grouping("src")
    rt = LocalRuntime(b.build(), {"topology.acker.executors": ackers})
    rt.use_local_roots(mine)
    # the generator's ids, then the largest and the smallest it can give
    edges = iter([*(rt.next_edge() for _ in range(300)), (1 << 62) - 1, 1])
    rt.randbits = lambda bits: next(edges)
    roots = [rt.draw_root() for _ in range(302)]
    assert all(r % ackers in mine and 1 << 62 <= r < 1 << 63 for r in roots), roots[-2:]
    assert len(set(roots)) == len(roots)
    if len(mine) > 1:
        assert {r % ackers for r in roots} == set(mine)


@pytest.mark.parametrize(
    ("counts", "generation"),
    [
        ((60_000, 3, 2), 0),  # the young generation only
        ((60_000, 11, 2), 1),  # the middle one is over its threshold too
        ((60_000, 11, 11), 2),  # and the oldest
        ((60_000, 3, 11), 2),
    ],
)
def test_workers_collect_the_generation_the_collector_would(
    monkeypatch: pytest.MonkeyPatch, counts: tuple[int, int, int], generation: int
) -> None:
    from statestream.runtime.workers import worker as workers

    collected: list[int] = []
    monkeypatch.setattr(workers.gc, "get_count", lambda: counts)
    monkeypatch.setattr(workers.gc, "get_threshold", lambda: (200_000, 10, 10))
    monkeypatch.setattr(workers.gc, "collect", collected.append)
    workers._collect()
    assert collected == [generation]


def test_mesh_pipes_hold_a_commits_frame() -> None:
    import fcntl

    r, w = pipe()
    try:
        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        assert fcntl.fcntl(w, fcntl.F_GETPIPE_SZ) >= min(_PIPE_SIZE, limit)
    finally:
        os.close(r)
        os.close(w)


def test_values_marshal_cannot_carry_cross_workers_as_pickles(tmp_path: Path) -> None:
    items: list[Any] = [Point(1, 2), {"a", "b"}, frozenset({3}), 7, "plain", (1, [2, {"k": 3}])]
    b = TopologyBuilder("values")
    b.set_spout("src", ListSpout(items))
    b.set_bolt("sink", Sink("got")).shuffle_grouping("src")
    result = _supervisor(b.build(), tmp_path).run(until_idle=True)
    assert result.reason == "idle" and result.errors == []
    got = records("got")
    # By equality: a set's repr depends on the hash seed of the process reading it.
    assert len(got) == len(items)
    assert all(got.count(x) == 1 for x in items), got


def test_a_value_that_cannot_be_pickled_names_the_emitting_component(tmp_path: Path) -> None:
    # Not the first tuple of its stream (which every runtime checks): the link
    # finds it, and stops the run with the same error.
    b = TopologyBuilder("unpicklable")
    b.set_spout("src", ListSpout([1, lambda: 2]))
    b.set_bolt("sink", Sink("got")).shuffle_grouping("src")
    with pytest.raises(UnpicklableTupleError) as info:
        _supervisor(b.build(), tmp_path).run(until_idle=True)
    message = str(info.value)
    assert "component 'src' task 0" in message and "to sink[0] in another worker" in message
    assert "a function that cannot be pickled" in message and "topology.workers" in message


def test_progress_rows_name_each_worker_its_pid_and_its_tasks(tmp_path: Path) -> None:
    b = TopologyBuilder("rows")
    b.set_spout("src", ListSpout(list(range(50))))
    b.set_bolt("sink", Sink("got"), 3).shuffle_grouping("src")
    sup = _supervisor(b.build(), tmp_path)
    result = sup.run(until_idle=True)
    assert result.reason == "idle"
    rows = sup.worker_rows()
    assert [w.index for w in rows] == [0, 1]
    assert all(w.pid > 0 and w.restarts == 0 for w in rows)
    # Round-robin over the task ids, as Storm's default scheduler.
    assert [sorted(w.tasks) for w in rows] == [[0, 2], [1, 3]]
    assert sorted(records("got")) == list(range(50))
    assert result.counters["worker_restarts"] == 0


def test_workers_need_the_local_runner_and_a_positive_count() -> None:
    b = TopologyBuilder("conf")
    b.set_spout("src", ListSpout([1]))
    topo = b.build()
    with pytest.raises(ConfigError, match=r"spark\.executor\.instances"):
        make_runtime(
            topo, as_config({"topology.workers": 2, "topology.runner": "spark"}, ("conf",))
        )
    with pytest.raises(ConfigError, match=r"topology\.workers"):
        as_config({"topology.workers": 0}, ("conf",))
    assert isinstance(make_runtime(topo, as_config({"topology.workers": 2})), WorkerSupervisor)


def test_stateful_workers_refuse_a_store_inside_one_process(tmp_path: Path) -> None:
    from statestream import StatefulBolt

    class Counter(StatefulBolt):
        def init_state(self, state: Any) -> None:
            self.state = state

        def execute(self, tup: Tuple) -> None:
            self.collector.ack(tup)

    b = TopologyBuilder("memory")
    b.set_spout("src", ListSpout([1]))
    b.set_bolt("count", Counter()).shuffle_grouping("src")
    with pytest.raises(ConfigError, match=r"sqlite \(or redis\)"):
        WorkerSupervisor(b.build(), {"topology.workers": 2, "topology.state.provider": "memory"})


def test_transactional_topologies_stay_on_one_process() -> None:
    from statestream._run import load_topology

    topo = load_topology(str(Path(__file__).parents[2] / "examples/transactional_global_count.py"))
    with pytest.raises(ConfigError, match=r"topology\.workers: 1"):
        WorkerSupervisor(topo, {"topology.workers": 2, "topology.state.provider": "sqlite"})


def test_edges_drawn_by_the_queue_arrive_as_drawn(tmp_path: Path) -> None:
    w0, w1, split, count = _split_to_count(tmp_path)
    origin = split.default_stream.origin
    q = w1.link.queue(count.task_id, False)
    sent = [(w, r, q.add_drawn([w], origin, r)) for w, r in [("x", 5), ("y", 5), ("z", 9)]]
    q.add(["w"], origin, 9, 77)  # a given edge: a group of its own
    sent.append(("w", 9, 77))
    sent.append(("v", 9, q.add_drawn(["v"], origin, 9)))
    drawn = [e for w, _, e in sent if w != "w"]
    assert len(set(drawn)) == 4 and all(0 < e < 1 << 62 for e in drawn)
    assert [type(g[5]) for g in w1.link.out[0].tuples] == [int, list, int]
    _, rest = w0.link.decode(w1.link.encode(0, _Status().wire()))
    w0.link.deliver(rest)
    got = [(t[0], t.root, t.edge, t.owner) for t in count.inbox]
    assert got == [(w, r, e, count.task_id) for w, r, e in sent]
