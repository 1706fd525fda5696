"""What every connector needs from its broker or database, once.

* :func:`require`: import a connector's client library, or one error naming
  the extra that installs it.
* :func:`redact`: a URL (or a ``key=value`` DSN) fit for a message (the password hidden).
* :func:`client_name`: what a task's connection is called on its server.
* :func:`unreachable` and :func:`target_unreachable`: the error for a server
  that does not answer (a source's at start; a sink's at start or mid-run,
  :class:`TargetUnreachable`).
* :class:`Reconnect`: the bounded reconnect policy for a server lost mid-run
  (``statestream.connectors.reconnect.secs``): non-blocking for a spout,
  waited out where it stands for a sink's write (:meth:`Reconnect.call`).

Sinks use them as sources do.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

from .._backoff import Backoff, call_retrying
from .._clock import Clock
from .._config import settings_of
from .._errors import ConfigError, RuntimeFailure, SinkError, SourceError

if TYPE_CHECKING:
    from .._components import TopologyContext

__all__ = [
    "Reconnect",
    "TargetUnreachable",
    "client_name",
    "redact",
    "require",
    "target_unreachable",
    "unreachable",
]

log = logging.getLogger("statestream")

T = TypeVar("T")

LIMIT_KEY: Final = "statestream.connectors.reconnect.secs"

# The characters a connection name keeps on every server (Redis refuses spaces
# in CLIENT SETNAME; PostgreSQL shows non-ASCII in application_name as '?').
_NAME_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._:/@-]")
# PostgreSQL keeps the first NAMEDATALEN - 1 bytes of an application_name.
_NAME_MOST: Final = 63


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
    """``url`` with its password (if any) replaced by ``***``, for messages and logs;
    a ``key=value`` DSN (libpq's) has its ``password=`` value hidden."""
    if "://" not in url:
        return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", url)
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
    if isinstance(exc, TargetUnreachable) and exc.__cause__ is not None:
        exc = exc.__cause__  # its own message names the sink and the URL already
    text = str(exc).strip().splitlines()
    return text[0] if text and text[0] else type(exc).__name__


def client_name(context: TopologyContext) -> str:
    """``statestream/<topology>/<component>/<task>``: the name a task's connection
    carries on its server (PostgreSQL's ``application_name``, Redis' ``CLIENT
    SETNAME``, RabbitMQ's ``connection_name``), so that an operator can tell
    whose connection it is, and a test can cut exactly that one. Characters a
    server would refuse become ``_``; at most 63 characters."""
    name = f"statestream/{context.topology_name}/{context.component_id}/{context.task_index}"
    return _NAME_UNSAFE.sub("_", name)[:_NAME_MOST]


def _cannot_reach(connector: str, url: str, exc: BaseException) -> str:
    return (
        f"{connector} cannot reach {redact(url)}: {_reason(exc)}; start the server or fix the URL"
    )


def unreachable(connector: str, url: str, exc: BaseException) -> SourceError:
    """The error (to raise ``from exc``) for a server that does not answer at start."""
    return SourceError(_cannot_reach(connector, url, exc))


class TargetUnreachable(SinkError):
    """A sink's target does not answer. At start (``check_target``) it stops the
    run as any :class:`~statestream.SinkError`; when a sink reconnects mid-run it
    is a lost server, tried again within ``statestream.connectors.reconnect.secs``
    (:class:`~statestream.connectors.TwoPhaseSink`)."""


def target_unreachable(sink: str, url: str, exc: BaseException) -> TargetUnreachable:
    """The error (to raise ``from exc``) for a sink's target that does not answer."""
    return TargetUnreachable(_cannot_reach(sink, url, exc))


class Reconnect:
    """How long a connector keeps trying a server it lost, and when it tries next.

    Two ways to use it. Non-blocking, for a spout, whose ``next_tuple``
    returns at once while its server is away (the other tasks keep
    running): the connector calls :meth:`due` before it talks to the
    server, :meth:`failed` when a call fails with a connection error, and
    :meth:`ok` when one succeeds. Blocking, for a sink's write at COMMIT:
    :meth:`call` repeats the write, waiting on the clock between attempts, as
    a state store's outage is waited out (statestream._outage): nothing can
    commit meanwhile anyway, and a checkpoint failed instead would be
    reported as an error and, in exactly-once mode, rewind the run. The
    waits between attempts are a :class:`~statestream._backoff.Backoff`
    (the store's outage waits: doubling, at most 2 s). Once
    the server has been away for ``limit`` seconds, :meth:`failed` raises
    ``error`` (a :class:`SourceError` by default) naming the connector and
    the server, which stops the run (exit 1): what was committed stays, and
    the next run resumes from it. One warning is logged when an outage
    begins and one when it ends.
    """

    def __init__(
        self,
        connector: str,
        url: str,
        clock: Clock,
        limit: float,
        error: type[RuntimeFailure] = SourceError,
    ) -> None:
        self.connector = connector
        self.url = url
        self.clock = clock
        self.error = error
        self.backoff = Backoff(limit)

    @classmethod
    def from_conf(
        cls,
        connector: str,
        url: str,
        conf: Mapping[str, Any],
        clock: Clock,
        error: type[RuntimeFailure] = SourceError,
    ) -> Reconnect:
        """The policy with ``statestream.connectors.reconnect.secs`` from ``conf``."""
        limit = settings_of(conf).statestream_connectors_reconnect_secs
        return cls(connector, url, clock, limit, error)

    @property
    def down(self) -> bool:
        return self.backoff.down

    def due(self) -> bool:
        """Whether to talk to the server now (always, unless it was lost and the
        next attempt's time has not come). The clock is read only while the server
        is away: a spout asks before every read, and a StepClock moves at each reading."""
        return not self.backoff.down or self.backoff.due(self.clock.monotonic())

    def failed(self, exc: BaseException) -> float:
        """A call failed with a connection error: schedule the next attempt (returns
        its time, the clock's), or raise once the server has been away for the limit."""
        first = not self.backoff.down
        at = self.backoff.failed(self.clock.monotonic())
        if at is not None:
            if first:
                log.warning(
                    "%s lost %s: %s; reconnecting for up to %g s (%s)",
                    self.connector, redact(self.url), _reason(exc), self.backoff.bound_s, LIMIT_KEY,
                )  # fmt: skip
            return at
        raise self.error(
            f"{self.connector} lost {redact(self.url)} and could not reconnect within "
            f"{self.backoff.bound_s:g} s ({LIMIT_KEY}): "
            f"{_reason(exc)}; what was committed stays, run again once the server is back"
        ) from exc

    def ok(self) -> None:
        """A call succeeded: the server is back (or was never away)."""
        since = self.backoff.ok()
        if since is not None:
            log.warning(
                "%s reached %s again after %.1f s; the run goes on",
                self.connector, redact(self.url), self.clock.monotonic() - since,
            )  # fmt: skip

    def call(self, operation: Callable[[], T], lost: Callable[[Exception], bool]) -> T:
        """``operation()``, repeated while it fails with an error ``lost`` says is a lost
        server, waiting on the clock for each next attempt; raises ``error`` once
        past the limit (the last failure attached), and any other error as it is."""

        def failed(exc: Exception) -> float:
            if not lost(exc):
                raise exc
            return self.failed(exc)

        result = call_retrying(operation, self.clock, failed)
        self.ok()
        return result
