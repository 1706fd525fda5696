"""The folder reader behind :class:`~statestream.FileSpout` given a folder: a partitioned source.

The folder's files, in name order, are the partitions; task ``i`` of ``n``
owns files ``i``, ``i + n``, ... and a file's position is a byte offset:
the lines that start at or after it are unread (a line crossing it was
read, as :func:`~statestream._partitioned.read_lines` splits a file). Read by a spout task (``next_tuple``:
the local runtime and the workers) or by range (:meth:`Folder.read`: Spark's
executors, :mod:`statestream._partitioned`); both emit ``[offset, line]``
with the line's byte offset in its file, so either runtime continues a
position the other stored.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

from ._errors import ConfigError, SourceError
from ._partitioned import PARTITIONS_KEY, read_lines

#: A message id is ``file index << OFFSET_BITS | offset`` (an int: the cheapest to
#: hash and to store in a dead letter).
OFFSET_BITS = 44


def folder_files(folder: str) -> list[str]:
    """The regular files of ``folder`` in name order (hidden ones left out)."""
    return sorted(
        name
        for name in os.listdir(folder)
        if not name.startswith(".") and os.path.isfile(os.path.join(folder, name))
    )


class Folder:
    """One spout task's files of a folder, read line by line or by range.

    ``emit(values, msg_id)`` is the spout collector's; ``describe`` names the
    spout in errors.
    """

    def __init__(
        self,
        folder: str,
        task: int,
        tasks: int,
        decode: Callable[[bytes], str],
        describe: str,
    ) -> None:
        self.folder = folder
        self.tasks = tasks
        self.describe = describe
        self.decode = decode
        names = folder_files(folder)
        self.index = {name: i for i, name in enumerate(names)}
        self.names = names[task::tasks]
        self.at: dict[str, int] = dict.fromkeys(self.names, 0)
        self.current = 0  # the owned file being read
        self.file: IO[bytes] | None = None
        self.in_flight: dict[int, tuple[str, int, str]] = {}
        self.replay: deque[int] = deque()

    # -- read by a spout task ------------------------------------------------------------
    def next_tuple(self, emit: Callable[[list[Any], Any], None]) -> None:
        if self.replay:
            msg_id = self.replay.popleft()
            _, offset, line = self.in_flight[msg_id]
            emit([offset, line], msg_id)
            return
        while self.current < len(self.names):
            name = self.names[self.current]
            f = self.file
            if f is None:
                f = self.file = open(os.path.join(self.folder, name), "rb")  # noqa: SIM115
                at = self.at[name]
                if at > 0:
                    # A position is a range's end (Spark plans byte ranges): the
                    # lines starting at or after it are unread; one crossing it
                    # was read (statestream._partitioned.read_lines).
                    f.seek(at - 1)
                    self.at[name] = at - 1 + len(f.readline())
            raw = f.readline()
            if raw:
                offset = self.at[name]
                self.at[name] = offset + len(raw)
                line = self._line(name, offset, raw)
                msg_id = self.index[name] << OFFSET_BITS | offset
                self.in_flight[msg_id] = (name, offset, line)
                emit([offset, line], msg_id)
                return
            f.close()
            self.file = None
            self.current += 1

    def _line(self, name: str, offset: int, raw: bytes) -> str:
        try:
            return self.decode(raw)
        except UnicodeDecodeError as exc:
            raise SourceError(
                f"{self.describe}: the line at byte {offset} of "
                f"{os.path.join(self.folder, name)} does not decode ({exc.reason} at byte "
                f"{offset + exc.start}); pass the file's encoding (FileSpout(..., "
                "encoding=...)) or errors='replace'"
            ) from None

    def ack(self, msg_id: Any) -> None:
        self.in_flight.pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        if msg_id in self.in_flight:
            self.replay.append(msg_id)

    def exhausted(self) -> bool:
        # By the offsets, not the file being read: on Spark's driver the offsets move
        # by seek (the executors read), and a file may have grown since it was read.
        if self.in_flight or self.replay:
            return False
        return all(self.at[n] >= self.end_position(n) for n in self.names[self.current :])

    def progress(self) -> tuple[int, int | None]:
        return sum(self.at.values()), sum(self.end_position(n) for n in self.names)

    # -- positions (statestream.Rewindable) ----------------------------------------------
    def position(self) -> dict[str, Any]:
        where: dict[str, Any] = {
            "path": self.folder,
            PARTITIONS_KEY: dict(self.at),
            "replay": [list(self.in_flight[m]) for m in self.replay],
        }
        if self.tasks > 1:
            where["tasks"] = self.tasks
        return where

    def acked_position(self) -> dict[str, Any]:
        at = dict(self.at)
        for name, offset, _ in self.in_flight.values():
            if offset < at[name]:
                at[name] = offset
        where: dict[str, Any] = {"path": self.folder, PARTITIONS_KEY: at}
        if self.tasks > 1:
            where["tasks"] = self.tasks
        return where

    def seek(self, position: Mapping[str, Any] | None) -> None:
        at: Mapping[str, Any] = {}
        replay: list[Any] = []
        if position is not None:
            if position.get("path") != self.folder or PARTITIONS_KEY not in position:
                raise ConfigError(
                    f"{self.describe}: the checkpoint to restore was taken reading "
                    f"{position.get('path')!r}, but this run reads the folder {self.folder!r}; "
                    "point the input back, or start from an empty state store "
                    "(statestream state clear)"
                )
            at, replay = position[PARTITIONS_KEY], position.get("replay") or []
        if self.file is not None:
            self.file.close()
            self.file = None
        self.at = {name: int(at.get(name, 0)) for name in self.names}
        # Files read to their end are passed over at once; the first with a line
        # left is where next_tuple goes on.
        self.current = 0
        self.in_flight = {}
        self.replay = deque()
        for name, offset, line in replay:
            msg_id = self.index[name] << OFFSET_BITS | int(offset)
            self.in_flight[msg_id] = (name, int(offset), line)
            self.replay.append(msg_id)

    # -- read by range (statestream.PartitionedSource) ------------------------------------
    def end_position(self, partition: str) -> int:
        try:
            return os.stat(os.path.join(self.folder, partition)).st_size
        except FileNotFoundError:
            raise SourceError(
                f"{self.describe}: {partition!r} was removed from {self.folder!r} while it was "
                "being read; files of a folder source stay until they are read"
            ) from None

    def read(self, partition: str, start: int, end: int) -> Iterator[list[Any]]:
        with open(os.path.join(self.folder, partition), "rb") as f:
            for offset, raw in read_lines(f, start, end):
                yield [offset, self._line(partition, offset, raw)]

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
