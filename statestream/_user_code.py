"""Errors of the user's topology file while it loads, as one line naming their place.

A syntax error, a failed import or a ``topology()`` that raises is a mistake
in the user's file, not a failure of statestream: the CLI exits 2 with one
line, ``topology file 's.py', line 2: SyntaxError: expected ':'``, and the
whole traceback only with ``--verbose`` (the error keeps the user's
exception as its ``__cause__``). The line is the user's own frame: the
import machinery, statestream and installed libraries are left out, since
the mistake is to be found in the user's code.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ._errors import StatestreamError, TopologyError
from ._text import cut_message

__all__ = ["user_code"]

_OURS = (str(Path(__file__).resolve().parent),)


def _not_users() -> tuple[str, ...]:
    """Folders whose code is not the user's: statestream, the standard library, site-packages."""
    paths = sysconfig.get_paths()
    libs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return _OURS + tuple(str(Path(p).resolve()) for p in sorted(libs))


def _shown(filename: str) -> str:
    """``filename`` relative to the working directory when it is below it."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive (Windows)
        return filename
    return filename if relative.startswith("..") else relative


def _place(exc: BaseException, main_file: Path | None) -> str:
    """Where in the user's code ``exc`` happened: ``line 2`` of the main file, else
    ``path, line 2``; the main file's line first when the error came from deeper."""
    places: list[tuple[str, int]] = []
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith("<") or frame.lineno is None:
            continue  # <frozen importlib._bootstrap> and friends
        resolved = str(Path(frame.filename).resolve())
        if not resolved.startswith(_not_users()):
            places.append((resolved, frame.lineno))
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        places.append((str(Path(exc.filename).resolve()), exc.lineno))
    if not places:
        return ""
    main = str(main_file.resolve()) if main_file is not None else None
    in_main = [line for f, line in places if f == main]
    deepest_file, deepest_line = places[-1]
    if deepest_file == main:
        return f", line {deepest_line}"
    deepest = f"{_shown(deepest_file)}, line {deepest_line}"
    return f", line {in_main[-1]}, from {deepest}" if in_main else f", {deepest}"


def _message(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return exc.msg  # str() repeats the file and line
    return str(exc)


@contextmanager
def user_code(what: str, main_file: Path | None = None) -> Iterator[None]:
    """Run the user's code that loads or builds a topology; its exceptions become one
    :class:`TopologyError` line, ``<what>, line N: Type: message``.

    ``what`` names the thing (``topology file 's.py'``); ``main_file`` is that
    file, whose line is given without its path. statestream's own errors
    (a TopologyError from the builder names the component) pass unchanged.
    """
    try:
        yield
    except StatestreamError:
        raise
    except Exception as exc:
        line = cut_message(f"{type(exc).__name__}: {_message(exc)}")
        raise TopologyError(f"{what}{_place(exc, main_file)}: {line}") from exc
