"""Every error statestream raises, in one hierarchy.

::

    StatestreamError                    base of everything below
    ├── ConfigError(ValueError)         a bad config key, type or value; unknown provider
    │   └── ProviderNotFoundError       `topology.state.provider` names nothing installed
    ├── TopologyError(ValueError)       a topology that cannot be built (unknown source,
    │                                   duplicate id, unknown grouping field, reserved name)
    ├── TupleError(ValueError)          a malformed emit: wrong arity, unknown stream,
    │                                   direct emit to a missing task
    ├── ReliabilityError(RuntimeError)  misuse of ack/fail/anchor (twice, foreign task)
    ├── StateError                      a state operation that cannot be honoured
    │   ├── SerializationError(TypeError)  a key or value the serializer cannot encode
    │   ├── ProtocolViolation           prepare n+1 before n committed, and similar
    │   │   └── PrepareRefused          a state's stored txids refuse a checkpoint's PREPARE
    │   │                               (another run writing the same namespaces?)
    │   ├── StateCorruptError           a store that exists but cannot be read
    │   ├── StateLockedError            another run of the topology (or a `state clear`)
    │   │                               holds its store
    │   ├── ProviderUnavailableError(ConnectionError)  the store cannot be reached
    │   └── StoreUnwritableError        the store is there but cannot be written now
    │                                   (a full disk, an I/O error)
    └── RuntimeFailure(RuntimeError)    a runtime could not keep running
        ├── SourceError                 a spout's input cannot be read on (an undecodable
        │                               byte): the run stops instead of skipping it
        ├── SinkError                   a sink's target refuses its rows (a missing table or
        │                               column, a refused row): the run stops
        ├── StoreOutageError            the store stayed unreachable or unwritable for
        │                               statestream.state.outage.secs: the run stops
        └── UnpicklableTupleError       an emitted value pickle cannot carry to another
                                        process (topology.workers > 1, Spark): the run
                                        stops, on every runtime

Control-flow signals are not errors and live apart: :class:`FailedException`
(a bolt asks for its input to be failed and replayed) derives from
``Exception`` only so that it reads naturally in user code, and it is never
reported as an error. :class:`SimulatedCrash` (``statestream.testing``) is
a ``BaseException`` that a runtime treats as the death of its process.

Messages name the thing that is wrong (component, key, file) and say how to
fix it. Backend exceptions (redis, sqlite, py4j) are translated at the
boundary with ``raise ... from exc`` so the original stays attached.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = [
    "ConfigError",
    "FailedException",
    "PrepareRefused",
    "ProtocolViolation",
    "ProviderNotFoundError",
    "ProviderUnavailableError",
    "ReliabilityError",
    "RuntimeFailure",
    "SerializationError",
    "SimulatedCrash",
    "SinkError",
    "SourceError",
    "StateCorruptError",
    "StateError",
    "StateLockedError",
    "StatestreamError",
    "StoreOutageError",
    "StoreUnwritableError",
    "TopologyError",
    "TupleError",
    "UnpicklableTupleError",
]


_E = TypeVar("_E", bound=BaseException)


def caused_by(error: _E, cause: BaseException | None) -> _E:
    """``error`` with ``cause`` as its ``__cause__`` (None: no context shown), to raise.

    The modules mypyc compiles (``statestream._core.COMPILED_MODULES``) raise
    ``raise caused_by(X(...), exc) from exc``: mypyc drops a ``from`` clause,
    so the compiled core would show the user's exception as "During handling
    of the above exception" where the pure-Python core says "The above
    exception was the direct cause". The ``from`` stays for the reader (and
    ruff's B904). Setting ``__cause__`` also sets ``__suppress_context__``, as
    ``from`` does.
    """
    error.__cause__ = cause
    return error


class StatestreamError(Exception):
    """Base class of every error raised by statestream."""


class ConfigError(StatestreamError, ValueError):
    """A configuration key, type or value is wrong; the message names it and the fix."""


class ProviderNotFoundError(ConfigError):
    """The configured state provider is not installed; the message lists what is."""


class TopologyError(StatestreamError, ValueError):
    """The topology cannot be built as declared."""


class TupleError(StatestreamError, ValueError):
    """An emitted tuple does not match what its component declared."""


class ReliabilityError(StatestreamError, RuntimeError):
    """ack/fail/anchor used in a way that would corrupt tuple tracking."""


class StateError(StatestreamError):
    """A state operation could not be honoured."""


class SerializationError(StateError, TypeError):
    """A key or value cannot be encoded by the configured serializer."""


class ProtocolViolation(StateError):
    """A prepare/commit/rollback sequence that the state contract forbids."""


class PrepareRefused(ProtocolViolation):
    """A state refused a checkpoint's ``PREPARE(txid)``: its stored txids do not allow
    it (``txid`` is committed already, or another txid is prepared).

    With one run per topology and store this does not happen; the checkpoint
    fails and the run goes back to its last committed checkpoint. If the same
    namespace refuses again after that, retrying cannot help (something else
    moves its txids: another run of the topology on the same store, most
    likely), and the run stops with a :class:`RuntimeFailure` naming it.
    """


class StateCorruptError(StateError):
    """A state store exists but cannot be read; it is never treated as empty."""


class StateLockedError(StateError):
    """Another run of the topology holds its store: the claim of ``(store, topology)``
    (``claim`` of the provider SDK) was not granted within the wait.

    Two runs of one topology on one store would take turns undoing each
    other's checkpoints. Build it with :meth:`for_scope`, so that the message
    says who holds what and how to go on.
    """

    @classmethod
    def for_scope(
        cls,
        scope: str,
        store: str,
        *,
        pid: int | None = None,
        wait: float | None = None,
        host: str | None = None,
        hint: str | None = None,
    ) -> StateLockedError:
        """The error for topology ``scope`` on ``store`` (a path, a URL), held by ``pid``
        (on ``host``) if known, after waiting ``wait`` seconds if given; ``hint``
        is a last clause of advice the store alone can give (when a lease lapses)."""
        who = " on ".join(part for part in (f"pid {pid}" if pid else "", host or "") if part)
        holder = f" ({who})" if who else ""
        waited = f" and did not let go within {wait:g} s" if wait else ""
        advice = f"; {hint}" if hint else ""
        # Both take the claim: a run for its life, `state clear` while it deletes.
        return cls(
            f"another `statestream run` or `state clear` of topology {scope!r} holds "
            f"{store}{holder}{waited}; wait for it to end or stop it, or run this one under "
            f"another topology name or store{advice}"
        )


class ProviderUnavailableError(StateError, ConnectionError):
    """The state store cannot be reached (after bounded retries)."""


class StoreUnwritableError(StateError):
    """The state store is there but cannot be written now: a full disk, an I/O error.

    As with :class:`ProviderUnavailableError`, the runtime retries the
    operation for ``statestream.state.outage.secs`` (space may be freed)
    before it stops the run with :class:`StoreOutageError`.
    """


class RuntimeFailure(StatestreamError, RuntimeError):
    """A runtime stopped because it could not go on."""


class StoreOutageError(RuntimeFailure):
    """The state store could not be reached or written for
    ``statestream.state.outage.secs``: the run stops (exit 1). What was
    committed stays; the next run resumes from it once the store is back.
    Raised by :mod:`statestream._outage`; a runtime that sees it reported by
    a task stops instead of treating it as that task's failure."""


class UnpicklableTupleError(RuntimeFailure):
    """A component emitted a value that pickle cannot carry: with
    ``topology.workers > 1`` or on Spark tuples cross processes, so every runtime
    checks the first tuple of each (task, stream) alike (:mod:`statestream._picklable`)
    and stops the run, rather than a topology that passes on one process failing
    only at scale-out."""


class SinkError(RuntimeFailure):
    """A sink's target refuses what the sink must write: a table or column that
    is not there, a row the database refuses, a server lost for longer than
    ``statestream.connectors.reconnect.secs``. No retry fixes it, so the run
    stops (exit 1); what was committed stays, and the staged rows are written
    when the next run recovers, once the target is fixed."""


class SourceError(RuntimeFailure):
    """A spout's input cannot be read on. Raised from ``next_tuple``, it stops the
    run (exit 1) rather than being reported and skipped, which would end the
    input early without anyone noticing."""


class FailedException(Exception):
    """Raise from a bolt's ``execute`` to fail the input tuple so it is replayed.

    This is a signal, not an error: the runtime fails the input without
    reporting a traceback.
    """


class SimulatedCrash(BaseException):
    """A process death, raised on purpose by a test (see ``statestream.testing``).

    A ``BaseException`` so that no ``except Exception`` in a runtime or a
    component can swallow it. The local runtime treats it as a real crash: no
    bolt's ``cleanup`` is called and nothing is committed. Unlike a real
    crash, spouts' ``close`` is called so that their sources (an open file)
    are released within the test process, and the store's connection is
    closed, as the operating system would close it. Then it propagates.
    """
