"""A test's own look into a sqlite file, closed when done: ``with sqlite3.connect()``
only commits, and an unclosed connection is a ResourceWarning from Python 3.13 on
(an error in this suite, raised in whichever test the collector runs)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["sqlite_file"]


@contextmanager
def sqlite_file(path: Path | str, **kwargs: Any) -> Iterator[sqlite3.Connection]:
    """``sqlite3.connect(path, **kwargs)`` inside one transaction (committed at the
    end, rolled back on an error), then closed."""
    conn = sqlite3.connect(path, **kwargs)
    try:
        with conn:
            yield conn
    finally:
        conn.close()
