"""Find a state provider class from what ``topology.state.provider`` says.

A provider spec is one of:

* a registered name: an entry point in the group ``statestream.providers``
  (statestream registers ``memory``, ``sqlite`` and ``redis`` there exactly as
  a third-party package registers its own);
* a dotted path ``package.module:Class`` (or ``package.module.Class``);
* one of Storm's provider class names, kept so that a storm.yaml carries
  over: ``org.apache.storm.redis.state.RedisKeyValueStateProvider`` means
  ``redis`` and ``org.apache.storm.state.InMemoryKeyValueStateProvider``
  means ``memory``.

Storm passes ``topology.state.provider.config`` as a JSON string, so
:func:`open_provider` accepts the config as a mapping or as JSON text.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Final, cast

from statestream._config import settings_of
from statestream._config_kinds import _Invalid, _provider_config
from statestream._errors import ConfigError, ProviderNotFoundError, StateLockedError
from statestream._state import (
    SCOPE_SEPARATOR,
    SHARING_PROCESS,
    SHARING_SCOPES,
    ScopeClaim,
    StateProvider,
    cannot_drop,
)

__all__ = [
    "DEFAULT_PROVIDER",
    "ENTRY_POINT_GROUP",
    "SCOPE_SEPARATOR",
    "STORM_ALIASES",
    "RunClaim",
    "claim_scope",
    "clear_topology",
    "installed_providers",
    "open_provider",
    "parse_provider_config",
    "provider_sharing",
    "resolve_provider",
]

ENTRY_POINT_GROUP: Final = "statestream.providers"
DEFAULT_PROVIDER: Final = "memory"
STORM_ALIASES: Final[Mapping[str, str]] = {
    "org.apache.storm.redis.state.RedisKeyValueStateProvider": "redis",
    "org.apache.storm.state.InMemoryKeyValueStateProvider": "memory",
}


def _entry_points() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def installed_providers() -> list[str]:
    """Names of the providers registered as entry points, sorted."""
    return sorted(_entry_points())


def _not_found(spec: str, why: str) -> ProviderNotFoundError:
    installed = ", ".join(installed_providers()) or "none"
    return ProviderNotFoundError(
        f"state provider {spec!r} {why}; installed providers: {installed} "
        "(or give a class as 'package.module:Class')"
    )


def _check_provider_class(spec: str, obj: object) -> type[StateProvider]:
    if not isinstance(obj, type) or not all(
        callable(getattr(obj, attr, None)) for attr in ("from_config", "get_state", "close")
    ):
        raise _not_found(
            spec,
            f"is {obj!r}, not a state provider class (one with from_config, get_state and close)",
        )
    return obj  # checked structurally above


def resolve_provider(spec: str) -> type[StateProvider]:
    """Return the provider class that ``spec`` names (see the module docstring).

    Raises ProviderNotFoundError, listing the installed names, when nothing
    matches or the class cannot be imported.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise _not_found(str(spec), "is not a provider name")
    spec = spec.strip()
    name = STORM_ALIASES.get(spec, spec)
    entry = _entry_points().get(name)
    if entry is not None:
        try:
            return _check_provider_class(spec, entry.load())
        except ImportError as exc:
            raise _not_found(spec, f"is registered but cannot be imported ({exc})") from exc
    if ":" in name:
        module_name, _, attr = name.partition(":")
    elif "." in name:
        module_name, _, attr = name.rpartition(".")
    else:
        raise _not_found(spec, "is not installed")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise _not_found(spec, f"cannot be imported ({exc})") from exc
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise _not_found(
                spec, f"names nothing: module {module_name!r} has no {attr!r}"
            ) from exc
    return _check_provider_class(spec, obj)


def provider_sharing(spec: str) -> str:
    """Which processes can share the state of the provider ``spec`` names.

    ``spec`` is resolved as :func:`resolve_provider` does (a registered name,
    a Storm alias or ``package.module:Class``); the answer is the class's
    ``sharing`` attribute: ``"process"``, ``"machine"`` or ``"network"``
    (``statestream.provider.SHARING_*``). A class that does not declare one
    counts as ``"process"``, the narrowest scope, so a runtime never spreads
    a provider wider than it promised. A declared value that is not one of
    the three raises ConfigError naming the class.
    """
    cls = resolve_provider(spec)
    sharing = getattr(cls, "sharing", SHARING_PROCESS)
    if sharing not in SHARING_SCOPES:
        raise ConfigError(
            f"state provider {spec!r} ({cls.__module__}.{cls.__qualname__}) declares "
            f"sharing = {sharing!r}; it must be one of {', '.join(map(repr, SHARING_SCOPES))}"
        )
    return str(sharing)


def parse_provider_config(config: Mapping[str, Any] | str | bytes | None) -> dict[str, Any]:
    """Normalise ``topology.state.provider.config`` (mapping, JSON text or None) to a dict,
    through the key's own validator (for a value that did not come through a Config)."""
    if isinstance(config, bytes):
        config = config.decode()
    try:
        return cast(dict[str, Any], _provider_config(config))
    except _Invalid as exc:
        why = exc.detail or f"not {type(config).__name__} {config!r}"
        raise ConfigError(
            f"topology.state.provider.config must be a mapping (or a JSON object): {why}"
        ) from None


def open_provider(
    spec: str = DEFAULT_PROVIDER,
    config: Mapping[str, Any] | str | bytes | None = None,
    *,
    scope: str | None = None,
) -> StateProvider:
    """Resolve ``spec`` and build the provider from ``config`` (mapping or JSON text).

    With ``scope`` (a topology's name, as every runtime passes it) the
    provider only sees that topology's namespaces: see :class:`ScopedProvider`.
    Nothing connects yet: providers open their store on first use.
    """
    provider = resolve_provider(spec).from_config(parse_provider_config(config))
    return provider if scope is None else cast(StateProvider, ScopedProvider(provider, scope))


def claim_scope(provider: Any, scope: str, wait: float) -> ScopeClaim | None:
    """Claim ``scope`` of ``provider``'s store for one run, if the provider can.

    ``provider`` may be a :class:`ScopedProvider` (the claim is its store's).
    A provider without the optional ``claim`` (one written to the
    :class:`StateProvider` protocol alone) cannot tell: None, as from the
    default :meth:`~statestream._state.BackendStateProvider.claim`. Raises
    StateLockedError when another run holds the scope past ``wait`` seconds
    (the runtimes pass ``topology.state.claim.wait.secs``).
    """
    inner = provider.provider if isinstance(provider, ScopedProvider) else provider
    claim = getattr(inner, "claim", None)
    if claim is None:
        return None
    return cast("ScopeClaim | None", claim(scope, wait))


class RunClaim:
    """A run's hold on its topology's scope of the store, as the process that owns
    the run keeps it (LocalRuntime without a link, WorkerSupervisor, Spark's
    driver): asked for once, before any state is read, with the wait
    ``topology.state.claim.wait.secs``, and released once when the run ends."""

    def __init__(self) -> None:
        self.asked = False  # claim_scope was called (its answer may be None)
        self._claim: ScopeClaim | None = None
        self._scope = ""

    def take(self, provider: Any, scope: str, config: Mapping[str, Any]) -> None:
        """Claim ``scope`` of ``provider``'s store, unless this run did already (a
        store opened again within the run, after a rewind, keeps the first
        claim). Raises StateLockedError if another run holds it, or if the
        claim this run took was lost since (see :attr:`lost`)."""
        if self.asked:
            self.check()
            return
        wait = settings_of(config).topology_state_claim_wait_secs
        self._claim = claim_scope(provider, scope, wait)
        self._scope = scope
        self.asked = True

    @property
    def lost(self) -> str | None:
        """Why the claim this run holds was lost while it ran, or None while it holds.

        Only a claim that can end on its own is ever lost: a lease (redis)
        that another process took over, or that lapsed while the store could
        not be reached. Another run may then write the topology's state, so
        the run should stop; the provider has logged it as an error already.
        A file lock (sqlite) and a provider that cannot claim give None.
        """
        lost = getattr(self._claim, "lost", None)
        return None if lost is None else str(lost)

    @property
    def can_lapse(self) -> bool:
        """The claim this run holds can be lost while it runs (a lease): the runtime
        then looks at :attr:`lost` now and then (every second)."""
        claim = self._claim
        return claim is not None and bool(getattr(claim, "can_lapse", hasattr(claim, "lost")))

    def check(self) -> None:
        """Raise StateLockedError if the claim this run holds was lost (:attr:`lost`)."""
        lost = self.lost
        if lost is not None:
            raise StateLockedError(
                f"this run of topology {self._scope!r} lost its claim of the store: {lost}"
            )

    def release(self) -> None:
        """Let the claim go (idempotent); the next :meth:`take` claims again."""
        claim, self._claim = self._claim, None
        self.asked = False
        if claim is not None:
            claim.release()


class ScopedProvider:
    """One topology's view of a provider: namespace ``N`` is stored as ``<scope>/N``.

    Two topologies on one store then never share state or a checkpoint,
    whatever their components are called. Wraps any provider, so providers
    know nothing of topologies.
    """

    def __init__(self, provider: StateProvider, scope: str) -> None:
        self.provider = provider
        self.scope = scope
        self._prefix = scope + SCOPE_SEPARATOR
        self.name = provider.name
        self.sharing = provider.sharing

    def get_state(self, namespace: str) -> Any:
        return self.provider.get_state(self._prefix + namespace)

    def namespaces(self) -> list[str]:
        n = len(self._prefix)
        return [ns[n:] for ns in self.provider.namespaces() if ns.startswith(self._prefix)]

    def forget_state(self, namespace: str) -> None:
        """Forget the cached state of ``namespace`` in this scope
        (:meth:`~statestream._state.BackendStateProvider.forget_state`); nothing
        for a wrapped provider that caches none (it has no ``forget_state``)."""
        forget = getattr(self.provider, "forget_state", None)
        if forget is not None:
            forget(self._prefix + namespace)

    def close(self) -> None:
        self.provider.close()

    def __enter__(self) -> ScopedProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # Provider-specific extras (the memory provider's clear, say); never
        # "provider" itself, which an unpickled instance may not have yet.
        if name == "provider":
            raise AttributeError(name)
        return getattr(self.provider, name)

    def __repr__(self) -> str:
        return f"ScopedProvider({self.provider!r}, scope={self.scope!r})"


def clear_topology(provider: Any, topology: str) -> list[str]:
    """Delete everything ``topology`` keeps in the store of ``provider`` (unscoped):
    each of its namespaces wholly, txids included, in one ``drop_namespaces``,
    so that the next run starts as on a new store. Returns them, sorted.

    Whole namespaces, never keys picked by name: the framework's records
    (``$checkpointspout-0``, ``$layout``...) are namespaces of their own, so
    no key a bolt stores can be taken for one. Topology ``""`` means the
    namespaces written before state was kept by topology. StateError if the
    provider cannot delete state wholly; take the topology's claim first.
    """
    stored = getattr(provider, "stored_namespaces", None)
    drop = getattr(provider, "drop_namespaces", None)
    if stored is None or drop is None:
        raise cannot_drop(str(getattr(provider, "name", type(provider).__name__)))
    found = stored_topologies(stored()).get(topology, [])
    mine = [f"{topology}{SCOPE_SEPARATOR}{ns}" if topology else ns for ns in found]
    drop(mine)
    return mine


def stored_topologies(namespaces: Iterable[str]) -> dict[str, list[str]]:
    """``{topology: its namespaces}`` of a store's namespaces; namespaces written
    before state was scoped by topology are listed under ``""``."""
    found: dict[str, list[str]] = {}
    for ns in namespaces:
        scope, sep, rest = ns.partition(SCOPE_SEPARATOR)
        if sep:
            found.setdefault(scope, []).append(rest)
        else:
            found.setdefault("", []).append(ns)
    return {t: sorted(nss) for t, nss in sorted(found.items())}
