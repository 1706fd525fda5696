"""What users subclass: spouts, bolts, basic bolts and stateful bolts.

Lifecycle contracts (every runtime honours them):

* A spout task: ``open`` once, then ``next_tuple``/``ack``/``fail`` from one
  thread, never concurrently, then ``close`` once. ``next_tuple`` must not
  block: emit what is ready and return. ``ack``/``fail`` are called on the
  same task that emitted the message id.
* A bolt task: ``prepare`` once, then ``execute`` per input tuple, one at a
  time, then ``cleanup`` once. Nothing is called after ``close``/``cleanup``.
* A stateful bolt: ``prepare``, then ``init_state`` with the last committed
  state before any tuple, then ``execute``; the runtime calls
  ``pre_prepare``/``pre_commit``/``pre_rollback`` around checkpoints.
* Every task gets its own copy of the component object (it is shipped as a
  pickle), so instance attributes are per task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ._clock import Clock, SystemClock
from ._errors import StateError
from ._tuple import DEFAULT_STREAM, Fields, Tuple

if TYPE_CHECKING:
    from ._state import KeyValueState

__all__ = [
    "BasicBolt",
    "BasicOutputCollector",
    "Bolt",
    "OutputCollector",
    "OutputFieldsDeclarer",
    "Spout",
    "SpoutOutputCollector",
    "StatefulBolt",
    "TopologyContext",
    "task_namespace",
]


def task_namespace(component: str, task_index: int) -> str:
    """The state namespace of one task: ``<component>-<task index>``.

    The one place this format is spelled: a bolt task's state, a spout's
    stored position, the checkpoint spout's record (``$checkpointspout-0``)
    and the exactly-once positions of every data spout are keyed by it.
    """
    return f"{component}-{task_index}"


class OutputFieldsDeclarer:
    """Collects the streams a component declares in ``declare_output_fields``."""

    def __init__(self) -> None:
        self.streams: dict[str, tuple[Fields, bool]] = {}

    def declare(self, fields: Fields | Sequence[str], direct: bool = False) -> None:
        self.declare_stream(DEFAULT_STREAM, fields, direct)

    def declare_stream(
        self, stream: str, fields: Fields | Sequence[str], direct: bool = False
    ) -> None:
        if not isinstance(stream, str) or not stream:
            raise TypeError(f"stream ids are non-empty strings, got {stream!r}")
        if stream in self.streams:
            raise ValueError(f"stream {stream!r} is declared twice")
        self.streams[stream] = (fields if isinstance(fields, Fields) else Fields(fields), direct)


class TopologyContext:
    """What a task knows about itself and the topology it runs in."""

    def __init__(
        self,
        topology_name: str,
        component_id: str,
        task_index: int,
        task_id: int,
        component_tasks: Mapping[str, Sequence[int]],
        output_fields: Mapping[str, Mapping[str, Fields]],
        state_opener: Callable[[str], KeyValueState] | None = None,
        clock: Clock | None = None,
        *,
        sources: Sequence[tuple[str, str]] = (),
        exactly_once: bool = False,
    ) -> None:
        self._state_opener = state_opener
        self._sources = tuple(sources)
        self.exactly_once = exactly_once
        """Whether the run keeps exactly-once state (``statestream.state.exactly.once``,
        ``auto`` resolved): checkpoints are taken at a consistent cut."""
        self.clock: Clock = clock or SystemClock()
        """The runtime's clock (fake in tests): use it instead of ``time``."""
        self.topology_name = topology_name
        self.component_id = component_id
        self.task_index = task_index
        self.task_id = task_id
        self._component_tasks = component_tasks
        self._output_fields = output_fields

    def component_tasks(self, component: str) -> list[int]:
        """The global task ids of ``component``, for ``emit_direct``."""
        return list(self._component_tasks[component])

    def sources(self) -> list[tuple[str, str]]:
        """The ``(component, stream)`` pairs this component subscribes to."""
        return list(self._sources)

    @property
    def parallelism(self) -> int:
        return len(self._component_tasks[self.component_id])

    def output_fields(self, component: str, stream: str = DEFAULT_STREAM) -> Fields:
        return self._output_fields[component][stream]

    def state(self, namespace: str | None = None) -> KeyValueState:
        """A key-value state from the configured provider; by default this task's
        own namespace. Spouts use it to store their position (committed with
        ``state.commit()``); stateful bolts get theirs through ``init_state``."""
        if self._state_opener is None:
            raise StateError(
                f"component {self.component_id!r}: this runtime gives no state to components"
            )
        return self._state_opener(namespace or self.state_namespace)

    @property
    def state_namespace(self) -> str:
        """The namespace of this task's state: ``<component>-<task index>``."""
        return task_namespace(self.component_id, self.task_index)


class SpoutOutputCollector(Protocol):
    """Handed to ``Spout.open``."""

    def emit(
        self, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM
    ) -> None: ...
    def emit_direct(
        self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = DEFAULT_STREAM
    ) -> None: ...
    def report_error(self, error: BaseException) -> None: ...


class OutputCollector(Protocol):
    """Handed to ``Bolt.prepare``."""

    def emit(
        self,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None: ...
    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None: ...
    def ack(self, tuple: Tuple) -> None: ...
    def fail(self, tuple: Tuple) -> None: ...
    def reset_timeout(self, tuple: Tuple) -> None: ...
    def report_error(self, error: BaseException) -> None: ...


class BasicOutputCollector(Protocol):
    """Handed to ``BasicBolt.execute``: emits are anchored to the input for you."""

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None: ...
    def emit_direct(
        self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM
    ) -> None: ...
    def report_error(self, error: BaseException) -> None: ...


class _Component:
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare the fields of each output stream. Default: no output."""

    def component_configuration(self) -> dict[str, Any] | None:
        """Config keys that apply to this component only (e.g. its tick frequency)."""
        return None


class Spout(_Component):
    """A source of tuples. Override ``next_tuple``; ``ack``/``fail`` for reliability.

    The default ``open`` keeps ``conf``, ``context`` and ``collector`` as
    attributes of the same names.
    """

    conf: Mapping[str, Any]
    context: TopologyContext
    collector: SpoutOutputCollector

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        self.conf = conf
        self.context = context
        self.collector = collector

    def next_tuple(self) -> None:
        """Emit zero or more tuples; must not block."""
        raise NotImplementedError(f"{type(self).__name__} must implement next_tuple()")

    def ack(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple tree of ``msg_id`` failed or timed out; replay it if you can.

        The runtime calls it once the retry policy's delay has passed
        (``statestream.retry.*``), not at the moment of the failure, and not
        after the last attempt (then :meth:`dead_lettered` is called instead).
        """

    def dead_lettered(self, msg_id: Any) -> None:
        """``msg_id`` had its last attempt and is in the dead-letter file: it is
        settled, never replay it. Called instead of ``ack``/``fail``, once per
        message, on the task that emitted it; also for a message this task
        emits again that the dead-letter file already holds (after a restart,
        or a rewind of exactly-once state), which the runtime does not deliver.

        Default: treat it as acked (``self.ack(msg_id)``), so a spout written
        before this hook moves past the message.
        """
        self.ack(msg_id)

    def close(self) -> None:
        """Called once at shutdown."""

    def exhausted(self) -> bool:
        """True once this spout will emit nothing more (a finite source at its end,
        with nothing left to replay). ``--until-idle`` stops when every spout says so
        and nothing is in flight. Default: never (an unbounded stream)."""
        return False


class Bolt(_Component):
    """Processes tuples. Override ``execute``; ack or fail every input you get.

    The default ``prepare`` keeps ``conf``, ``context`` and ``collector``.
    """

    conf: Mapping[str, Any]
    context: TopologyContext
    collector: OutputCollector

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        self.conf = conf
        self.context = context
        self.collector = collector

    def execute(self, tuple: Tuple) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tuple)")

    def cleanup(self) -> None:
        """Called once at shutdown."""


class BasicBolt(_Component):
    """A bolt whose emits are anchored to the input and whose input is acked
    when ``execute`` returns. Raise :class:`statestream.FailedException` to
    fail the input instead (it is replayed); any other exception fails it too
    and is reported."""

    conf: Mapping[str, Any]
    context: TopologyContext

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        self.conf = conf
        self.context = context

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tuple, collector)")

    def cleanup(self) -> None:
        """Called once at shutdown."""


class StatefulBolt(Bolt):
    """A bolt whose state the runtime checkpoints and restores.

    ``init_state`` is called after ``prepare`` and before the first tuple with
    the last committed state of this task. Acks are held by the runtime until
    the checkpoint that covers the tuple commits, so a tuple whose effect was
    not committed is replayed after a crash.

    ``state_key`` says which key of the state a tuple will read, so that the
    local runtime reads the keys of a whole batch of tuples from the store in
    one call before executing them (one ``HMGET``, one ``SELECT ... IN``,
    instead of a round trip per key the read cache lacks): the name of a
    field whose value is the key, a function of the tuple returning the key,
    or ``False`` for none. ``None`` (the default): the value of the field
    every input is fields-grouped on, when there is one such field (a word
    count's word); no read-ahead otherwise. It is a guess: a wrong one
    never changes a result, and read-ahead stops once the tuples' own reads
    show it does not pay.
    """

    #: Which key of the state a tuple will read, for the runtime's batched reads:
    #: a field's name, a function of the tuple, ``False`` (none), or ``None`` (the
    #: field every input is fields-grouped on, if there is one). See above.
    state_key: str | Callable[[Tuple], Any] | bool | None = None

    def init_state(self, state: KeyValueState) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement init_state(state)")

    def pre_prepare(self, txid: int) -> None:
        """Called just before this task's state is prepared for ``txid``."""

    def pre_commit(self, txid: int) -> None:
        """Called just before this task's state commits ``txid``."""

    def pre_rollback(self) -> None:
        """Called just before this task's prepared state is rolled back."""

    def post_commit(self, txid: int, state: KeyValueState) -> None:
        """Called just after this task's state committed ``txid``, with that state.

        For work outside the store that must follow a commit (a two-phase
        sink writes its target here, see ``statestream.connectors.TwoPhaseSink``).
        If it raises, the COMMIT failed and is sent again (the state's commit
        is idempotent), so it must be idempotent too. It may come before
        ``init_state`` (a recovery re-sends the COMMIT of an interrupted
        checkpoint first), and on Spark it runs on the driver's instance of
        the task, whose ``state`` is read from the store."""
