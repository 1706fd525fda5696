"""Text for one line of a log, a status line or an error: values are cut, messages kept.

Two kinds of text get long. A *value* (a tuple's repr holding a whole read
buffer, a user's exception that quotes its input) is cut at its end: its head
says what it was and the count says how much was left out. An error
*message* says what is wrong and then what to do, and the fix is at its end
(``... put value.isoformat() and parse it after get``), so a message is kept
whole up to a generous limit, and past it only its middle goes, where the
values it quotes are.
"""

from __future__ import annotations

__all__ = ["MESSAGE_LIMIT", "count", "cut_message", "cut_value", "error_line", "one_line"]

#: The longest message kept whole. statestream's own messages quote values
#: already shortened and stay well below it.
MESSAGE_LIMIT = 600


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, in the plural unless ``n`` is 1: ``1 task``, ``2 tasks``, ``1,000 tasks``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) as one space."""
    return " ".join(text.split())


def cut_value(text: str, limit: int = 200) -> str:
    """A value cut to ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def cut_message(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """A message on one line; past ``limit``, its middle is cut and its end (the fix) kept."""
    text = one_line(text)
    if len(text) <= limit:
        return text
    head = limit // 3
    tail = limit - head
    return f"{text[:head]} ... ({len(text) - limit:,} characters cut) ... {text[-tail:]}"


def error_line(exc: BaseException, limit: int = MESSAGE_LIMIT) -> str:
    """``Type: message`` of ``exc`` on one line, cut as a message."""
    return cut_message(f"{type(exc).__name__}: {exc}", limit)
