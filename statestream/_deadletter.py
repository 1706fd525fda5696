"""The dead-letter file: messages a spout gave up on, one JSON line per message.

A record (:class:`DeadLetter`) says which message (topology, spout, task,
message id, the spout tuple's values), why (the component that failed it,
the last exception's type and message, the attempts) and when. Values the
JSON encoder cannot carry are written as their ``repr`` and their indexes
listed in ``repr_values`` (such a record cannot be replayed exactly).

Lifecycle of a record, in its ``status`` field::

    dead ── statestream deadletter replay ──> replay ── the next run re-emits it,
     ^                                                   its tree is acked ──> replayed
     └───────────── it fails again, to its last attempt ─────┘

Durability: :meth:`DeadLetterFile.append` writes the line, flushes and
fsyncs it before it returns, and only then does the runtime tell the spout
the message is settled. A process killed in between leaves the message
either in the file or not yet settled (it is retried after the restart);
a record equal to one already in the file and not replayed (same topology,
spout task, message id and values) is not written again, so it is never
there twice. The runtime does not skip the file's messages when a spout
emits them again (ids repeat across runs): after a restart the message is
processed again, and if it fails to its last attempt again, it is not
written a second time.

Writers and rewriters take an exclusive ``flock`` on ``<path>.lock``; a
rewrite (a status change) goes through a temporary file and a rename.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from ._config import settings_of
from ._errors import ConfigError, RuntimeFailure
from ._retry import msg_id_key_fast, msg_key
from ._text import count, cut_message

__all__ = [
    "DeadLetter",
    "DeadLetterFile",
    "Replay",
    "Settled",
    "configured_path",
    "default_path",
    "encode_values",
    "fits_stream",
    "identity",
    "missing_file",
]

log = logging.getLogger("statestream")

# Test-only: kill this process right before or after a runtime's dead letter is
# written ("before-write" / "after-write"), to test that the message is then in
# the file once or retried after the restart.
_KILL_AT = os.environ.get("SSTREAM_TEST_DEADLETTER_KILL")

DEFAULT_NAME = "deadletter.jsonl"

DEAD, REPLAY, REPLAYED = "dead", "replay", "replayed"


def default_path(provider: str, provider_config: Any) -> Path:
    """``deadletter.jsonl`` beside the state of the run: in the directory of a
    provider's ``path`` (sqlite's database file), else in the working directory."""
    where = provider_config.get("path") if hasattr(provider_config, "get") else None
    if where and provider != "memory":
        return Path(str(where)).expanduser().parent / DEFAULT_NAME
    return Path(DEFAULT_NAME)


def configured_path(conf: Any) -> Path:
    """The dead-letter file of a run with config ``conf``: ``statestream.deadletter.path``,
    else :func:`default_path` of its state provider."""
    settings = settings_of(conf)
    path = settings.statestream_deadletter_path
    if path:
        return Path(path)
    return default_path(settings.topology_state_provider, settings.topology_state_provider_config)


def missing_file(where: Path, how: str, elsewhere: Sequence[Path] = ()) -> str:
    """The one line of a dead-letter command that finds no file at ``where``.

    ``how`` says how ``where`` was chosen; ``elsewhere`` are dead-letter files
    where another config would have looked (the folders of the working
    directory, the default sqlite store's among them). Without the run's config the command looks where a memory run
    writes, so "nothing was ever dead-lettered" would send the user away from
    a file that is there: name the file looked at and how to name the right one.
    """
    found = [p for p in elsewhere if p.exists() and p.resolve() != where.resolve()]
    head = f"no dead-letter file at {where} ({how})"
    if found:
        return (
            f"{head}; there is one at {found[0]}: name it with --path {found[0]}, or give "
            "the -c/--set the run had"
        )
    return (
        f"{head}: nothing was dead-lettered there. A run writes statestream.deadletter.path, "
        "else deadletter.jsonl beside its sqlite database: give the -c/--set the run had, "
        "or --path FILE"
    )


def _json_or_repr(value: Any) -> tuple[Any, bool]:
    try:
        orjson.dumps(value)
    except TypeError:
        return repr(value), True
    return value, False


def encode_values(values: Sequence[Any]) -> tuple[list[Any], list[int]]:
    """``values`` as JSON can carry them, and the indexes written as their repr."""
    out, lossy = [], []
    for i, v in enumerate(values):
        enc, was_repr = _json_or_repr(v)
        out.append(enc)
        if was_repr:
            lossy.append(i)
    return out, lossy


def _freeze(value: Any) -> Hashable:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return msg_key(value)


def identity(msg_id: Any, values: Sequence[Any]) -> tuple[Hashable, bytes]:
    """How a message is recognised in the file: its id's key and its values' JSON."""
    enc, _ = _json_or_repr(msg_id)
    return _freeze(orjson.loads(orjson.dumps(enc))), orjson.dumps(encode_values(values)[0])


class Settled(dict[Hashable, bytes]):
    """The messages of one spout task given up on in this run (message key ->
    values JSON, see :func:`identity`): a runtime does not deliver one again
    when the spout emits it (a rewind of exactly-once state, or a Spark batch
    read again, replays it) and tells the spout it is settled instead."""

    def add(self, msg_id: Any, values: Sequence[Any]) -> None:
        key, vals = identity(msg_id, values)
        self[key] = vals

    def holds(self, msg_id: Any, values: Sequence[Any]) -> bool:
        """True if this very message (the same id and values) was given up on."""
        known = self.get(msg_id_key_fast(msg_id))
        if known is None:
            key, vals = identity(msg_id, values)
            known = self.get(key)
            return known is not None and known == vals
        return known == identity(msg_id, values)[1]


@dataclass
class DeadLetter:
    """One message given up on (one line of the file)."""

    topology: str
    spout: str
    task: int
    msg_id: Any
    values: list[Any]
    component: str
    error_type: str
    error: str
    attempts: int
    timestamp: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    stream: str = "default"
    status: str = DEAD
    repr_values: list[int] = field(default_factory=list)
    msg_id_repr: bool = False
    at: str | None = None
    """Set when a bolt gave up on one of its inputs (exactly-once, retried in
    place): the bolt's component; ``spout``/``task`` are then the bolt task,
    ``source`` and ``stream`` where the tuple came from, and a replay
    delivers ``values`` to that bolt alone, so nothing else of its tree runs
    twice."""
    source: str | None = None

    @classmethod
    def of(
        cls,
        topology: str,
        spout: str,
        task: int,
        msg_id: Any,
        values: Sequence[Any],
        component: str,
        exc: BaseException | None,
        attempts: int,
        error: str | None = None,
        *,
        stream: str = "default",
        error_type: str | None = None,
        at: str | None = None,
        source: str | None = None,
    ) -> DeadLetter:
        """A record, with the values and message id made JSON (repr where needed).

        The error is ``exc``'s type and message; without ``exc``, ``error_type``
        (by default ``Failed``) and ``error`` (an exception that crossed a
        process boundary as text, or a failure that raised nothing)."""
        enc_values, lossy = encode_values(values)
        enc_id, id_repr = _json_or_repr(msg_id)
        if exc is not None:
            error_type, message = type(exc).__name__, cut_message(str(exc))
        else:
            error_type = error_type or "Failed"
            message = cut_message(error) if error else f"{component} failed the tuple"
        return cls(
            topology,
            spout,
            task,
            enc_id,
            enc_values,
            component,
            error_type,
            message,
            attempts,
            stream=stream,
            repr_values=lossy,
            msg_id_repr=id_repr,
            at=at,
            source=source,
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeadLetter:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def to_json(self) -> bytes:
        data = asdict(self)
        if self.at is None:  # a spout's message: the record as it always was
            del data["at"], data["source"]
        return orjson.dumps(data)

    @property
    def namespace(self) -> str:
        return f"{self.spout}-{self.task}"

    def key(self) -> tuple[str, str, Hashable, bytes]:
        """(topology, spout task namespace, message id key, values JSON): equal records
        are one message."""
        return (self.topology, self.namespace, _freeze(self.msg_id), orjson.dumps(self.values))

    @property
    def exact(self) -> bool:
        """Whether the values and id are the originals (none written as a repr)."""
        return not self.repr_values and not self.msg_id_repr


class DeadLetterFile:
    """The JSON-lines file at ``path`` (created on the first record)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._keys: set[tuple[str, str, Hashable, bytes]] | None = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def records(self) -> list[DeadLetter]:
        """Every record in the file, in order (none if it does not exist)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out = []
        for line in raw.splitlines():
            if not line.strip():
                continue
            try:
                out.append(DeadLetter.from_json(orjson.loads(line)))
            except (orjson.JSONDecodeError, TypeError):
                continue  # a line torn by a crash mid-write: never settled, so retried
        return out

    def append(self, record: DeadLetter) -> bool:
        """Write ``record`` durably (write, flush, fsync); False if the file already
        holds it (the same message, written before a crash)."""
        with self._locked():
            if self._keys is None:
                self._keys = _unsettled(self.records())
            key = record.key()
            if key in self._keys:
                return False
            existed = self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, record.to_json() + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            if not existed:
                _fsync_dir(self.path.parent)
            self._keys.add(key)
            return True

    def give_up(self, record: DeadLetter) -> bool:
        """:meth:`append` ``record`` for a runtime giving up on its message, and say so
        in the log; a file that cannot be written stops the run (RuntimeFailure),
        the message staying unsettled. False if the file held it already."""
        if _KILL_AT == "before-write":
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            written = self.append(record)
        except OSError as exc:
            raise RuntimeFailure(
                f"cannot write the dead-letter file {str(self.path)!r} "
                f"(statestream.deadletter.path): {exc.strerror}; message {record.msg_id!r} "
                f"of spout {record.namespace} stays unsettled"
            ) from exc
        log.warning(
            "%s[%d] gave up on %s %r after %s (%s: %s); %s to %s",
            record.spout,
            record.task,
            "message" if record.at is None else f"its input from {record.source!r}",
            record.msg_id if record.at is None else record.values,
            count(record.attempts, "attempt"),
            record.error_type,
            record.error,
            "dead-lettered" if written else "already in",
            self.path,
        )
        if _KILL_AT == "after-write":
            os.kill(os.getpid(), signal.SIGKILL)
        return written

    def marked_for_replay(self, topology: str, namespaces: Collection[str]) -> list[DeadLetter]:
        """The records of ``topology`` marked for replay whose spout task is one of
        ``namespaces``, in file order: what a run feeds back. A record whose values
        were written as their repr is left (and said in the log); a file that
        cannot be read refuses the run (ConfigError).

        The file's other records are not skipped when a spout emits their
        message again: message ids repeat across runs (a file spout's line
        numbers, a new input, a fresh store), and skipping a message because an
        unrelated run gave up on an identical one would lose it silently."""
        try:
            records = self.records()
        except OSError as exc:
            raise ConfigError(
                f"cannot read the dead-letter file {str(self.path)!r} "
                f"(statestream.deadletter.path): {exc.strerror}"
            ) from exc
        out = []
        for r in records:
            if r.topology != topology or r.namespace not in namespaces or r.status != REPLAY:
                continue
            if r.exact:
                out.append(r)
            else:
                log.warning(
                    "dead letter %r of spout %s cannot be replayed: its values were "
                    "written as their repr",
                    r.msg_id,
                    r.namespace,
                )
        return out

    def replayed(self, records: Iterable[DeadLetter]) -> int:
        """Fed-back ``records`` went through: mark them ``replayed`` (in the file and
        in memory), so that no later run feeds them back. Returns how many changed."""
        done = {r.key(): r for r in records if r.status == REPLAY}
        if not done:
            return 0

        def mark(r: DeadLetter) -> bool:
            if r.status == REPLAY and r.key() in done:
                r.status = REPLAYED
                return True
            return False

        changed = self.update(mark)
        for r in done.values():
            r.status = REPLAYED
        return changed

    def replay_given_up(
        self,
        record: DeadLetter,
        component: str,
        exc: BaseException | None,
        error: str | None,
        attempts: int,
        *,
        error_type: str | None = None,
    ) -> bool:
        """A fed-back ``record`` failed to its last attempt again: ``dead`` again (in
        the file and in memory), with this failure's component, error (as for
        :meth:`DeadLetter.of`), attempts and time. True if the file held it."""
        again = DeadLetter.of(
            record.topology, "", 0, None, (), component, exc, attempts, error, error_type=error_type
        )
        key = record.key()

        def dead(r: DeadLetter) -> bool:
            if r.status != REPLAY or r.key() != key:
                return False
            r.status = DEAD
            r.component, r.error_type, r.error = again.component, again.error_type, again.error
            r.attempts, r.timestamp = attempts, again.timestamp
            return True

        changed = self.update(dead) > 0
        dead(record)
        return changed

    def update(self, change: Callable[[DeadLetter], bool]) -> int:
        """Rewrite the file with ``change`` applied to each record (it returns True
        when it changed the record); returns how many changed."""
        with self._locked():
            records = self.records()
            changed = sum(1 for r in records if change(r))
            if changed:
                tmp = self.path.with_name(self.path.name + ".tmp")
                with open(tmp, "wb") as f:
                    f.write(b"".join(r.to_json() + b"\n" for r in records))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
                _fsync_dir(self.path.parent)
            self._keys = _unsettled(records)
            return changed


class Replay:
    """The message id of a dead letter fed back by ``statestream deadletter replay``:
    a runtime emits its values for its spout task, which never hears of it, and
    tracks it as any message (retries, timeouts); it ends with
    :meth:`DeadLetterFile.replayed` or :meth:`DeadLetterFile.replay_given_up`.
    Hashed by identity: the same object stands for the message across retries."""

    __slots__ = ("record",)

    def __init__(self, record: DeadLetter) -> None:
        self.record = record

    def __repr__(self) -> str:
        return f"replay of {self.record.msg_id!r}"


def fits_stream(record: DeadLetter, fields: int | None, direct: bool) -> bool:
    """Whether ``record`` can go out on its stream as the spout declares it now
    (``fields``: the stream's field count, None when it is gone); says why not
    in the log."""
    if fields is not None and not direct and len(record.values) == fields:
        return True
    log.warning(
        "dead letter %r of spout %s cannot be replayed: its stream %r is gone, "
        "direct, or has other fields now",
        record.msg_id,
        record.namespace,
        record.stream,
    )
    return False


def _unsettled(records: list[DeadLetter]) -> set[tuple[str, str, Hashable, bytes]]:
    """Keys of the records a new one would repeat: those not replayed yet."""
    return {r.key() for r in records if r.status != REPLAYED}


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
