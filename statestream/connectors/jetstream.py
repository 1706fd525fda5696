"""A spout reading a NATS JetStream stream, rewindable by stream sequence (exactly-once).

nats-py is asyncio only, and a spout is called from the runtime's thread:
each spout task runs one event loop in a daemon thread of its own
(:class:`_Reader`), which fetches batches from an ephemeral pull consumer
and hands them over through a bounded queue (its backpressure: the loop
waits while the queue is full). The reading of one stream itself
(:class:`_StreamReader`: fetch, and whether an empty fetch is the end) is
written once, for that loop and for a Spark partition's ``read``.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import orjson

from .._backoff import Backoff
from .._components import OutputFieldsDeclarer, SpoutOutputCollector, TopologyContext
from .._errors import ConfigError, SourceError
from .._partitioned import PARTITIONS_KEY
from ._broker import redact, require, unreachable
from ._source import BrokerSpout, Lost

__all__ = ["JetStreamSpout"]

T = TypeVar("T")
# (generation, stream, batch of (sequence, payload) or the error a fetch met)
_Item = tuple[int, str, "list[tuple[int, bytes]] | BaseException"]
_QUEUE_BATCHES = 8  # batches the loop may read ahead of the spout


async def _quiet(_exc: Exception) -> None:
    """nats-py's error callback: our reader reports errors, not the client's logger."""


async def _subscribe(nc: Any, stream: str, subject: str | None, seq: int) -> Any:
    """An ephemeral pull consumer of ``stream`` (``subject`` only, or all its subjects)
    delivering from sequence ``seq`` on, without acks."""
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    js = nc.jetstream()
    subjects = list((await js.stream_info(stream)).config.subjects or [])
    config = ConsumerConfig(
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=seq,
        ack_policy=AckPolicy.NONE,  # the position is ours, in the checkpoint
        inactive_threshold=30.0,  # an abandoned consumer goes away
    )
    if subject is None:
        config.filter_subjects = subjects
    return await js.pull_subscribe(subject or subjects[0], stream=stream, config=config)


async def _open(url: str) -> Any:
    """A connection to ``url`` without nats-py's own reconnects: a lost server is our
    Reconnect's business (bounded by statestream.connectors.reconnect.secs), and the
    client's own loop would retry its first connect for ever."""
    import nats

    return await nats.connect(
        url,
        connect_timeout=2,
        allow_reconnect=False,
        max_reconnect_attempts=1,
        reconnect_time_wait=0.1,
        error_cb=_quiet,
    )


#: Loops whose tasks did not end when cancelled, kept with them (see _finish).
_ABANDONED: list[tuple[asyncio.AbstractEventLoop, set[asyncio.Task[Any]]]] = []


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is left on the stopped ``loop``, run it to its end, and close the
    loop: a task left pending when a loop closes is reported as destroyed, later, in
    whatever code the collector runs.

    Bounded: nats-py's unsubscribe of a pull consumer has been seen never to return
    after a cancel (1 close in 5 of tests/connectors/test_seek_back.py, with a
    consumer made anew after a fetch that gave up). Such a loop is left open and
    kept, with its tasks, for the life of the process, rather than closing the
    spout hanging or the tasks reported as destroyed in some later code."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        with contextlib.suppress(Exception):
            loop.run_until_complete(asyncio.wait(pending, timeout=2.0))
        if any(not task.done() for task in pending):
            _ABANDONED.append((loop, pending))
            return
    loop.close()


class _StreamReader:
    """One stream read from a sequence on, up to ``count`` messages a fetch, through an
    ephemeral pull consumer on a connection the caller owns (and on its event loop):
    the reading that both the spout's loop thread (:class:`_Reader`) and a Spark
    partition's :meth:`JetStreamSpout.read` do, written once.

    Lifecycle: :meth:`subscribe`, then :meth:`fetch` as often as wanted (asking
    :meth:`at_end` after one that found nothing), then :meth:`close` (idempotent;
    the connection stays the caller's). :attr:`seq` is the sequence of the next
    message to hand over; :attr:`left` the consumer's count of what it has still
    to deliver, as the last message fetched said (None: not known).

    **A fetch that gives up is no proof of the stream's end.** The server may
    deliver a fetch's messages after the client stopped waiting for them: with
    no acks they count as delivered (the consumer's pending count leaves them
    out), yet they only wait in the client's queue for a fetch that may not come.
    Taken as the end, that ended an --until-idle run short of it (a 1 ms fetch
    on a loaded machine). So :meth:`at_end` also compares the stream's last
    sequence (stream info) with :attr:`seq`: entries at or after it that were
    not handed over mean a new consumer from :attr:`seq`, at most once per gap
    (with a subject filter the stream's later entries may all be other
    subjects', which no consumer of ours delivers: the second time it is the end).
    """

    def __init__(
        self, nc: Any, stream: str, subject: str | None, seq: int, count: int, timeout_s: float
    ) -> None:
        self.nc, self.stream, self.subject = nc, stream, subject
        self.seq, self.count, self.timeout_s = seq, count, timeout_s
        self.left: int | None = None
        self._sub: Any = None
        self._resubscribed_at: int | None = None  # the gap a new consumer was made for

    async def subscribe(self) -> None:
        """A consumer delivering from :attr:`seq` on (the one before it, if any, closed)."""
        await self.close()
        self._sub = await _subscribe(self.nc, self.stream, self.subject, self.seq)
        self.left = None

    async def fetch(self, most: int | None = None) -> list[tuple[int, bytes]]:
        """The next messages (at most ``most`` or ``count``) as ``(sequence, payload)``;
        none if none came within the timeout."""
        try:
            msgs = await self._sub.fetch(
                batch=min(self.count, most or self.count), timeout=self.timeout_s
            )
        except TimeoutError:  # nats' own (a subclass) or, past the deadline, the bare one
            if not self.nc.is_connected:
                raise ConnectionError("the connection to the server closed") from None
            return []
        # A refetch after a new consumer may overlap what was handed over already.
        batch = [(n, m.data) for m in msgs if (n := int(m.metadata.sequence.stream)) >= self.seq]
        if msgs:
            self.left = int(msgs[-1].metadata.num_pending)
        if batch:
            self.seq = batch[-1][0] + 1
        return batch

    async def pending(self) -> int:
        """The consumer's count of what it has left to deliver (a round trip)."""
        info = await asyncio.wait_for(self._sub.consumer_info(), self._ask_s)
        self.left = int(info.num_pending)
        return self.left

    async def at_end(self) -> bool:
        """After a fetch that found nothing: whether the stream has nothing more for
        us (see the class docstring). A server slow to answer counts as entries
        left: the next fetch finds out, and notices a server that went away."""
        try:
            if await self.pending():
                return False
            info = await asyncio.wait_for(self.nc.jetstream().stream_info(self.stream), self._ask_s)
        except TimeoutError:
            return False
        if int(info.state.last_seq) < self.seq or self._resubscribed_at == self.seq:
            return True
        # Entries from seq on that no fetch handed over: delivered to one that gave up.
        self._resubscribed_at = self.seq
        await self.subscribe()
        return False

    @property
    def _ask_s(self) -> float:
        return max(self.timeout_s, 0.25)

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):  # a connection gone takes the consumer too
                await sub.unsubscribe()


class _Reader:
    """One task's event loop thread, its NATS connection and one fetching coroutine
    per stream of the task, all handing batches over through one queue.

    Lifecycle: :meth:`connect` (raises at once if the server or a stream is
    not there), :meth:`start` from a sequence per stream (again at every
    seek: the batches of an earlier start still queued are told apart by
    their generation and dropped), :meth:`close` (idempotent; stops the loop
    and joins the thread).
    """

    def __init__(
        self, url: str, streams: Sequence[str], subject: str | None, count: int, block_s: float
    ) -> None:
        self.url, self.streams, self.subject = url, list(streams), subject
        self.count, self.block_s = count, block_s
        self.queue: queue.Queue[_Item] = queue.Queue(maxsize=_QUEUE_BATCHES * len(self.streams))
        self.generation = 0
        # (generation, stream) with a "nothing new" in the queue: one each is enough
        # (more would go stale and tell the spout it caught up after new messages
        # came). By generation: an old fetch's marker must not silence a new one's.
        self.idle_queued: set[tuple[int, str]] = set()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name=f"jetstream-{self.streams[0]}", daemon=True
        )
        self.thread.start()
        self._nc: Any = None
        self._tasks: list[asyncio.Task[None]] = []

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _connect(self) -> None:
        if self._nc is None or self._nc.is_closed:
            self._nc = await _open(self.url)

    async def _info(self, stream: str) -> Any:
        await self._connect()
        return await self._nc.jetstream().stream_info(stream)

    def last_seq(self, streams: Sequence[str] | None = None) -> int:
        """The last sequences of ``streams`` (default: all the task's) summed now
        (round trips: progress asks once a second, the Spark driver once a batch)."""

        async def ask() -> int:
            names = self.streams if streams is None else streams
            return sum([int((await self._info(s)).state.last_seq) for s in names])

        return self.call(ask(), timeout=2.0)

    def connect(self, stream: str) -> None:
        """Connect and ask for ``stream``; raises what nats-py raises."""
        self.call(self._info(stream))

    def start(self, seqs: Mapping[str, int]) -> None:
        """Fetch each stream from its sequence in ``seqs`` on; what an earlier start
        queued is dropped."""
        self.generation += 1
        generation = self.generation

        def begin() -> None:
            for task in self._tasks:
                task.cancel()
            self._tasks = [
                self.loop.create_task(self._fetch(generation, s, seq)) for s, seq in seqs.items()
            ]

        # Room for the new generation's batches is made BEFORE its fetches begin:
        # drained after, the queue could lose the new generation's first batch (its
        # fetch already moved past it), and the spout would read on after a gap of
        # unread entries. What the old fetches put until begin() cancels them
        # carries the old generation, which _read skips.
        while True:
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        self.idle_queued.clear()
        self.loop.call_soon_threadsafe(begin)

    async def _fetch(self, generation: int, stream: str, seq: int) -> None:
        reading: _StreamReader | None = None
        # Unbounded here: the spout's Reconnect, told of each error, bounds the outage.
        backoff = Backoff(first_s=0.05)
        try:
            while True:
                try:
                    if reading is None:
                        await self._connect()
                        reading = _StreamReader(
                            self._nc, stream, self.subject, seq, self.count, self.block_s
                        )
                        await reading.subscribe()
                    batch = await reading.fetch()
                    backoff.ok()
                    if batch:
                        pass
                    elif (generation, stream) in self.idle_queued or not await reading.at_end():
                        continue
                    else:
                        self.idle_queued.add((generation, stream))
                    await self._put((generation, stream, batch))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if reading is not None:
                        seq, reading = reading.seq, None  # a new consumer goes on from there
                    await self._put((generation, stream, exc))
                    now = self.loop.time()
                    at = backoff.failed(now)  # never None: unbounded
                    await asyncio.sleep(0.0 if at is None else at - now)
        finally:
            if reading is not None:
                await reading.close()

    async def _put(self, item: _Item) -> None:
        while True:
            try:
                self.queue.put_nowait(item)
                return
            except queue.Full:
                await asyncio.sleep(0.005)

    async def _stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task  # a task left pending is reported when the loop closes
        if self._nc is not None and not self._nc.is_closed:
            await self._nc.close()
        self._nc = None

    def close(self) -> None:
        if self.loop.is_closed():
            return
        with contextlib.suppress(Exception):  # closing: the connection goes with the loop
            self.call(self._stop(), timeout=5.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5.0)
        if not self.thread.is_alive():
            _finish(self.loop)  # what _stop could not end in time (a loaded machine)


class JetStreamSpout(BrokerSpout):
    """Emits each message of one or more NATS JetStream streams, in stream order.

    What it emits: with one field (``fields=["line"]``, the default) the
    message's payload as UTF-8 text; with several, the named keys of the
    payload read as a JSON object; or whatever ``decoder(payload)`` returns
    (a sequence, one value per output field; give ``output_fields``).
    ``subject`` filters each stream's messages (default: all of them).

    **Exactly-once.** It implements :class:`~statestream.Rewindable`: its
    position is the stream sequence of the next message (plus the failed
    messages waiting to be emitted again), kept in the checkpoint record;
    a restore reads from there through a new ephemeral consumer
    (``deliver_policy=by_start_sequence``, no acks: nothing is kept on the
    server). ``acked_position()`` serves at-least-once state.

    **Several streams, several tasks.** ``stream`` may be a list: task ``i``
    of N reads the streams whose index is ``i`` modulo N, each in its own
    order (a stream is one ordered log, read by one task). More tasks than
    streams is refused; so is a restart whose parallelism differs from the
    one that stored the positions.

    **Partitioned, with several streams.** A list of streams makes it a
    :class:`~statestream.PartitionedSource` (a stream is a partition): on
    Spark the driver asks each stream's last sequence (stream info) and
    stores the one after it with ``PREPARING(t)``; the executors read the
    messages from the stored sequence up to it, ``count`` at a time, through
    an ephemeral pull consumer on a connection of their own.

    **Reading.** A loop thread fetches ``count`` messages at a time ahead of
    the spout (at most 8 batches); ``next_tuple`` waits at most ``block_ms``
    for one when none is ready. With ``--until-idle`` it is exhausted once a
    fetch found nothing new and everything it emitted is acked.

    **Faults.** A server that does not answer at ``open`` stops the run
    (exit 1, the URL named with its password hidden); a stream that does not
    exist is a :class:`~statestream.ConfigError` naming it; a server lost
    mid-run is tried again with backoff for
    ``statestream.connectors.reconnect.secs``, then the run stops.
    ``close`` stops the loop and joins its thread.
    """

    connector = "JetStreamSpout"

    def __init__(
        self,
        stream: str | Sequence[str],
        subject: str | None = None,
        fields: Sequence[str] = ("line",),
        url: str = "nats://127.0.0.1:4222",
        *,
        decoder: Callable[[bytes], Sequence[Any]] | None = None,
        output_fields: Sequence[str] | None = None,
        count: int = 1000,
        block_ms: int = 50,
    ) -> None:
        self.streams = [stream] if isinstance(stream, str) else list(stream)
        if not self.streams:
            raise ConfigError("JetStreamSpout needs at least one stream")
        self.subject = subject
        self.fields = list(fields)
        self.decoder = decoder
        self.output_fields = list(output_fields) if output_fields is not None else self.fields
        if decoder is None and len(self.output_fields) != len(self.fields):
            raise ConfigError(
                f"JetStreamSpout: output_fields {self.output_fields} must name as many fields "
                f"as fields {self.fields}"
            )
        super().__init__(count, block_ms)
        self.url = url
        self._reader: _Reader | None = None
        self._next: dict[str, int] = {}  # stream -> the sequence of the next message to emit
        self._idle: dict[str, bool] = {}  # stream -> its last fetch found nothing new
        self._started = False

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self.output_fields)

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        require("nats", "nats", "JetStreamSpout")
        from nats.js.errors import NotFoundError

        self._take_share(context, self.streams, "stream")
        self._next = {s: 1 for s in self._mine}
        self._idle = {s: False for s in self._mine}
        self._reader = _Reader(
            self.url, self._mine, self.subject, self.count, self.block_ms / 1000.0
        )
        for stream in self._mine:
            try:
                self._reader.connect(stream)
            except NotFoundError:
                self.close()
                raise ConfigError(
                    f"{self._name()}: the JetStream stream {stream!r} does not exist on "
                    f"{redact(self.url)}; fix the name, or create it first (nats stream add "
                    f"{stream} --subjects ...)"
                ) from None
            except Exception as exc:
                self.close()
                raise unreachable(self._name(), self.url, exc) from exc
        self._reconnect_to(self.url)

    def _start(self, seqs: Mapping[str, int], replay: Sequence[Any]) -> None:
        assert self._reader is not None
        self._next = {s: int(seqs[s]) for s in self._mine}
        self._idle = {s: False for s in self._mine}
        self._restart(((s, int(n)), values) for s, n, values in replay)
        # The loop fetches from the first read on, not here: the Spark driver seeks a
        # partitioned spout every batch and never reads it.
        self._started = False

    def _emitted(self, msg_id: Any) -> None:
        self._next[msg_id[0]] = msg_id[1] + 1

    def _read(self) -> bool | None:
        """Move the next batch the loop fetched into the buffer (waiting at most block_ms)."""
        reader = self._reader
        if reader is None:
            return None
        if not self._started:
            reader.start(self._next)
            self._started = True
        try:
            generation, stream, item = reader.queue.get(timeout=self.block_ms / 1000.0)
        except queue.Empty:
            return None
        if generation != reader.generation:
            return None  # fetched for a position given up by a seek
        if isinstance(item, BaseException):
            raise Lost(item)
        if not item:
            reader.idle_queued.discard((generation, stream))
        self._idle[stream] = not item
        after = self._next[stream]
        for n, data in item:
            if n >= after:  # a refetch after a reconnect may overlap
                self._buffer.append(((stream, n), self._decode(stream, n, data)))
        return all(self._idle.values())

    def _done(self) -> int | None:
        return sum(self._next.values()) - len(self._next)

    def _stream_end(self) -> int | None:
        """The streams' last sequences (stream info), asked through the loop thread."""
        reader = self._reader
        return None if reader is None else reader.last_seq()

    def _decode(self, stream: str, n: int, data: bytes) -> list[Any]:
        try:
            if self.decoder is not None:
                return list(self.decoder(data))
            if len(self.fields) == 1:
                return [data.decode()]
            record = orjson.loads(data)
            return [record[f] for f in self.fields]
        except Exception as exc:
            raise SourceError(
                f"{self._name()}: message {n} of stream {stream!r} cannot be read as "
                f"{self.fields if self.decoder is None else 'the decoder wants'}: "
                f"{type(exc).__name__}: {exc}; produce it so, or pass a decoder"
            ) from exc

    # -- positions (statestream.Rewindable) ------------------------------------------
    def position(self) -> Any:
        """Per stream the sequence of the next message, and the failed messages (with
        their values) that wait to be emitted again."""
        return self._where(self._next, [[s, n, values] for (s, n), values in self._failed()])

    def acked_position(self) -> Any:
        """Per stream the sequence of the first message not yet acked."""
        seqs = dict(self._next)
        # The lowest, not the first emitted: the replays of a position come first
        # in the order they failed, which is not the stream's.
        in_flight: Iterable[tuple[str, int]] = self._in_flight  # type: ignore[assignment]
        for s, n in in_flight:
            if n < seqs.get(s, n + 1):
                seqs[s] = n
        return self._where(seqs, [])

    def seek(self, position: Any) -> None:
        """Continue from ``position`` (from :meth:`position`; None: the streams' start)."""
        if self._reader is None:
            raise ConfigError("JetStreamSpout.seek() before open()")
        if position is None:
            self._start({s: 1 for s in self._mine}, [])
            return
        # "streams": where a checkpoint stored before the spout was partitioned holds them.
        stored = dict(position.get(PARTITIONS_KEY) or position.get("streams") or {})
        self._check_spread(int(position.get("tasks", 1)), stored)
        self._start(stored, position.get("replay") or [])

    # -- read by range (statestream.PartitionedSource) --------------------------------
    def is_partitioned(self) -> bool:
        """Several streams: a partition each (one stream keeps the driver's path)."""
        return len(self.streams) > 1

    def partitions(self) -> Sequence[str]:
        return list(self._mine)

    def end_position(self, partition: str) -> int:
        """The sequence after the stream's last message now (1 when it is empty): a
        position is the sequence of the next message to read."""
        if self._reader is None:
            raise ConfigError("JetStreamSpout.end_position() before open()")
        try:
            return self._reader.last_seq([partition]) + 1
        except Exception as exc:
            raise SourceError(
                f"{self._name()}: the info of stream {partition!r} failed on "
                f"{redact(self.url)}: {type(exc).__name__}: {exc}"
            ) from exc

    def read(self, partition: str, start: int, end: int) -> Iterator[list[Any]]:
        """The messages of the stream with a sequence in ``[start, end)``, fetched
        ``count`` at a time by an ephemeral pull consumer from ``start``, on a
        connection and an event loop of the calling thread, both closed when the read
        ends (an executor runs many reads: none may leave a thread or a task)."""
        start, end = int(start), int(end)
        if start >= end:
            return
        loop = asyncio.new_event_loop()
        run = loop.run_until_complete
        nc: Any = None
        try:
            nc = run(_open(self.url))
            reading = _StreamReader(nc, partition, self.subject, start, self.count, 1.0)
            run(reading.subscribe())
            run(reading.pending())
            empty = 0
            # Up to end, while the consumer has messages left (the filter's; None
            # after a new consumer: not known until its first fetch).
            while reading.seq < end and reading.left != 0:
                batch = run(reading.fetch(end - reading.seq))
                if not batch:
                    if run(reading.at_end()):
                        return
                    empty += 1
                    if empty > 30:
                        raise TimeoutError(f"no message in 30 fetches, {reading.left} pending")
                    continue
                empty = 0
                for n, data in batch:
                    if n >= end:
                        return
                    yield self._decode(partition, n, data)
                start = reading.seq
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(
                f"{self._name()}: reading stream {partition!r} from sequence {start} to "
                f"{end} failed on {redact(self.url)}: {type(exc).__name__}: {exc}"
            ) from exc
        finally:
            if nc is not None:
                with contextlib.suppress(Exception):  # closing: the loop goes next
                    loop.run_until_complete(nc.close())
            _finish(loop)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_reader"] = None  # a loop and a connection do not travel; open() makes them
        return state
