"""What the executor tests share: a fake collector that records every call, a real
TopologyContext with a memory-provider state, checkpoint and data tuples, recording bolts."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from statestream import (
    BasicBolt,
    Bolt,
    FailedException,
    StatefulBolt,
    TopologyContext,
)
from statestream._checkpoint import Action
from statestream._executors import CheckpointTupleForwarder, StatefulBoltExecutor
from statestream._stateful import CHECKPOINT_FIELDS, CHECKPOINT_STREAM
from statestream._tuple import Fields, Origin, Tuple
from statestream_providers.memory import MemoryStateProvider

PREPARE, COMMIT, ROLLBACK, INITSTATE = (
    Action.PREPARE,
    Action.COMMIT,
    Action.ROLLBACK,
    Action.INITSTATE,
)

UP = "up"
UP_TASKS = [1, 2]  # global task ids of the upstream component
SELF_TASK = 10


# -- fakes -------------------------------------------------------------------


def _anchors(anchors: Tuple | Sequence[Tuple] | None) -> list[Tuple]:
    if anchors is None:
        return []
    if isinstance(anchors, Tuple):
        return [anchors]
    return list(anchors)


def _by_root(acks: Iterable[tuple[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for root, value in acks:
        out[root] = out.get(root, 0) ^ value
    return out


class FakeCollector:
    """An ExecutorCollector that records every call.

    While holding (after ``hold_acks``) an ack goes into the buffer that
    ``take_acks`` hands over, as a runtime does; before that, acks are only
    recorded. The acks taken and sent are recorded XOR-combined per root,
    as the acker adds them up.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.holding = False
        self.buffer: list[tuple[int, int]] = []

    # OutputCollector
    def emit(
        self,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        self.calls.append(("emit", list(values), _anchors(anchors), stream))

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        self.calls.append(("emit_direct", task, list(values), _anchors(anchors), stream))

    def ack(self, tuple: Tuple) -> None:
        self.calls.append(("ack", tuple))
        if self.holding and tuple.root:
            self.buffer.append((tuple.root, tuple.edge))

    def fail(self, tuple: Tuple) -> None:
        self.calls.append(("fail", tuple))

    def reset_timeout(self, tuple: Tuple) -> None:
        self.calls.append(("reset_timeout", tuple))

    def report_error(self, error: BaseException) -> None:
        self.calls.append(("report_error", error))

    # the acker transport
    def hold_acks(self) -> None:
        self.calls.append(("hold_acks",))
        self.holding = True

    def take_acks(self) -> list[tuple[int, int]]:
        taken, self.buffer = self.buffer, []
        self.calls.append(("take_acks", _by_root(taken)))
        return taken

    def send_acks(self, acks: Iterable[tuple[int, int]]) -> None:
        self.calls.append(("send_acks", _by_root(acks)))

    def fail_roots(self, roots: Iterable[int]) -> None:
        self.calls.append(("fail_roots", set(roots)))

    # views
    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == kind]

    def acked(self) -> list[Tuple]:
        return [c[1] for c in self.of("ack")]

    def failed(self) -> list[Tuple]:
        return [c[1] for c in self.of("fail")]

    def checkpoint_emits(self) -> list[tuple[Any, ...]]:
        return [c for c in self.of("emit") if c[3] == CHECKPOINT_STREAM]

    def sent(self) -> dict[int, int]:
        """Every XOR value sent to the ackers, combined."""
        out: dict[int, int] = {}
        for _, acks in self.of("send_acks"):
            for root, value in acks.items():
                out[root] = out.get(root, 0) ^ value
        return out

    def clear(self) -> None:
        self.calls.clear()


def new_state() -> Any:
    return MemoryStateProvider.from_config({"name": uuid.uuid4().hex}).get_state("count-0")


def make_context(
    upstream: int = 2, exactly_once: bool = False, state: Any = None
) -> TopologyContext:
    opened = state if state is not None else new_state()
    return TopologyContext(
        "topo",
        "count",
        0,
        SELF_TASK,
        {UP: UP_TASKS[:upstream], "count": [SELF_TASK]},
        {UP: {"default": Fields("word")}},
        state_opener=lambda namespace: opened,
        sources=[(UP, CHECKPOINT_STREAM), (UP, "default")],
        exactly_once=exactly_once,
    )


_roots = iter(range(1000, 1_000_000))


def ckpt(task: int, action: Action, txid: int) -> Tuple:
    """A checkpoint tuple from upstream task ``task`` (global id), in its own tree."""
    origin = Origin(UP, task, UP_TASKS.index(task), CHECKPOINT_STREAM, CHECKPOINT_FIELDS)
    root = next(_roots)
    return Tuple([txid, action.value], origin, None, SELF_TASK, root, root * 3 + 1)


def data(word: str, root: int, edge: int, task: int = 1) -> Tuple:
    origin = Origin(UP, task, UP_TASKS.index(task), "default", Fields("word"))
    return Tuple([word], origin, None, SELF_TASK, root, edge)


class RecordingBolt(Bolt):
    """A rich bolt that records what it executes and acks it."""

    def __init__(self) -> None:
        self.executed: list[Tuple] = []
        self.prepared = False

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.prepared = True

    def execute(self, tuple: Tuple) -> None:
        self.executed.append(tuple)
        self.collector.ack(tuple)


class Recorder(StatefulBolt):
    """A stateful bolt that records its hooks and executes; acks each input."""

    def __init__(self, raise_in: str | None = None) -> None:
        self.calls: list[str] = []
        self.executed: list[Tuple] = []
        self.raise_in = raise_in
        self.state: Any = None

    def _hook(self, call: str) -> None:
        self.calls.append(call)
        if self.raise_in is not None and call.startswith(self.raise_in):
            raise RuntimeError(f"boom in {call}")

    def init_state(self, state: Any) -> None:
        self.state = state
        self._hook("init_state")

    def pre_prepare(self, txid: int) -> None:
        self._hook(f"pre_prepare {txid}")

    def pre_commit(self, txid: int) -> None:
        self._hook(f"pre_commit {txid}")

    def pre_rollback(self) -> None:
        self._hook("pre_rollback")

    def execute(self, tuple: Tuple) -> None:
        self.executed.append(tuple)
        self.calls.append(f"execute {tuple.values[0]}")
        if self.state is not None:
            self.state.put(tuple.values[0], 1)
        self.collector.ack(tuple)


def round_of(executor: CheckpointTupleForwarder, action: Action, txid: int) -> list[Tuple]:
    """Deliver ``(action, txid)`` from every upstream task; the round's tuples."""
    tuples = [ckpt(task, action, txid) for task in sorted(t for _, t in executor.barrier.upstream)]
    for t in tuples:
        executor.execute(t)
    return tuples


# -- BasicBoltExecutor -------------------------------------------------------


class Upper(BasicBolt):
    def __init__(self, behaviour: str = "ok") -> None:
        self.behaviour = behaviour

    def execute(self, tuple: Tuple, collector: Any) -> None:
        collector.emit([tuple.values[0].upper()])
        collector.emit([len(tuple.values[0])], stream="lengths")
        if self.behaviour == "failed":
            raise FailedException("replay me")
        if self.behaviour == "error":
            raise RuntimeError("bug")


def stateful(
    upstream: int = 2, exactly_once: bool = False, raise_in: str | None = None
) -> tuple[StatefulBoltExecutor, Recorder, FakeCollector, Any]:
    bolt = Recorder(raise_in)
    executor = StatefulBoltExecutor(bolt)
    collector = FakeCollector()
    state = new_state()
    executor.prepare({}, make_context(upstream, exactly_once, state), collector)
    return executor, bolt, collector, state
