"""A spout reading Redis streams, rewindable by entry id (exactly-once)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from .._components import OutputFieldsDeclarer, Spout, SpoutOutputCollector, TopologyContext
from .._errors import ConfigError, SourceError
from ._broker import Reconnect, redact, require, unreachable

__all__ = ["RedisStreamSpout"]

_START = "0-0"  # XREAD returns the entries after this id: the whole stream


class RedisStreamSpout(Spout):
    """Emits the named ``fields`` of each entry of one or more Redis streams, in order.

    Each field's value is emitted as a UTF-8 ``str``, in the order of
    ``fields`` (the spout's output fields, unless ``output_fields`` renames
    them); an entry without one of them stops the run with a
    :class:`~statestream.SourceError` naming the stream, entry and field.

    **Exactly-once.** It implements :class:`~statestream.Rewindable`: its
    position is, per stream, the id of the last entry it emitted (plus the
    failed entries waiting to be emitted again), stored in the checkpoint
    record, never in a consumer group; restoring a checkpoint reads each
    stream again after that id (``XREAD``), so with ``auto`` a stateful
    topology reading it is exactly-once. ``acked_position()`` gives the
    same per stream below the first entry not yet acked (at-least-once).

    **Several streams, several tasks.** ``stream`` may be a list: task ``i``
    of N reads the streams whose index is ``i`` modulo N, each in its own
    order (no order across streams). More tasks than streams is refused; so
    is a restart whose parallelism differs from the one that stored the
    positions (the streams would be split another way).

    **Reading.** Entries are read ``count`` at a time (``XREAD COUNT``) and
    buffered; ``next_tuple`` emits one. When the buffer is empty it asks
    Redis and waits at most ``block_ms`` milliseconds (``XREAD BLOCK``) for
    new entries, so ``next_tuple`` may block that long while the streams are
    idle. With ``--until-idle`` it is exhausted once a read found nothing
    new (it has caught up with the streams' ends as they were then) and
    every entry it emitted is acked.

    **Faults.** A Redis that does not answer at ``open`` stops the run (exit
    1, the URL named with its password hidden); a stream that does not exist
    is a :class:`~statestream.ConfigError` naming it. A Redis lost mid-run is
    tried again with backoff for ``statestream.connectors.reconnect.secs``
    (the spout emits nothing meanwhile), then the run stops; a restart
    resumes from the last checkpoint.
    """

    def __init__(
        self,
        stream: str | Sequence[str],
        fields: Sequence[str],
        url: str = "redis://127.0.0.1:6379/0",
        *,
        output_fields: Sequence[str] | None = None,
        count: int = 1000,
        block_ms: int = 50,
    ) -> None:
        self.streams = [stream] if isinstance(stream, str) else list(stream)
        self.fields = list(fields)
        self.output_fields = list(output_fields) if output_fields is not None else self.fields
        if not self.streams or not self.fields:
            raise ConfigError("RedisStreamSpout needs at least one stream and one field")
        if len(self.output_fields) != len(self.fields):
            raise ConfigError(
                f"RedisStreamSpout: output_fields {self.output_fields} must name as many "
                f"fields as fields {self.fields}"
            )
        if count < 1 or block_ms < 0:
            raise ConfigError(
                f"RedisStreamSpout: count must be >= 1 and block_ms >= 0 (got {count}, {block_ms})"
            )
        self.url = url
        self.count = count
        self.block_ms = block_ms
        self._keys = [f.encode() for f in self.fields]
        self._client: Any = None
        self._mine: list[str] = []  # the streams of this task
        self._tasks = 1
        self._read: dict[str, str] = {}  # stream -> the last id read (into the buffer)
        self._emitted: dict[str, str] = {}  # stream -> the last id emitted
        self._buffer: deque[tuple[str, str, list[str]]] = deque()
        # stream -> entry id -> (the id emitted before it, its values), in emit order:
        # the first one's predecessor is where an at-least-once restart continues.
        self._in_flight: dict[str, dict[str, tuple[str, list[str]]]] = {}
        self._replay: deque[tuple[str, str]] = deque()
        self._caught_up = False
        self._reconnect: Reconnect | None = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self.output_fields)

    def _name(self) -> str:
        return f"RedisStreamSpout {self.context.component_id!r}"

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        redis = require("redis", "redis", "RedisStreamSpout")
        task, self._tasks = context.task_index, context.parallelism
        if self._tasks > len(self.streams):
            raise ConfigError(
                f"{self._name()} has {self._tasks} tasks but {len(self.streams)} stream(s) "
                f"{self.streams}: each task reads whole streams, so give it at most "
                f"{len(self.streams)} task(s) or more streams"
            )
        self._mine = [s for i, s in enumerate(self.streams) if i % self._tasks == task]
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # No retries inside redis-py: a lost server is Reconnect's business, so that
        # next_tuple returns at once instead of sleeping through the client's backoff.
        self._client = redis.Redis.from_url(
            self.url,
            socket_connect_timeout=2.0,
            socket_timeout=self.block_ms / 1000.0 + 5.0,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            types = [self._client.type(s) for s in self._mine]
        except redis.RedisError as exc:
            self.close()
            raise unreachable(self._name(), self.url, exc) from exc
        for s, kind in zip(self._mine, types, strict=True):
            if kind != b"stream":
                self.close()
                what = "does not exist" if kind == b"none" else f"is a {kind.decode()}, not a stream"
                raise ConfigError(
                    f"{self._name()}: the Redis key {s!r} on {redact(self.url)} {what}; "
                    "fix the stream's name, or create it first (XADD, or XGROUP CREATE "
                    f"{s} <group> $ MKSTREAM)"
                )
        self._reconnect = Reconnect.from_conf(self._name(), self.url, conf, context.clock)
        self._start({s: _START for s in self._mine}, [])

    def _start(self, emitted: Mapping[str, str], replay: Sequence[Any]) -> None:
        self._emitted = dict(emitted)
        self._read = dict(emitted)
        self._buffer.clear()
        self._caught_up = False
        self._in_flight = {s: {} for s in self._mine}
        self._replay = deque()
        for s, entry, values in replay:
            # A failed entry is re-emitted with its own values; its predecessor is
            # not known any more, and need not be: it precedes the position.
            self._in_flight[s][entry] = (emitted[s], list(values))
            self._replay.append((s, entry))

    def next_tuple(self) -> None:
        if self._replay:
            s, entry = self._replay.popleft()
            self.collector.emit(self._in_flight[s][entry][1], (s, entry))
            return
        if not self._buffer:
            self._fill()
            if not self._buffer:
                return
        s, entry, values = self._buffer.popleft()
        self._in_flight[s][entry] = (self._emitted[s], values)
        self._emitted[s] = entry
        self.collector.emit(values, (s, entry))

    def _fill(self) -> None:
        """Read up to ``count`` entries per stream after the last one read, waiting
        at most ``block_ms`` for the first."""
        reconnect = self._reconnect
        if self._client is None or reconnect is None or not reconnect.due():
            return
        import redis

        try:
            reply = self._client.xread(self._read, count=self.count, block=self.block_ms or None)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            reconnect.failed(exc)  # raises SourceError once the limit is past
            return
        except redis.ResponseError as exc:
            raise SourceError(f"{self._name()}: XREAD failed on {redact(self.url)}: {exc}") from exc
        reconnect.ok()
        self._caught_up = not reply
        for key, entries in reply or ():
            s = key.decode() if isinstance(key, bytes) else str(key)
            for raw_id, data in entries:
                entry = raw_id.decode()
                self._buffer.append((s, entry, self._values(s, entry, data)))
                self._read[s] = entry

    def _values(self, stream: str, entry: str, data: Mapping[bytes, bytes]) -> list[str]:
        try:
            return [data[k].decode() for k in self._keys]
        except KeyError as exc:
            have = sorted(k.decode(errors="replace") for k in data)
            raise SourceError(
                f"{self._name()}: entry {entry} of stream {stream!r} has no field "
                f"{exc.args[0].decode()!r} (it has {have}); produce it with every field "
                f"of {self.fields}, or read fewer fields"
            ) from None
        except UnicodeDecodeError as exc:
            raise SourceError(
                f"{self._name()}: entry {entry} of stream {stream!r} has a value that is "
                f"not UTF-8 ({exc.reason}); produce UTF-8 text"
            ) from None

    # -- positions (statestream.Rewindable) ------------------------------------------
    def _where(self, ids: Mapping[str, str], replay: list[Any]) -> dict[str, Any]:
        where: dict[str, Any] = {"streams": dict(ids), "replay": replay}
        if self._tasks > 1:
            where["tasks"] = self._tasks
        return where

    def position(self) -> Any:
        """Per stream the id of the last entry emitted, and the failed entries (with
        their values) that wait to be emitted again."""
        replay = [[s, e, self._in_flight[s][e][1]] for s, e in self._replay]
        return self._where(self._emitted, replay)

    def acked_position(self) -> Any:
        """Per stream the id before the first entry not yet acked."""
        ids = {
            s: next(iter(flying.values()))[0] if flying else self._emitted[s]
            for s, flying in self._in_flight.items()
        }
        return self._where(ids, [])

    def seek(self, position: Any) -> None:
        """Continue after ``position`` (from :meth:`position`; None: each stream's start)."""
        if self._client is None:
            raise ConfigError("RedisStreamSpout.seek() before open()")
        if position is None:
            self._start({s: _START for s in self._mine}, [])
            return
        tasks = int(position.get("tasks", 1))
        stored = dict(position.get("streams") or {})
        if tasks != self._tasks or set(stored) != set(self._mine):
            self.close()
            raise ConfigError(
                f"{self._name()}: the checkpoint to restore was taken by {tasks} task(s) "
                f"reading streams {sorted(stored)} on this task, but this run has "
                f"{self._tasks} task(s) and gives it {sorted(self._mine)}; run with the "
                "same streams and parallelism, or start from an empty state store "
                "(statestream state clear)"
            )
        self._start(stored, position.get("replay") or [])

    # -- acks -----------------------------------------------------------------------
    def ack(self, msg_id: Any) -> None:
        self._in_flight[msg_id[0]].pop(msg_id[1], None)

    def fail(self, msg_id: Any) -> None:
        s, entry = msg_id
        if entry in self._in_flight.get(s, ()):
            self._replay.append((s, entry))

    def exhausted(self) -> bool:
        return (
            self._caught_up
            and not self._buffer
            and not self._replay
            and not any(self._in_flight.values())
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None  # a connection does not travel; open() makes one
        return state
