"""A spout reading Redis streams, rewindable by entry id (exactly-once)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from .._components import OutputFieldsDeclarer, SpoutOutputCollector, TopologyContext
from .._errors import ConfigError, SourceError
from .._partitioned import PARTITIONS_KEY
from ._broker import redact, require, unreachable
from ._source import BrokerSpout, Lost

__all__ = ["RedisStreamSpout"]

_START = "0-0"  # XREAD returns the entries after this id: the whole stream


_SEQ_MAX = 2**64 - 1  # an entry id is "<ms>-<seq>", each an unsigned 64-bit number


def _id_order(replayed: Sequence[Any]) -> tuple[int, int]:
    """A replayed ``[stream, entry id, values]`` by its id, as the stream orders it."""
    ms, _, seq = str(replayed[1]).partition("-")
    return int(ms), int(seq or 0)


def _id_before(entry: str) -> str:
    """The greatest entry id below ``entry``: XREAD after it returns ``entry`` first."""
    ms, _, seq = entry.partition("-")
    if int(seq or 0) > 0:
        return f"{ms}-{int(seq) - 1}"
    return f"{int(ms) - 1}-{_SEQ_MAX}"


def _raw(response: Any, **_: Any) -> Any:
    """redis-py's response callback that leaves a reply as it came."""
    return response


class _StreamReader:
    """One stream read after an entry id: the reading that both the spout (its
    XREAD replies, one per stream) and a Spark partition's
    :meth:`RedisStreamSpout.read` (XRANGE pages) do, written once: where it is
    (:attr:`after`, the last id read) and what an entry becomes (the named
    fields' values as text, or a :class:`~statestream.SourceError` naming the
    stream, the entry and what is wrong). Replies come raw (``[id, [field,
    value, ...]]`` per entry: the client's own parse builds a dict per entry).
    """

    def __init__(self, what: str, stream: str, fields: Sequence[str], after: str) -> None:
        self.what, self.stream, self.fields = what, stream, list(fields)
        self.keys = [f.encode() for f in self.fields]
        self.after = after

    def take(self, entries: Sequence[Any]) -> list[tuple[tuple[str, str], list[str]]]:
        """``entries`` (a raw reply's, in order, after :attr:`after`) as ``((stream,
        id), values)``; :attr:`after` moves to the last."""
        if not entries:
            return []
        items = self._decode(entries)
        self.after = items[-1][0][1]
        return items

    def page(self, client: Any, end: str, count: int) -> list[tuple[tuple[str, str], list[str]]]:
        """The next ``count`` entries after :attr:`after` up to and including ``end``
        (XRANGE); fewer than ``count``: none is left up to ``end``."""
        return self.take(client.xrange(self.stream, f"({self.after}", end, count=count))

    def _decode(self, entries: Sequence[Any]) -> list[tuple[tuple[str, str], list[str]]]:
        s = self.stream
        if len(self.keys) == 1:
            # One field, the entry holding only it (what a producer of lines sends):
            # one comprehension, no call an entry. Anything else, or a value that
            # is not UTF-8, takes the general path, which names what is wrong.
            key = self.keys[0]
            try:
                if all(len(data) == 2 and data[0] == key for _, data in entries):
                    return [((s, i.decode()), [data[1].decode()]) for i, data in entries]
            except UnicodeDecodeError:
                pass
        return [((s, e := i.decode()), self.values(e, data)) for i, data in entries]

    def values(self, entry: str, data: Mapping[bytes, bytes] | Sequence[bytes]) -> list[str]:
        """The fields' values of entry ``entry`` (``data``: a mapping, or a raw reply's
        ``[field, value, ...]``)."""
        if not isinstance(data, Mapping):
            data = dict(zip(data[::2], data[1::2], strict=True))
        try:
            return [data[k].decode() for k in self.keys]
        except KeyError as exc:
            have = sorted(k.decode(errors="replace") for k in data)
            raise SourceError(
                f"{self.what}: entry {entry} of stream {self.stream!r} has no field "
                f"{exc.args[0].decode()!r} (it has {have}); produce it with every field "
                f"of {self.fields}, or read fewer fields"
            ) from None
        except UnicodeDecodeError as exc:
            raise SourceError(
                f"{self.what}: entry {entry} of stream {self.stream!r} has a value that is "
                f"not UTF-8 ({exc.reason}); produce UTF-8 text"
            ) from None


class RedisStreamSpout(BrokerSpout):
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

    **Partitioned, with several streams.** A list of streams makes it a
    :class:`~statestream.PartitionedSource` (a stream is a partition): on
    Spark the driver asks each stream's last entry id (``XREVRANGE COUNT
    1``), stores it with ``PREPARING(t)``, and the executors read the
    entries after the stored id up to it (``XRANGE`` in pages of
    ``count``); a batch reads each stream to its end as the driver saw it.

    **Reading.** Entries are read ``count`` at a time (``XREAD COUNT``) and
    buffered; ``next_tuple`` emits one. The reads run on a reader thread of
    the task's own, one always in flight: as soon as a reply is taken, the
    next ``XREAD`` (after the last id read, waiting at most ``block_ms``
    milliseconds for new entries, ``XREAD BLOCK``) is sent, so the pipeline
    neither waits for Redis to produce each batch nor, once caught up, for
    the ``BLOCK`` while its tuples are still in flight (it would hold the
    whole local runtime, which polls its spouts between its bolts' work).
    When the buffer is empty and nothing it emitted is in flight,
    ``next_tuple`` waits for the read in flight, so it may block up to
    ``block_ms`` while the streams are idle. A seek drops the read in flight. With ``--until-idle`` it is exhausted once a read found nothing
    new (it has caught up with the streams' ends as they were then) and
    every entry it emitted is acked.

    **Faults.** A Redis that does not answer at ``open`` stops the run (exit
    1, the URL named with its password hidden); a stream that does not exist
    is a :class:`~statestream.ConfigError` naming it. A Redis lost mid-run is
    tried again with backoff for ``statestream.connectors.reconnect.secs``
    (the spout emits nothing meanwhile), then the run stops; a restart
    resumes from the last checkpoint.
    """

    connector = "RedisStreamSpout"

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
        super().__init__(count, block_ms)
        self.url = url
        self._client: Any = None
        self._readers: dict[str, _StreamReader] = {}  # stream -> where it was read to
        self._last: dict[str, str] = {}  # stream -> the last id emitted
        self._counts: dict[str, int] | None = {}  # stream -> entries emitted (None: unknown)
        # (stream, entry id) in flight -> the id emitted before it in its stream, in
        # emit order: the first one's per stream is where an at-least-once restart
        # continues.
        self._before: dict[tuple[str, str], str] = {}
        self._track_before = True  # set at open: not with exactly-once state
        # The read ahead (the next XREAD's reply, on _reader's thread), if any.
        self._reader: ThreadPoolExecutor | None = None
        self._ahead: Future[Any] | None = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self.output_fields)

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        redis = require("redis", "redis", "RedisStreamSpout")
        self._take_share(context, self.streams, "stream")
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
        # XREAD's reply as the server sent it (nested lists, or a map with RESP3):
        # redis-py's own parse builds a dict per entry, about half the reader
        # thread's work, and that thread holds the interpreter lock the tasks need.
        self._client.set_response_callback("XREAD", _raw)
        self._client.set_response_callback("XRANGE", _raw)
        try:
            types = [self._client.type(s) for s in self._mine]
        except redis.RedisError as exc:
            self.close()
            raise unreachable(self._name(), self.url, exc) from exc
        for s, kind in zip(self._mine, types, strict=True):
            if kind != b"stream":
                self.close()
                what = (
                    "does not exist" if kind == b"none" else f"is a {kind.decode()}, not a stream"
                )
                raise ConfigError(
                    f"{self._name()}: the Redis key {s!r} on {redact(self.url)} {what}; "
                    "fix the stream's name, or create it first (XADD, or XGROUP CREATE "
                    f"{s} <group> $ MKSTREAM)"
                )
        self._reconnect_to(self.url)
        # acked_position() is asked only with at-least-once state (statestream._resume):
        # an exactly-once run restarts from position() and need not keep each
        # entry's predecessor.
        self._track_before = not context.exactly_once
        self._start({s: _START for s in self._mine}, [], {s: 0 for s in self._mine})

    def _start(
        self, emitted: Mapping[str, str], replay: Sequence[Any], counts: Mapping[str, int] | None
    ) -> None:
        self._drop_ahead()  # read after ids that are not where the spout goes on from
        self._last = dict(emitted)
        name = self._name()
        self._readers = {s: _StreamReader(name, s, self.fields, e) for s, e in emitted.items()}
        self._counts = dict(counts) if counts is not None else None
        self._restart(((s, entry), values) for s, entry, values in replay)
        # A failed entry's predecessor is not known any more: the greatest id below
        # it will do (XREAD after it reads the entry). In stream order, not in the
        # order they failed: acked_position() takes the first one per stream.
        self._before = (
            {(s, e): _id_before(e) for s, e, _ in sorted(replay, key=_id_order)}
            if self._track_before
            else {}
        )

    def _emitted(self, msg_id: Any) -> None:
        s, entry = msg_id
        if self._track_before:
            self._before[msg_id] = self._last[s]
        self._last[s] = entry
        if self._counts is not None:
            self._counts[s] += 1

    def _read(self) -> bool | None:
        """Take the reply of the read in flight (up to ``count`` entries per stream
        after the last one read; sent now if none is), then send the next one. Its
        reply is waited for only when nothing emitted is in flight; otherwise, not
        there yet, nothing is learnt (None) and the pipeline goes on."""
        if self._client is None:
            return None
        import redis

        ahead = self._ahead
        if ahead is None:
            ahead = self._send()
        if self._in_flight and not ahead.done():
            return None
        self._ahead = None
        try:
            reply = ahead.result()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise Lost(exc) from exc
        except redis.ResponseError as exc:
            raise SourceError(f"{self._name()}: XREAD failed on {redact(self.url)}: {exc}") from exc
        for key, entries in reply.items() if isinstance(reply, dict) else reply or ():
            s = key.decode() if isinstance(key, bytes) else str(key)
            self._buffer += self._readers[s].take(entries)
        self._send()
        return not reply

    def _send(self) -> Future[Any]:
        """Send the next read (after the last ids read) on the reader thread."""
        if self._reader is None:
            self._reader = ThreadPoolExecutor(1, f"statestream-read-{self.context.task_id}")
        ahead = self._ahead = self._reader.submit(
            self._client.xread,
            {s: r.after for s, r in self._readers.items()},
            count=self.count,
            block=self.block_ms or None,
        )
        return ahead

    def _drop_ahead(self) -> None:
        """Forget the read ahead (its reply, or its error, is of no use any more)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            wait([ahead])

    def _done(self) -> int | None:
        return None if self._counts is None else sum(self._counts.values())

    def _stream_end(self) -> int | None:
        """The entries ever added to this task's streams (XINFO STREAM): what was
        trimmed before it was read counts as lag until the spout catches up."""
        if self._client is None:
            return None
        pipe = self._client.pipeline(transaction=False)
        for s in self._mine:
            pipe.xinfo_stream(s)
        return sum(int(info["entries-added"]) for info in pipe.execute())

    # -- positions (statestream.Rewindable) ------------------------------------------
    def _position_extra(self) -> dict[str, Any]:
        # The streams' entry counts, for progress() after a restore.
        return {} if self._counts is None else {"counts": dict(self._counts)}

    def position(self) -> Any:
        """Per stream the id of the last entry emitted, and the failed entries (with
        their values) that wait to be emitted again."""
        return self._where(self._last, [[s, e, values] for (s, e), values in self._failed()])

    def acked_position(self) -> Any:
        """Per stream the id before the first entry not yet acked (kept only where the
        run's state is at-least-once, the only runs that ask)."""
        ids = dict(self._last)
        first: set[str] = set()
        for (s, _), before in self._before.items():
            if s not in first:
                first.add(s)
                ids[s] = before
        return self._where(ids, [])

    def seek(self, position: Any) -> None:
        """Continue after ``position`` (from :meth:`position`; None: each stream's start)."""
        if self._client is None:
            raise ConfigError("RedisStreamSpout.seek() before open()")
        if position is None:
            self._start({s: _START for s in self._mine}, [], {s: 0 for s in self._mine})
            return
        # "streams": where a checkpoint stored before the spout was partitioned holds them.
        stored = dict(position.get(PARTITIONS_KEY) or position.get("streams") or {})
        self._check_spread(int(position.get("tasks", 1)), stored)
        self._start(stored, position.get("replay") or [], position.get("counts"))

    # -- read by range (statestream.PartitionedSource) --------------------------------
    def is_partitioned(self) -> bool:
        """Several streams: a partition each (one stream keeps the driver's path)."""
        return len(self.streams) > 1

    def partitions(self) -> Sequence[str]:
        return list(self._mine)

    def end_position(self, partition: str) -> str:
        """The id of the stream's last entry (``0-0`` when it is empty)."""
        import redis

        try:
            last = self._client.xrevrange(partition, count=1)
        except redis.RedisError as exc:
            raise SourceError(
                f"{self._name()}: XREVRANGE {partition} failed on {redact(self.url)}: {exc}"
            ) from exc
        return last[0][0].decode() if last else _START

    def read(self, partition: str, start: str, end: str) -> Iterator[list[str]]:
        """The entries after id ``start`` up to and including id ``end`` (positions
        are the last id read), ``count`` a page."""
        import redis

        reading = _StreamReader(self._name(), partition, self.fields, start)
        while True:
            try:
                page = reading.page(self._client, end, self.count)
            except redis.RedisError as exc:
                raise SourceError(
                    f"{self._name()}: XRANGE {partition} failed on {redact(self.url)}: {exc}"
                ) from exc
            for _, values in page:
                yield values
            if len(page) < self.count:
                return

    def ack(self, msg_id: Any) -> None:
        # The base's ack and the predecessor's, with the key made once.
        key: Any = self._key(msg_id)
        self._in_flight.pop(key, None)
        if self._track_before:
            self._before.pop(key, None)

    def close(self) -> None:
        self._drop_ahead()
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.shutdown()
        if self._client is not None:
            self._client.close()
            self._client = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        # A connection and a reader thread do not travel; open() makes them.
        state.update(_client=None, _reader=None, _ahead=None)
        return state
