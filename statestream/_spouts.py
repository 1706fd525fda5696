"""Spouts shipped with statestream."""

from __future__ import annotations

import codecs
import os
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final

from mypy_extensions import mypyc_attr

from ._components import OutputFieldsDeclarer, Spout, SpoutOutputCollector, TopologyContext
from ._config import settings_of
from ._errors import ConfigError, SourceError, caused_by
from ._folder import Folder

__all__ = ["FileSpout"]

# What a FileSpout pickles besides its instance dict (which the compiled class keeps
# apart from these fields): everything but the open file, the provider state of
# resume=True and the folder's reader, which open() makes again.
_PICKLED: Final = (
    "path",
    "batch_limit",
    "path_key",
    "default_path",
    "strip",
    "encoding",
    "errors",
    "_offset",
    "_next_line",
    "_eof",
    "_in_flight",
    "_replay",
    "resume",
    "save_interval",
    "_saved",
    "_last_save",
    "_task",
    "_tasks",
    "_path",
)


# Compiled with the core (statestream._core): next_tuple and ack run once per line.
# Users subclass it (a spout that counts or gates its lines), hence the attribute.
@mypyc_attr(allow_interpreted_subclasses=True)
class FileSpout(Spout):
    """Emits ``(offset, line)`` for each line of a text file, with the line number as message id.

    Reliable: a failed line is re-read from memory and emitted again; the
    spout is exhausted once it has reached the end of the file and every line
    it emitted has been acked or dead-lettered (a line given up on after the
    retry policy's last attempt is settled as if acked: the acked prefix, and
    a restart, move past it).

    With parallelism N, task ``i`` emits the lines whose number is ``i``
    modulo N (each task reads the file and skips the others' lines), so the
    spout's work spreads over N tasks (over workers, with ``topology.workers``).
    The stored positions are per task and name N: a restart with another
    parallelism is refused rather than losing or repeating lines.

    ``path`` may be given directly or read from the config key ``path_key``
    (so a topology can take its input from ``--set wordcount.input=...``).
    Lines are decoded with ``encoding`` (UTF-8) and ``errors``: with
    ``"strict"`` (the default) a line that does not decode stops the run with a
    :class:`~statestream.SourceError` naming the file, the line and the byte
    offset; ``"replace"`` reads it with U+FFFD in place of each bad byte.

    It implements :class:`~statestream.Rewindable`, on every runtime: with
    exactly-once state the runtime takes its :meth:`position` at each
    checkpoint (the local runtime at a standstill, the Spark driver at the end
    of each batch it reads); with at-least-once state it takes its
    :meth:`acked_position` (the first line not yet acked: Storm's Kafka spout
    commits this offset) when each checkpoint is prepared. After a restart
    (or a rollback) it hands back the one stored with the restored checkpoint
    through :meth:`seek`, so a finished file is not read again and a crash
    re-reads only what was not acked.

    ``resume=True`` is for a topology without stateful bolts, which takes no
    checkpoints to store the position with: the spout then commits its
    :meth:`acked_position` to its own state namespace itself, at most every
    ``save_interval`` seconds (default: a quarter of the checkpoint interval)
    and at close, and ``open`` continues from it. In a stateful topology the
    checkpoint owns the position: once the runtime calls :meth:`seek`, the
    spout stores nothing itself.

    **A folder** (``path`` names a directory): its files are read in name
    order, and the spout is a :class:`~statestream.PartitionedSource` whose
    partitions are the files (task ``i`` of N reads files ``i``, ``i + N``,
    ...). It emits ``(offset, line)`` with the line's byte offset in its file,
    and its position is, per file, the offset of the next unread line. On
    Spark the executors read the files by byte range (a batch covers at most
    ``batch_bytes`` of input, split into one Spark task per core), and the
    driver handles only those offsets; the local runtime reads them as any
    spout. Either runtime continues what the other stored. A file of the
    folder may grow by whole lines; ``resume=True`` is for a single file.
    With ``path_key``, the key ``<path_key>.batch.bytes`` sets ``batch_bytes``.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        path_key: str | None = None,
        default_path: str | Path | None = None,
        strip: bool = True,
        resume: bool = False,
        save_interval: float | None = None,
        encoding: str = "utf-8",
        errors: str = "strict",
        batch_bytes: int = 64 << 20,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.batch_limit = batch_bytes
        """A folder on Spark: the most bytes of input one batch reads."""
        self._folder: Folder | None = None  # a folder: its reader (set in open)
        self.path_key = path_key
        self.default_path = str(default_path) if default_path is not None else None
        self.strip = strip
        self.encoding = encoding
        self.errors = errors
        self._file: IO[bytes] | None = None
        self._offset = 0  # byte offset of the next line
        self._next_line = 0
        self._eof = False
        self._in_flight: dict[int, str] = {}
        self._replay: deque[int] = deque()
        self.resume = resume
        self.save_interval = save_interval
        self._position: Any = None  # resume=True: the provider state holding acked_position()
        self._saved = 0  # resume=True: the line of the acked position saved last
        self._last_save = 0.0
        self._task = 0  # this task's index, and the number of tasks sharing the file
        self._tasks = 1

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["offset", "line"])

    def progress(self) -> tuple[int, int | None] | None:
        """``(bytes read, the file's size now)``, or None before ``open`` (the metrics
        bank's optional spout method, ``statestream.runtime.metrics.ReportsProgress``)."""
        if self._folder is not None:
            return self._folder.progress()
        f = self._file
        if f is None:
            return None
        try:
            size = os.fstat(f.fileno()).st_size
        except (OSError, ValueError):  # closed meanwhile (another thread reads this)
            return None
        return self._offset, size

    def resolve_path(self, conf: Mapping[str, Any]) -> str:
        path = self.path
        if path is None and self.path_key is not None:
            path = conf.get(self.path_key) or self.default_path
        if path is None:
            raise ConfigError(
                f"FileSpout has no input file: pass a path, or set {self.path_key or 'a path key'}"
            )
        return str(path)

    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        super().open(conf, context, collector)
        self._task, self._tasks = context.task_index, context.parallelism
        path = self.resolve_path(conf)
        try:
            codecs.lookup(self.encoding)
            codecs.lookup_error(self.errors)
        except LookupError as exc:
            raise caused_by(
                ConfigError(
                    f"FileSpout {context.component_id!r}: {exc} (encoding={self.encoding!r}, "
                    f"errors={self.errors!r}); errors is 'strict', 'replace', 'ignore', ..."
                ),
                None,
            ) from None
        if os.path.isdir(path):
            if self.path_key is not None and conf.get(f"{self.path_key}.batch.bytes"):
                # The input's key names its batch cap too (a topology's own keys pass
                # through the config): --set wordcount.input.batch.bytes=...
                self.batch_limit = int(conf[f"{self.path_key}.batch.bytes"])
            self._open_folder(path, context)
            return
        try:
            self._file = open(path, "rb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            key = f" (set by {self.path_key})" if self.path_key else ""
            raise caused_by(
                ConfigError(f"cannot read the input file {path!r}{key}: {exc.strerror}"), exc
            ) from exc
        self._path = str(Path(path).resolve())
        if self.resume:
            self._position = context.state()
            stored = self._position.get("position")
            if stored and stored.get("path") == self._path:
                self._check_tasks(stored)
                skip = int(stored["line"])
                self._skip_lines(skip)
                self._next_line = self._saved = skip
            self._last_save = context.clock.monotonic()
            if self.save_interval is None:
                # A quarter of the checkpoint interval: acks of a stateful
                # topology arrive in one burst per commit, and the position
                # should follow that burst closely (what it lags is replayed).
                interval_ms = settings_of(conf).topology_state_checkpoint_interval_ms
                self.save_interval = interval_ms / 4000.0

    def _open_folder(self, path: str, context: TopologyContext) -> None:
        if self.resume:
            raise ConfigError(
                f"FileSpout {context.component_id!r}: resume=True keeps the line of one file, "
                f"but {path!r} is a folder; read it in a stateful topology (its checkpoints "
                "store the position), or name one file"
            )
        strip, encoding, errors = self.strip, self.encoding, self.errors

        def decode(raw: bytes) -> str:
            line = raw.decode(encoding, errors)
            if strip:
                return line.rstrip("\r\n")
            return line[:-2] + "\n" if line.endswith("\r\n") else line

        self._path = str(Path(path).resolve())
        self._folder = Folder(
            self._path,
            context.task_index,
            context.parallelism,
            decode,
            f"FileSpout {context.component_id!r}",
        )

    # -- a folder: statestream.PartitionedSource ------------------------------------------
    def is_partitioned(self) -> bool:
        """Whether this task reads a folder (a partitioned source); known after ``open``."""
        return self._folder is not None

    def partitions(self) -> Sequence[str]:
        """This task's files of the folder, in name order."""
        return self._opened_folder().names

    def end_position(self, partition: str) -> int:
        """The size of file ``partition`` of the folder now."""
        return self._opened_folder().end_position(partition)

    def read(self, partition: str, start: int, end: int) -> Iterator[list[Any]]:
        """``[offset, line]`` of each line of file ``partition`` whose first byte is in
        ``[start, end)`` (statestream._partitioned.read_lines)."""
        return self._opened_folder().read(partition, start, end)

    def _opened_folder(self) -> Folder:
        if self._folder is None:
            raise ConfigError("FileSpout reads by partition only a folder, once open() found one")
        return self._folder

    def next_tuple(self) -> None:
        if self._folder is not None:
            self._folder.next_tuple(self.collector.emit)
            return
        # Saved here, not in ack(): acks come in bursts (one per commit), and
        # the runtime delivers a whole burst before it asks for the next tuple.
        if self._position is not None and self.context.clock.monotonic() - self._last_save >= (
            self.save_interval or 0.0
        ):
            self.save_position()
        if self._replay:
            n = self._replay.popleft()
            self.collector.emit([n, self._in_flight[n]], n)
            return
        if self._eof or self._file is None:
            return
        raw = self._file.readline()
        n = self._next_line
        if self._tasks > 1:
            # The lines of the other tasks: counted, not decoded.
            while raw and n % self._tasks != self._task:
                self._offset += len(raw)
                n += 1
                raw = self._file.readline()
            self._next_line = n
        if not raw:
            self._eof = True
            return
        try:  # _decode, inlined: the call cost ~400 instructions a line (7%)
            line = raw.decode(self.encoding, self.errors)
        except UnicodeDecodeError:
            line = self._decode(raw, n)  # raises, naming the line
        self._next_line = n + 1
        self._offset += len(raw)
        if self.strip:
            line = line.rstrip("\r\n")
        elif line.endswith("\r\n"):
            line = line[:-2] + "\n"
        self._in_flight[n] = line
        # msg_id by position: a compiled collector parses a keyword argument
        # through a generic routine, about 200 instructions a line.
        self.collector.emit([n, line], n)

    def _decode(self, raw: bytes, n: int) -> str:
        try:
            return raw.decode(self.encoding, self.errors)
        except UnicodeDecodeError as exc:
            bad = raw[exc.start : exc.end]
            raise caused_by(
                SourceError(
                    f"FileSpout {self.context.component_id!r}: line {n + 1} of {self._path} is "
                    f"not {self.encoding} (byte offset {self._offset + exc.start}, {bad!r}: "
                    f"{exc.reason}); pass the file's encoding (FileSpout(..., encoding=...)) or "
                    "errors='replace' to read bad bytes as U+FFFD"
                ),
                None,
            ) from None

    def _skip_lines(self, count: int) -> None:
        assert self._file is not None
        for _ in range(count):
            raw = self._file.readline()
            if not raw:
                break
            self._offset += len(raw)

    def _check_tasks(self, stored: Mapping[str, Any]) -> None:
        """Refuse a position stored by another number of tasks: their line numbers
        were split another way."""
        tasks = int(stored.get("tasks", 1))
        if tasks != self._tasks:
            self.close()
            raise ConfigError(
                f"FileSpout {self.context.component_id!r}: the stored position was taken "
                f"with {tasks} task(s) reading {self._path!r}, but this run has "
                f"{self._tasks}; the lines are split by task, so run with parallelism "
                f"{tasks} until the file is done, or start from an empty state store"
            )

    # -- exactly-once positions (statestream.Rewindable) ---------------------------------
    def position(self) -> Any:
        """Where a restart continues: the next line to read, and the lines that
        failed and wait to be emitted again (with their text)."""
        if self._folder is not None:
            return self._folder.position()
        where: dict[str, Any] = {
            "path": self._path,
            "line": self._next_line,
            "replay": [[n, self._in_flight[n]] for n in self._replay],
        }
        if self._tasks > 1:
            where["tasks"] = self._tasks
        return where

    def seek(self, position: Any) -> None:
        """Continue from ``position`` (from :meth:`position`; None: the first line).

        Called after ``open`` and before the first ``next_tuple``.
        """
        if self._folder is not None:
            if position is not None:
                self._check_tasks(position)
            self._folder.seek(position)
            return
        if self._file is None:
            raise ConfigError("FileSpout.seek() before open()")
        line = 0
        replay: list[Any] = []
        if position is not None:
            if position.get("path") != self._path:
                raise ConfigError(
                    f"the checkpoint to restore was taken reading {position.get('path')!r}, "
                    f"but this run reads {self._path!r}: its stored position is a line of "
                    "that file; point the input back, or start from an empty state store "
                    "(statestream state clear)"
                )
            self._check_tasks(position)
            line, replay = int(position["line"]), position.get("replay") or []
        self._file.seek(0)
        self._offset = 0
        self._skip_lines(line)
        self._next_line = line
        self._eof = False
        # In line order (the failed lines are all before ``line``), so that the
        # first line in flight is the lowest: acked_position() reads it there.
        self._in_flight = {int(n): text for n, text in sorted(replay)}
        self._replay = deque(int(n) for n, _ in replay)
        # The checkpoint owns the position now: resume=True stores nothing more.
        self._position = None
        self.resume = False

    def acked_position(self) -> Any:
        """Where a restart continues at-least-once: the first line not yet acked
        (the lines after it are read again, acked or not)."""
        # _in_flight holds the emitted, unacked lines in line order (next_tuple
        # adds them in order, seek() sorts the failed ones), so the lowest is
        # the first: no bookkeeping on the per-line ack() for this.
        if self._folder is not None:
            return self._folder.acked_position()
        line = next(iter(self._in_flight), self._next_line)
        where: dict[str, Any] = {"path": self._path, "line": line}
        if self._tasks > 1:
            where["tasks"] = self._tasks
        return where

    def ack(self, msg_id: Any) -> None:
        if self._folder is not None:
            self._folder.ack(msg_id)
            return
        self._in_flight.pop(msg_id, None)

    def save_position(self) -> None:
        """``resume=True``: commit :meth:`acked_position` to the state provider now."""
        if self._position is None:
            return
        where = self.acked_position()
        if where["line"] != self._saved:
            self._position.put("position", where)
            self._position.commit()
            self._saved = where["line"]
        self._last_save = self.context.clock.monotonic()

    def fail(self, msg_id: Any) -> None:
        if self._folder is not None:
            self._folder.fail(msg_id)
            return
        if msg_id in self._in_flight:
            self._replay.append(msg_id)

    def exhausted(self) -> bool:
        if self._folder is not None:
            return self._folder.exhausted()
        return self._eof and not self._in_flight and not self._replay

    def close(self) -> None:
        if self._position is not None:
            self.save_position()
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._folder is not None:
            self._folder.close()

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = dict(getattr(self, "__dict__", {}))
        for name in _PICKLED:
            if hasattr(self, name):  # _path is set by open()
                state[name] = getattr(self, name)
        state["_file"] = None  # an open file does not travel; open() reopens it
        state["_position"] = None
        state["_folder"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)
