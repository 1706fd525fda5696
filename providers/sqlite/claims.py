"""The sqlite provider's claims: a flock on a file beside the database (see the package doc)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import sqlite3
from pathlib import Path
from typing import Final
from urllib.parse import quote

from statestream.provider import (
    ProcessClaims,
)

_IN_MEMORY: Final = ":memory:"
_MAX_LOCK_NAME: Final = 200  # bytes of a lock file's name; most file systems allow 255


#: sqlite's primary result codes of a store that is there but cannot be written now.
_UNWRITABLE: Final = {13: "SQLITE_FULL", 10: "SQLITE_IOERR"}


def _cannot_write(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the disk is full or failed (retried as an outage), not a
    lock held past the timeout."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _UNWRITABLE  # extended codes keep the primary in the low byte
    return "disk is full" in str(exc) or "disk I/O error" in str(exc)


def _lock_path(db: Path, scope: str) -> Path:
    """``<db>.<scope quoted>.lock``, absolute, so that every path to the file
    gives one registry key; a scope too long for a file name is hashed."""
    name = f"{db.name}.{quote(scope, safe='')}.lock"
    if len(name.encode()) > _MAX_LOCK_NAME:
        digest = hashlib.sha256(scope.encode()).hexdigest()[:32]
        name = f"{db.name}.{digest}.lock"
    return (db.parent / name).absolute()


class _Claim:
    """This process's flock of one lock file (a :class:`~statestream.provider.Hold`),
    shared by every claim of its scope here."""

    __slots__ = ("fd", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    def end(self) -> None:
        # Unlocked and closed, never deleted: a claimer that opened the file
        # before a deletion would lock a name nobody else can find.
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)

    def __repr__(self) -> str:
        return f"sqlite lock {str(self.path)!r}"


# The scopes this process holds, by lock file. A child holds its parent's
# claims only through the inherited descriptors (kept open: they keep the
# lock while the child lives); see ProcessClaims.
_CLAIMS: ProcessClaims[_Claim] = ProcessClaims()


def _holder(fd: int) -> int | None:
    """The pid written in a lock file, if there is one yet."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
