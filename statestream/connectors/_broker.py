"""What every connector needs from its broker or database, once.

* :func:`require`: import a connector's client library, or one error naming
  the extra that installs it.
* :func:`redact`: a URL fit for a message (the password hidden).
* :func:`unreachable`: the error for a server that does not answer at start.
* :class:`Reconnect`: the bounded, non-blocking reconnect policy for a server
  lost mid-run (``statestream.connectors.reconnect.secs``).

Sinks use them as sources do.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .._clock import Clock
from .._config import settings_of
from .._errors import ConfigError, SourceError
from .._outage import RetryAt, StoreOutage

__all__ = ["Reconnect", "redact", "require", "unreachable"]


def require(module: str, extra: str, connector: str) -> ModuleType:
    """``import module``, or a :class:`ConfigError` naming ``pip install 'statestream[extra]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"{connector} needs the {module.split('.')[0]!r} package, which is not "
            f"installed: pip install 'statestream[{extra}]'"
        ) from exc


def redact(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, for messages and logs."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL we can parse: show nothing of it that may be secret
        return "<unparseable URL>"
    if not password:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    netloc = f"{user}:***@{host}{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text and text[0] else type(exc).__name__


def unreachable(connector: str, url: str, exc: BaseException) -> SourceError:
    """The error (to raise ``from exc``) for a server that does not answer at start."""
    return SourceError(
        f"{connector} cannot reach {redact(url)}: {_reason(exc)}; start the server or "
        "fix the URL"
    )


class Reconnect:
    """How long a connector keeps trying a server it lost, and when it tries next.

    Non-blocking, so that a spout's ``next_tuple`` returns at once while its
    server is away (the other tasks keep running): the connector calls
    :meth:`due` before it talks to the server, :meth:`failed` when a call
    fails with a connection error, and :meth:`ok` when one succeeds. The
    waits between attempts are the state store's outage policy
    (:class:`~statestream._outage.StoreOutage`: doubling, at most 2 s). Once
    the server has been away for ``limit`` seconds, :meth:`failed` raises a
    :class:`SourceError` naming the server, which stops the run (exit 1):
    what was committed stays, and the next run resumes from it.
    """

    def __init__(self, connector: str, url: str, clock: Clock, limit: float) -> None:
        self.connector = connector
        self.url = url
        self.clock = clock
        self.policy = StoreOutage(redact(url), limit)
        self._next_try = 0.0

    @classmethod
    def from_conf(
        cls, connector: str, url: str, conf: Mapping[str, Any], clock: Clock
    ) -> Reconnect:
        """The policy with ``statestream.connectors.reconnect.secs`` from ``conf``."""
        return cls(connector, url, clock, settings_of(conf).statestream_connectors_reconnect_secs)

    @property
    def down(self) -> bool:
        return self.policy.since is not None

    def due(self) -> bool:
        """Whether to talk to the server now (always, unless it was lost and the
        next attempt's time has not come)."""
        return self.policy.since is None or self.clock.monotonic() >= self._next_try

    def failed(self, exc: BaseException) -> None:
        """A call failed with a connection error: schedule the next attempt, or
        raise once the server has been away for the limit."""
        verdict = self.policy.failed(self.clock.monotonic(), exc)
        if isinstance(verdict, RetryAt):
            self._next_try = verdict.at
            return
        raise SourceError(
            f"{self.connector} lost {redact(self.url)} and could not reconnect within "
            f"{self.policy.bound_s:g} s (statestream.connectors.reconnect.secs): "
            f"{_reason(exc)}; what was committed stays, run again once the server is back"
        ) from exc

    def ok(self) -> None:
        """A call succeeded: the server is back (or was never away)."""
        self.policy.ok()
