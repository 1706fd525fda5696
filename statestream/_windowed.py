"""Storm's windowed bolts, exactly-once: :class:`BaseWindowedBolt`,
:class:`StatefulWindowedBolt`, :class:`TupleWindow`.

A windowed bolt is configured as Storm's (``with_window``,
``with_tumbling_window``, ``with_timestamp_field``, ``with_lag``, ...) and
gets whole windows in ``execute(window)``. :class:`TopologyBuilder.set_bolt
<statestream.TopologyBuilder>` puts it inside a :class:`WindowedBoltExecutor`,
a :class:`~statestream.StatefulBolt` that the runtime checkpoints as any other:

* each input tuple is acked as soon as the window holds it (the checkpoint
  that covers it releases the ack), so ``topology.message.timeout.secs`` does
  not bound a window's length;
* the window's tuples, its trigger state and the watermark
  (:class:`~statestream._windowing.WindowCore`) are put in the task's state
  before every PREPARE (:meth:`WindowedBoltExecutor.pre_prepare`), what
  changed since the last checkpoint only (:mod:`statestream._window_store`),
  so a crash anywhere, mid-window included, comes back to the last commit
  with the windows as they were, and the sources rewind to the same point:
  every window fires once, and what it emits is committed once into the sinks;
* a window of more tuples than ``with_max_events_in_memory(n)`` (Storm's
  ``withMaxEventsInMemory``; default 1,000,000) keeps only the newest ``n`` in
  memory: the others are in the store already, and are read back, chunk by
  chunk, when a window fires (:mod:`statestream._window_spill`);
* at-least-once (no exactly-once state), the windows are Storm's in memory
  instead: nothing of them is checkpointed, and each tuple is acked once no
  window to come holds it;
* a change of parallelism moves event-time windows with their keys
  (:meth:`WindowedBoltExecutor.rescale_tasks`, :mod:`statestream._window_rescale`);
* time moves on tick tuples (the executor asks for them at the slide's or the
  watermark interval's period) and, in event time, on the tuples' timestamps;
  at the end of a finite input the runtime sends the end-of-input tuple
  (:data:`END_OF_INPUT_STREAM`) and every open window fires.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from ._components import StatefulBolt, TopologyContext, _Component
from ._config import settings_of
from ._errors import ConfigError
from ._routing import task_for_key
from ._state import KeyValueState
from ._stateful import CHECKPOINT_STREAM
from ._tuple import Fields, Origin, Tuple
from ._window_intake import END_OF_INPUT_STREAM, WindowEntry, WindowIntake
from ._window_kinds import Aggregate, AggregateCore, SessionCore, hashable
from ._window_rescale import move_windows
from ._window_spill import DEFAULT_MAX_EVENTS_IN_MEMORY, Span, SpillingWindowCore, pinned
from ._window_store import WINDOW_KEY, ChunkSpill, WindowStore, is_window_key
from ._windowing import (
    Count,
    Duration,
    Fire,
    TimeOrder,
    Watermarks,
    WindowCore,
    WindowSpec,
    in_memory_refusal,
    items,
)

__all__ = [
    "END_OF_INPUT_STREAM",
    "BaseWindowedBolt",
    "Count",
    "Duration",
    "EndOfInput",
    "StatefulWindowedBolt",
    "TupleWindow",
    "WindowedBoltExecutor",
]

#: Storm's default watermark interval and lag.
_DEFAULT_WATERMARK_MS = 1000
_DEFAULT_LAG_MS = 0


class EndOfInput:
    """When a bounded run (``--until-idle``) may end once its windowed bolts fired
    their open windows: the decision every per-tuple runtime carries out alike.

    ``windowed`` are the windowed components in topological order. When the run
    is idle, :meth:`next` names the one whose tasks get the end-of-input tuple
    now (one at a time: a windowed bolt downstream of another gets it after the
    first's windows were fired and delivered), and the run may end once
    :meth:`committed` says a checkpoint after the last one committed what they
    emitted: two txids on, since a checkpoint under way may have passed them.
    """

    def __init__(self, windowed: Sequence[str]) -> None:
        self.windowed = list(windowed)
        self.reset()

    def reset(self) -> None:
        """A rewind: the windows come back as committed, and end again."""
        self.todo = list(self.windowed)
        self.until = -1

    def next(self, committed: int) -> str | None:
        """The component to send the end of input to now (``committed``: the last
        committed txid), or None once every one had it."""
        if not self.todo:
            return None
        self.until = committed + 2
        return self.todo.pop(0)

    def committed(self, committed: int) -> bool:
        """Whether what the windows fired at the end is committed."""
        return committed >= self.until


class TupleWindow:
    """The tuples of one window (Storm's ``TupleWindow``), in timestamp order.

    ``start_timestamp`` (inclusive) and ``end_timestamp`` (exclusive) are
    milliseconds since the epoch: event-time windows are aligned to multiples
    of their slide; a count window's start is its first tuple's timestamp.

    A window larger than the bolt's ``max_events_in_memory`` is read back from
    the store: iterating it (``for t in window``, :meth:`get_iter`, Storm's
    ``getIter``) reads it chunk by chunk, in bounded memory, each time;
    :meth:`get`, :meth:`get_new` and :meth:`get_expired` build a list of every
    tuple they return (as Storm's ``get``, which may then not fit in memory).
    Such a window is valid while ``execute`` runs. So are the expired tuples
    of a tumbling window with exactly-once state: they are read back from the
    store (equal values, not the objects the window before gave).
    """

    __slots__ = ("_expired", "_new", "_tuples", "end_timestamp", "start_timestamp", "value")

    def __init__(
        self,
        tuples: Sequence[Tuple] | Callable[[], Sequence[Tuple]],
        new: Sequence[Tuple] | Callable[[], Sequence[Tuple]],
        expired: Sequence[Tuple] | Callable[[], Sequence[Tuple]],
        start_timestamp: int,
        end_timestamp: int,
        value: Any = None,
    ) -> None:
        # Each list is built on its first use (a callable until then): most
        # window functions read get() alone.
        self._tuples = tuples
        self._new = new
        self._expired = expired
        self.start_timestamp = start_timestamp
        self.end_timestamp = end_timestamp
        #: An aggregating window's result (``with_aggregate``); None otherwise.
        self.value = value

    def get(self) -> list[Tuple]:
        """Every tuple in the window."""
        if callable(self._tuples):
            self._tuples = self._tuples()
        return list(self._tuples)

    def get_new(self) -> list[Tuple]:
        """The tuples not in the window this bolt task fired before this one."""
        if callable(self._new):
            self._new = self._new()
        return list(self._new)

    def get_expired(self) -> list[Tuple]:
        """The tuples of the window fired before this one that are not in this one."""
        if callable(self._expired):
            self._expired = self._expired()
        return list(self._expired)

    def get_iter(self) -> Iterator[Tuple]:
        """The window's tuples one by one (Storm's ``getIter``): a window read back
        from the store is read chunk by chunk."""
        if callable(self._tuples):
            self._tuples = self._tuples()
        return iter(self._tuples)

    def __iter__(self) -> Iterator[Tuple]:
        return self.get_iter()

    def __len__(self) -> int:
        if callable(self._tuples):
            self._tuples = self._tuples()
        return len(self._tuples)

    def __repr__(self) -> str:
        return f"TupleWindow([{self.start_timestamp}, {self.end_timestamp}), {len(self)} tuples)"


class BaseWindowedBolt(_Component):
    """A bolt that processes windows of tuples (Storm's ``BaseWindowedBolt``).

    Configure it with the ``with_*`` methods (each returns the bolt), override
    :meth:`execute`. ``self.collector`` is there from ``prepare`` on; emits
    need no anchors (the window's tuples are acked when the window holds them).
    """

    conf: Mapping[str, Any]
    context: TopologyContext
    collector: Any

    window_length: Count | Duration | None = None
    sliding_interval: Count | Duration | None = None
    timestamp_field: str | None = None
    timestamp_extractor: Callable[[Tuple], int] | None = None
    lag: Duration | None = None
    watermark_interval: Duration | None = None
    late_tuple_stream: str | None = None
    session_gap: Duration | None = None
    session_key: str | None = None
    aggregate: Aggregate | None = None
    max_events_in_memory: int | None = None

    # -- Storm's builder methods ------------------------------------------------------
    def with_window(
        self, length: Count | Duration, sliding: Count | Duration | None = None
    ) -> BaseWindowedBolt:
        """A window of ``length`` that slides by ``sliding`` (each a :class:`Count` or a
        :class:`Duration`); no ``sliding``: a tumbling window."""
        self.window_length = length
        self.sliding_interval = length if sliding is None else sliding
        WindowSpec(length, self.sliding_interval)  # checks them now, naming the fix
        return self

    def with_tumbling_window(self, length: Count | Duration) -> BaseWindowedBolt:
        """Windows of ``length`` that do not overlap."""
        return self.with_window(length, length)

    def with_timestamp_field(self, name: str) -> BaseWindowedBolt:
        """Event time: each tuple's timestamp (ms since the epoch, an int) is its field ``name``."""
        self.timestamp_field = name
        return self

    def with_timestamp_extractor(self, extractor: Callable[[Tuple], int]) -> BaseWindowedBolt:
        """Event time: ``extractor(tuple)`` gives each tuple's timestamp (ms, an int)."""
        self.timestamp_extractor = extractor
        return self

    def with_lag(self, lag: Duration) -> BaseWindowedBolt:
        """Event time: how far behind the latest timestamp a tuple may come and still count."""
        self.lag = _duration("with_lag", lag)
        return self

    def with_watermark_interval(self, interval: Duration) -> BaseWindowedBolt:
        """Event time: how often the watermark moves (on the runtime's clock)."""
        self.watermark_interval = _duration("with_watermark_interval", interval)
        return self

    def with_late_tuple_stream(self, stream_id: str) -> BaseWindowedBolt:
        """Event time: late tuples go out on ``stream_id`` as ``(tuple, timestamp)``:
        the late tuple's values (a list) and its timestamp."""
        self.late_tuple_stream = stream_id
        return self

    def with_max_events_in_memory(self, n: int) -> BaseWindowedBolt:
        """Keep at most ``n`` of a window's tuples in memory (Storm's
        ``withMaxEventsInMemory``; default 1,000,000): with exactly-once state, the
        older ones are only in the store (where each checkpoint put them) and are
        read back, chunk by chunk, when a window fires; iterate the window
        (``for t in window``) rather than ``get()`` to keep it so. For windows of
        ``with_window`` and ``with_tumbling_window``; tuples within the lag,
        session windows' and the tuples since the last checkpoint stay in memory.
        At-least-once windows are in memory only (their tuples are acked when they
        leave the window): setting it there is refused."""
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ConfigError(
                f"with_max_events_in_memory() takes a positive number of tuples, not {n!r}"
            )
        self.max_events_in_memory = n
        return self

    # -- beyond Storm ---------------------------------------------------------------------
    def with_session_window(self, gap: Duration, key: str | None = None) -> BaseWindowedBolt:
        """Session windows: a window is a run of tuples (of one value of the field
        ``key``, if given) with less than ``gap`` between one and the next; it
        fires ``gap`` after its last tuple (by event time with a timestamp field)."""
        self.session_gap = _duration("with_session_window", gap)
        self.session_key = key
        return self

    def with_aggregate(
        self,
        init: Callable[[], Any],
        add: Callable[[Any, Tuple], Any],
        merge: Callable[[Any, Any], Any],
        result: Callable[[Any], Any],
    ) -> BaseWindowedBolt:
        """Keep one accumulator per window instead of its tuples (Flink's
        AggregateFunction): ``init() -> acc``, ``add(acc, tuple) -> acc``,
        ``merge(acc, acc) -> acc``, ``result(acc)``. ``execute`` then gets windows
        whose ``value`` is the result and whose ``get()`` is empty. For duration
        windows (a length that is a multiple of the slide) and session windows;
        the accumulator must be a JSON value (it is checkpointed)."""
        self.aggregate = Aggregate(init, add, merge, result)
        return self

    # -- what the user implements -------------------------------------------------------
    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: Any) -> None:
        self.conf = conf
        self.context = context
        self.collector = collector

    def execute(self, window: TupleWindow) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement execute(window)")

    def cleanup(self) -> None:
        """Called once at shutdown."""

    # -- what the executor reads ----------------------------------------------------------
    def configure_from(self, conf: Mapping[str, Any]) -> None:
        """Storm's ``topology.bolts.*`` keys of ``conf`` (the component's config) for
        what the ``with_*`` methods left unset, as Storm's executor reads them."""
        s = settings_of(conf)
        length_n, length_ms = (
            s.topology_bolts_window_length_count,
            s.topology_bolts_window_length_duration_ms,
        )
        if self.window_length is None and self.session_gap is None:
            if length_n is not None:
                self.window_length = Count(length_n)
            elif length_ms is not None:
                self.window_length = Duration(length_ms)
        slide_n, slide_ms = (
            s.topology_bolts_window_sliding_interval_count,
            s.topology_bolts_window_sliding_interval_duration_ms,
        )
        if self.sliding_interval is None and self.window_length is not None:
            if slide_n is not None:
                self.sliding_interval = Count(slide_n)
            elif slide_ms is not None:
                self.sliding_interval = Duration(slide_ms)
            else:
                self.sliding_interval = self.window_length  # tumbling
        field_name = s.topology_bolts_tuple_timestamp_field_name
        if not self.event_time and field_name is not None:
            self.timestamp_field = field_name
        if self.lag is None and s.topology_bolts_tuple_timestamp_max_lag_ms is not None:
            self.lag = Duration(s.topology_bolts_tuple_timestamp_max_lag_ms)
        interval = s.topology_bolts_watermark_event_interval_ms
        if self.watermark_interval is None and interval is not None:
            self.watermark_interval = Duration(interval)

    def window_name(self) -> str:
        """The bolt's class name, for messages that have no component id at hand."""
        return type(self).__name__

    @property
    def event_time(self) -> bool:
        return self.timestamp_field is not None or self.timestamp_extractor is not None

    def window_spec(self, component: str) -> WindowSpec:
        """The window this bolt was configured with; ConfigError naming the fix if none."""
        if self.session_gap is not None:
            gap = self.session_gap
            return WindowSpec(gap, gap, event_time=self.event_time)
        if self.window_length is None or self.sliding_interval is None:
            raise ConfigError(
                f"windowed bolt {component!r} has no window: configure it with "
                "with_window(length, sliding), with_tumbling_window(length) or "
                "with_session_window(gap), or set topology.bolts.window.length.count "
                "or .duration.ms in its config"
            )
        return WindowSpec(self.window_length, self.sliding_interval, event_time=self.event_time)

    def window_core(self, component: str, spill: bool = False) -> TimeOrder:
        """The pure model of this bolt's windows (statestream._windowing, _window_kinds),
        holding the tuples themselves; ``spill``: at most ``max_events_in_memory`` of
        them in memory (statestream._window_spill), for windows kept in the store."""
        spec = self.window_spec(component)
        if self.session_gap is not None:
            field = self.session_key
            key_of = _no_key if field is None else partial(_field_key, field)
            return SessionCore(self.session_gap, spec.event_time, key_of, self.aggregate)
        if self.aggregate is not None:
            return AggregateCore(spec, self.aggregate)
        if spill:
            limit = self.max_events_in_memory or DEFAULT_MAX_EVENTS_IN_MEMORY
            return SpillingWindowCore(spec, limit)
        return WindowCore(spec)


class _SpanTuples(Sequence[Tuple]):
    """The tuples of a window read back from the store (a Span): iterated chunk by
    chunk, each time (TupleWindow's get() builds the list)."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def __iter__(self) -> Iterator[Tuple]:
        return (e.item() for e in self.span)

    def __len__(self) -> int:
        return len(self.span)

    def __getitem__(self, i: Any) -> Any:
        return list(self)[i]


class StatefulWindowedBolt(BaseWindowedBolt):
    """A windowed bolt with its own checkpointed state (Storm's ``IStatefulWindowedBolt``):
    ``init_state`` is called with it before the first window, as for
    :class:`~statestream.StatefulBolt`."""

    def init_state(self, state: KeyValueState) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement init_state(state)")

    def pre_prepare(self, txid: int) -> None:
        """Called just before this task's state is prepared for ``txid``."""

    def pre_commit(self, txid: int) -> None:
        """Called just before this task's state commits ``txid``."""

    def pre_rollback(self) -> None:
        """Called just before this task's prepared state is rolled back."""

    def post_commit(self, txid: int, state: KeyValueState) -> None:
        """Called just after this task's state committed ``txid``."""


def _no_key(tup: Tuple) -> None:
    return None


def _field_key(field: str, tup: Tuple) -> Any:
    # Hashable as it comes back from the store (a list there was a tuple here).
    return hashable(tup[field])


def _duration(method: str, value: Any) -> Duration:
    if not isinstance(value, Duration):
        raise ConfigError(f"{method}() takes a Duration (e.g. Duration.seconds(5)), not {value!r}")
    return value


class _UserState:
    """The task's state as a :class:`StatefulWindowedBolt` sees it: without the
    window's own key."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def _check(self, key: Any) -> None:
        if is_window_key(key):
            raise ConfigError(
                f"the state key {key!r} is the window's own ({WINDOW_KEY!r} and the keys "
                f"under {WINDOW_KEY + '/'!r}): use another"
            )

    def get(self, key: Any, default: Any = None) -> Any:
        self._check(key)
        return self._state.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self._check(key)
        self._state.put(key, value)

    def delete(self, key: Any) -> Any:
        self._check(key)
        return self._state.delete(key)

    def __contains__(self, key: object) -> bool:
        return not is_window_key(key) and key in self._state

    def items(self) -> Iterator[tuple[Any, Any]]:
        return ((k, v) for k, v in self._state.items() if not is_window_key(k))

    def keys(self) -> Iterator[Any]:
        return (k for k in self._state if not is_window_key(k))

    def __iter__(self) -> Iterator[Any]:
        return self.keys()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)


class WindowedBoltExecutor(StatefulBolt):
    """Runs a :class:`BaseWindowedBolt` as a checkpointed bolt (see the module's docstring)."""

    def __init__(self, bolt: BaseWindowedBolt) -> None:
        self.bolt = bolt

    def __repr__(self) -> str:
        return f"WindowedBoltExecutor({self.bolt!r})"

    # -- the component contract ---------------------------------------------------------
    def declare_output_fields(self, declarer: Any) -> None:
        self.bolt.declare_output_fields(declarer)
        if self.bolt.late_tuple_stream is not None:
            declarer.declare_stream(self.bolt.late_tuple_stream, ["tuple", "timestamp"])

    def component_configuration(self) -> dict[str, Any] | None:
        conf = dict(self.bolt.component_configuration() or {})
        # Ticks move processing time and the watermark: at the slide's period,
        # or the watermark interval's, whichever is shorter.
        periods = []
        if isinstance(self.bolt.sliding_interval, Duration):
            periods.append(self.bolt.sliding_interval.ms)
        if self.bolt.event_time:
            periods.append(self._watermark_ms())
        if periods:
            tick = min(periods) / 1000
            asked = conf.get("topology.tick.tuple.freq.secs")
            conf["topology.tick.tuple.freq.secs"] = tick if asked is None else min(tick, asked)
        return conf or None

    def rescale_task(self, key: Any, n_tasks: int) -> int:
        """The task of a key of a :class:`StatefulWindowedBolt`'s own state when the
        parallelism changes (statestream._rescale asks this hook): the task the
        fields grouping sends that key to. The windows move by :meth:`rescale_tasks`."""
        return task_for_key(key, n_tasks)

    def rescale_owns(self, key: Any) -> bool:
        """Whether :meth:`rescale_tasks` moved ``key`` (a window's own key)."""
        return is_window_key(key)

    def rescale_tasks(
        self,
        spec: Any,
        fields_of: Callable[[str, str], Fields],
        sources: list[Any],
        targets: list[Any],
        staging: Any,
    ) -> int:
        """Move the windows stored by the old tasks (``sources``, the states of the
        component ``spec``) to the new ones (``targets``) by the fields grouping of
        their tuples (statestream._window_rescale); statestream._rescale calls it
        before it moves the other keys. ConfigError naming the fix for windows
        that do not move (count, aggregating and session windows, and a task
        behind the others)."""
        bolt, cid, n = self.bolt, spec.id, len(targets)
        data = [s for s in spec.inputs if s.stream != CHECKPOINT_STREAM]
        if bolt.aggregate is not None or bolt.session_gap is not None or not data:
            fields: dict[tuple[str, str], tuple[str, ...]] = {}
        else:
            fields = {(s.source, s.stream): s.grouping.fields for s in data}
        if not all(fields.values()) or len(fields) != len(data):
            raise ConfigError(
                f"windowed bolt {cid!r} changed parallelism: its windows move with their keys "
                "only when they are time windows of tuples (not aggregating or session "
                "windows) under a fields grouping; keep its previous parallelism, or clear "
                "its state (statestream state clear) and start its windows afresh"
            )

        def owner_of(t: Tuple) -> int:
            names = fields[(t.origin.component, t.origin.stream)]
            key = t[names[0]] if len(names) == 1 else [t[f] for f in names]
            return task_for_key(key, n)

        def origin(component: str, task: int, index: int, stream: str) -> Origin:
            return Origin(component, task, index, stream, fields_of(component, stream))

        spec_ = bolt.window_spec(cid)
        return move_windows(cid, spec_, sources, targets, staging, owner_of, origin)

    def _watermark_ms(self) -> int:
        wm = self.bolt.watermark_interval
        return wm.ms if wm is not None else _DEFAULT_WATERMARK_MS

    # -- the task's life ----------------------------------------------------------------
    def prepare(self, conf: Mapping[str, Any], context: TopologyContext, collector: Any) -> None:
        bolt = self.bolt
        bolt.configure_from(conf)
        self.context = context
        # At-least-once (no exactly-once state, acking on): Storm's windows in
        # memory, each tuple acked once no window holds it, nothing of them
        # checkpointed. At-most-once (no acker) keeps them in the state, so that
        # they outlive a Spark batch's bolt instances.
        acking = settings_of(conf).topology_acker_executors > 0
        self.in_memory = not context.exactly_once and acking
        if self.in_memory:
            self._check_in_memory(conf)
            if bolt.max_events_in_memory is not None:
                raise ConfigError(
                    f"windowed bolt {context.component_id!r} at-least-once keeps its windows "
                    "in memory (a tuple is acked when it leaves them, as Storm's), so "
                    "with_max_events_in_memory cannot spill them: drop it, or use "
                    "exactly-once state (statestream.state.exactly.once: true)"
                )
        self._fresh_windows()
        self.collector = collector
        self._origins: dict[tuple[str, int, str], Origin] = {}
        self.state: Any = None
        self.late_tuples = 0  # taken as late in this process (the run's counter)
        entry = self._window_entry()
        entry.ack = collector.ack
        entry.intake = None if self.in_memory else self.intake
        self._fire_failures = 0
        self._max_attempts = settings_of(conf).statestream_retry_max_attempts
        bolt.prepare(conf, context, collector)

    def data_entry(self) -> Callable[[Tuple], None]:
        """What the runtime calls for each data tuple (CheckpointTupleForwarder.data_entry
        asks): :class:`~statestream._window_intake.WindowEntry`, in compiled code."""
        return self._window_entry().execute

    def _window_entry(self) -> WindowEntry:
        """The entry, made at the first call (the runtime asks for it before prepare),
        with the lists it shares with :meth:`execute`.

        Windows due and not fired yet (``_unfired``): those whose execute raised
        stay, and fire (again) with the next tuple the task executes. Exactly-once
        retries the failed tuple where it failed (its emits taken back, its state
        writes undone), so that retry (``_retrying``), or whichever tuple comes
        first, fires them once; a tuple taken in whose windows failed is not
        taken in again. Both are cleared, never replaced: the entry reads them."""
        entry: WindowEntry | None = self.__dict__.get("_entry")
        if entry is None:
            self._unfired: list[Fire] = []
            self._retrying: dict[int, Tuple] = {}
            entry = self._entry = WindowEntry(
                self.execute, self._taken, self._unfired, self._retrying
            )
        return entry

    def _fresh_windows(self) -> None:
        """No window yet: the core and the watermarks as at a first start."""
        bolt = self.bolt
        self.core = bolt.window_core(self.context.component_id, spill=not self.in_memory)
        self.store = WindowStore(self.context.component_id)
        if self.in_memory:
            self.core.in_memory()
        self.marks = Watermarks(bolt.lag.ms if bolt.lag is not None else _DEFAULT_LAG_MS)
        self.intake = WindowIntake(
            self.context.component_id,
            self.core,
            self.marks,
            self.context.clock,
            self._watermark_ms(),
            bolt.timestamp_field,
            bolt.timestamp_extractor,
            # In memory the window holds the delivered tuple itself: it is acked
            # when the window lets it go.
            copy=not self.in_memory,
        )
        entry: WindowEntry | None = self.__dict__.get("_entry")
        if entry is not None and entry.intake is not None:
            entry.intake = self.intake

    def _check_in_memory(self, conf: Mapping[str, Any]) -> None:
        s = settings_of(conf)
        timeout = s.topology_message_timeout_secs * 1000
        lag = self.bolt.lag.ms if self.bolt.lag is not None else _DEFAULT_LAG_MS
        why = in_memory_refusal(
            self.bolt.window_spec(self.context.component_id),
            lag,
            timeout if s.topology_enable_message_timeouts else None,
            s.topology_max_spout_pending,
        )
        if why is not None:
            raise ConfigError(
                f"windowed bolt {self.context.component_id!r} at-least-once keeps its windows "
                f"in memory and acks a tuple once no window holds it, but {why}"
            )

    def init_state(self, state: KeyValueState) -> None:
        # Also after a ROLLBACK on this instance: the windows are the committed ones,
        # none if nothing was committed, whatever this task held since (in memory:
        # those held, whose tuples are not acked yet).
        self.state = state
        if not self.in_memory:
            self._fresh_windows()
            self._attach(state)
            self.store.load(state, self.core, self.marks, self._origin)
        self._unfired.clear()
        self._retrying.clear()
        if isinstance(self.bolt, StatefulWindowedBolt):
            self.bolt.init_state(_UserState(state))

    def pre_prepare(self, txid: int) -> None:
        if self.state is None:  # no INITSTATE yet: nothing held
            self.state = self.context.state()
            self._attach(self.state)
        if not self.in_memory:
            self.store.save(self.state, self.core, self.marks, pinned(self._unfired))
        if isinstance(self.bolt, StatefulWindowedBolt):
            self.bolt.pre_prepare(txid)

    def _attach(self, state: Any) -> None:
        """Let a core that spills write to and read from ``state``."""
        if isinstance(self.core, SpillingWindowCore):
            self.core.spill = ChunkSpill(self.store, state, self._origin)

    def pre_commit(self, txid: int) -> None:
        if isinstance(self.bolt, StatefulWindowedBolt):
            self.bolt.pre_commit(txid)

    def pre_rollback(self) -> None:
        if isinstance(self.bolt, StatefulWindowedBolt):
            self.bolt.pre_rollback()

    def post_commit(self, txid: int, state: KeyValueState) -> None:
        if isinstance(self.bolt, StatefulWindowedBolt):
            self.bolt.post_commit(txid, _UserState(state))

    def cleanup(self) -> None:
        self.bolt.cleanup()

    # -- tuples ---------------------------------------------------------------------------
    def execute(self, tuple: Tuple) -> None:
        stream = tuple.origin.stream
        data = stream != END_OF_INPUT_STREAM and not tuple.is_tick
        if self._retrying.pop(id(tuple), None) is not None:
            self._taken(tuple, [], data)  # taken before: its windows fire again
        elif data:
            self._taken(tuple, self.intake.take(tuple))
        elif stream == END_OF_INPUT_STREAM:
            self._taken(tuple, self.core.finish(), False)
        else:
            self._taken(tuple, self.intake.on_clock(True), False)

    def _taken(self, tuple: Tuple, fires: list[Fire] | None, data: bool = True) -> None:
        """What follows the take of ``tuple`` (a data tuple if ``data``): fire the windows
        due (``fires``, None if the tuple was late) and ack it."""
        if fires is None:
            self._late(tuple)
            return
        if fires:
            self._unfired.extend(fires)
        if self._unfired:
            try:
                self._fire(self._unfired)
            except Exception:
                self._fire_failures += 1
                if self._fire_failures < self._max_attempts:
                    self._retrying[id(tuple)] = tuple
                else:
                    # As a tuple failing its last attempt: reported, and its windows
                    # given up on, so that they do not fail every tuple after them.
                    self._unfired.clear()
                    self._fire_failures = 0
                raise
            self._unfired.clear()
            self._fire_failures = 0
        if self.in_memory:
            for e in self.core.take_gone():  # no window to come holds them
                self.collector.ack(e.payload)
        elif data:
            # Acked once in the window and its windows fired: a failure before takes
            # back what they emitted (exactly-once retries the tuple in place).
            self.collector.ack(tuple)

    def _late(self, tup: Tuple) -> None:
        """A tuple older than the watermark: acked, and on the late stream if there is one."""
        self.late_tuples += 1
        late = self.bolt.late_tuple_stream
        if late is not None:
            self.collector.emit([list(tup.values), self.intake.late_ts], stream=late)
        self.collector.ack(tup)

    # -- windows ----------------------------------------------------------------------------
    def _fire(self, fires: list[Fire]) -> None:
        for fire in fires:
            self.bolt.execute(
                TupleWindow(
                    self._view(fire.events),
                    self._view(fire.new),
                    self._view(fire.expired),
                    fire.start,
                    fire.end,
                    fire.value,
                )
            )

    def _view(self, events: Any) -> Sequence[Tuple] | Callable[[], Sequence[Tuple]]:
        if isinstance(events, Span):
            return _SpanTuples(events)
        return partial(items, events)

    def _origin(self, component: str, task: int, index: int, stream: str) -> Origin:
        """The origin of a tuple restored from the store, one per input channel."""
        key = (component, task, stream)
        origin = self._origins.get(key)
        if origin is None:
            fields = self.context.output_fields(component, stream)
            origin = self._origins[key] = Origin(component, task, index, stream, fields)
        return origin
