"""The provider conformance suite's fixtures.

Every test module here that takes ``provider_factory`` runs once per
provider. A factory is a :class:`ProviderFactory`: each call builds a *new*
provider instance over the *same* storage, which is how the suite simulates a
process that crashed and restarted (the old instance is simply abandoned,
never closed). All instances are closed and the storage is cleaned when the
test ends.

Providers covered: ``memory``; ``sqlite`` (a file in ``tmp_path``); ``redis``
against the real server on 127.0.0.1:6379 (marker ``redis``; a unique
``key_prefix`` per test, deleted afterwards; skipped when no server answers,
failed instead when ``CI`` is set; see ``tests/redis_server.py``); ``fakeredis``, the same provider on
fakeredis, a fast variant that needs ``lupa`` for the Lua commit script;
``sdk-example``, the example provider in the docstring of
:mod:`statestream.provider`, so that the documented example stays correct.

Adding a provider:

* In this repository: write a ``_make_<name>`` function below returning a
  :class:`ProviderFactory`, and add it to ``_FACTORIES`` (with its marks).
* A third-party provider, without editing anything: install it, then run
  this suite from a statestream checkout with::

      SSTREAM_CONFORMANCE_PROVIDER='mypkg.state:MyProvider' \\
      SSTREAM_CONFORMANCE_CONFIG='{"url": "..."}' \\
      pytest tests/conformance -k external

  The spec is anything ``topology.state.provider`` accepts (an entry-point
  name works too). The variables are deliberately outside the
  ``STATESTREAM_`` prefix: the config layer reads every ``STATESTREAM_*``
  variable as a config key and refuses unknown ones, so they would break
  every ``statestream run`` in the same shell. Each test uses namespaces of its own, so
  the storage does not need to be empty, but it must be the same for every
  instance built from that config (that is what "reopen" means).
* Or copy this directory and override the ``provider_factory`` fixture in
  your own conftest.py.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from redis_server import REDIS_HOST, REDIS_PORT, delete_prefix, require_real_redis, unique_prefix

from statestream._registry import open_provider, parse_provider_config, resolve_provider
from statestream._state import StateProvider

# Not STATESTREAM_*: the config layer would read those as config keys (see above).
ENV_PROVIDER = "SSTREAM_CONFORMANCE_PROVIDER"
ENV_CONFIG = "SSTREAM_CONFORMANCE_CONFIG"


class ProviderFactory:
    """Builds provider instances over one storage; each call is a restart.

    ``factory(**overrides)`` returns a new provider built from the base
    config updated with ``overrides`` (e.g. ``serializer="pickle"``).
    ``spec`` is what ``topology.state.provider`` says for it, so that a run
    of a topology opens the same storage (with ``config``).
    """

    def __init__(
        self,
        name: str,
        make: Callable[[Mapping[str, Any]], StateProvider],
        config: Mapping[str, Any],
        cleanup: Callable[[], None] | None = None,
        spec: str | None = None,
    ) -> None:
        self.name = name
        self.spec = spec or name
        self.config = dict(config)
        self._make = make
        self._cleanup = cleanup
        self._opened: list[StateProvider] = []

    def __call__(self, **overrides: Any) -> StateProvider:
        provider = self._make({**self.config, **overrides})
        self._opened.append(provider)
        return provider

    def __repr__(self) -> str:
        return f"ProviderFactory({self.name!r})"

    def close_all(self) -> None:
        for provider in self._opened:
            provider.close()
        self._opened.clear()
        if self._cleanup is not None:
            self._cleanup()


def _registered(spec: str) -> Callable[[Mapping[str, Any]], StateProvider]:
    return lambda config: open_provider(spec, config)


# ------------------------------------------------------------------ memory


def _make_memory(request: pytest.FixtureRequest, tmp_path: Path) -> ProviderFactory:
    from statestream_providers.memory import MemoryStateProvider

    name = f"conformance-{uuid.uuid4().hex}"
    return ProviderFactory(
        "memory",
        _registered("memory"),
        {"name": name},
        cleanup=lambda: MemoryStateProvider.clear(name),
    )


# ------------------------------------------------------------------ sqlite


def _make_sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> ProviderFactory:
    # synchronous=normal: durable against a process crash, which is what the
    # suite simulates, and much faster than fsyncing every commit.
    config = {"path": str(tmp_path / "data" / "state.db"), "synchronous": "normal"}
    return ProviderFactory("sqlite", _registered("sqlite"), config)


def _make_sqlite_runs(request: pytest.FixtureRequest, tmp_path: Path) -> ProviderFactory:
    """The sqlite provider with every fold written as a sorted run (as a state many
    times its folds' size does) and the runs merged into levels of two: a
    state's entries, then runs of several levels over them (providers/sqlite/runs.py)."""
    from statestream_providers.sqlite import backend, runs

    monkeypatch = request.getfixturevalue("monkeypatch")
    monkeypatch.setattr(backend, "_FOLD_RECORDS", 1)
    monkeypatch.setattr(runs, "RUN_RECORDS", 1)
    monkeypatch.setattr(runs, "DENSE", 0)  # a run whatever the entries' size
    monkeypatch.setattr(runs, "FANOUT", 2)
    monkeypatch.setattr(runs, "BASE_SHARE", 0)  # into the entries only while they are empty
    config = {"path": str(tmp_path / "data" / "state.db"), "synchronous": "normal"}
    return ProviderFactory("sqlite-runs", _registered("sqlite"), config, spec="sqlite")


# ------------------------------------------------------------------ redis


def make_real_redis_factory(**config: Any) -> ProviderFactory:
    require_real_redis()
    prefix = unique_prefix("ssconf")
    base = {"host": REDIS_HOST, "port": REDIS_PORT, "key_prefix": prefix, **config}
    return ProviderFactory("redis", _registered("redis"), base, lambda: delete_prefix(prefix))


def make_fake_redis_factory(**config: Any) -> ProviderFactory:
    fakeredis = pytest.importorskip("fakeredis")
    pytest.importorskip("lupa", reason="fakeredis runs Lua scripts only with lupa installed")
    from statestream_providers.redis import RedisStateProvider

    server = fakeredis.FakeServer()

    class FakeRedisStateProvider(RedisStateProvider):
        def _make_client(self) -> Any:
            return fakeredis.FakeRedis(server=server)

    base = {"key_prefix": "fake:", **config}
    # A run resolves its provider by spec: the class under a module name of its own.
    module = _spec_module()
    cls_name = f"FakeRedis{uuid.uuid4().hex}"
    setattr(module, cls_name, FakeRedisStateProvider)
    spec = f"{module.__name__}:{cls_name}"
    return ProviderFactory("fakeredis", FakeRedisStateProvider.from_config, base, spec=spec)


def _spec_module() -> Any:
    import sys
    import types

    name = "statestream_conformance_specs"
    return sys.modules.setdefault(name, types.ModuleType(name))


def _make_redis(request: pytest.FixtureRequest, tmp_path: Path) -> ProviderFactory:
    return make_real_redis_factory()


def _make_fakeredis(request: pytest.FixtureRequest, tmp_path: Path) -> ProviderFactory:
    return make_fake_redis_factory()


# ------------------------------------------------------------------ the SDK's example

SDK_EXAMPLE_MODULE = "statestream_sdk_example"


def sdk_example_source() -> str:
    """The code of the example provider in the docstring of :mod:`statestream.provider`."""
    import statestream.provider

    doc = statestream.provider.__doc__ or ""
    _, found, rest = doc.partition("A complete provider")
    assert found, "statestream.provider's docstring lost its example provider"
    block = rest.partition("::\n")[2]
    lines = []
    for line in block.splitlines():
        if line.strip() and not line.startswith("    "):
            break
        lines.append(line[4:])
    return "\n".join(lines)


def sdk_example_module() -> Any:
    """The example provider's code as an importable module (built once per session)."""
    import sys
    import types

    module = sys.modules.get(SDK_EXAMPLE_MODULE)
    if module is None:
        module = types.ModuleType(SDK_EXAMPLE_MODULE)
        sys.modules[SDK_EXAMPLE_MODULE] = module  # so that "module:Class" resolves
        exec(compile(sdk_example_source(), "<statestream.provider example>", "exec"), vars(module))
    return module


@pytest.fixture
def sdk_example() -> Any:
    """The SDK example provider's module (a fixture: several test folders have a
    ``conftest`` module, so importing from one by that name is ambiguous)."""
    return sdk_example_module()


def _make_sdk_example(request: pytest.FixtureRequest, tmp_path: Path) -> ProviderFactory:
    module = sdk_example_module()
    store = f"conformance-{uuid.uuid4().hex}"
    cls = resolve_provider(f"{SDK_EXAMPLE_MODULE}:DictStateProvider")
    return ProviderFactory(
        "sdk-example",
        cls.from_config,
        {"store": store},
        cleanup=lambda: module.DictStateProvider.stores.pop(store, None),
        spec=f"{SDK_EXAMPLE_MODULE}:DictStateProvider",
    )


# ------------------------------------------------------------------ third party


def _make_external(request: pytest.FixtureRequest, tmp_path: Path) -> ProviderFactory:
    spec = os.environ[ENV_PROVIDER]
    cls = resolve_provider(spec)
    config = parse_provider_config(os.environ.get(ENV_CONFIG))
    return ProviderFactory(f"external:{spec}", cls.from_config, config, spec=spec)


_Maker = Callable[[pytest.FixtureRequest, Path], ProviderFactory]
_FACTORIES: list[tuple[str, _Maker, tuple[pytest.MarkDecorator, ...]]] = [
    ("memory", _make_memory, ()),
    ("sqlite", _make_sqlite, ()),
    ("sqlite-runs", _make_sqlite_runs, ()),
    ("redis", _make_redis, (pytest.mark.redis,)),
    ("fakeredis", _make_fakeredis, ()),
    ("sdk-example", _make_sdk_example, ()),
]
if os.environ.get(ENV_PROVIDER):
    _FACTORIES.append(("external", _make_external, ()))


@pytest.fixture(
    params=[pytest.param(maker, id=name, marks=marks) for name, maker, marks in _FACTORIES]
)
def provider_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderFactory]:
    """A :class:`ProviderFactory` for each provider under test."""
    factory: ProviderFactory = request.param(request, tmp_path)
    try:
        yield factory
    finally:
        factory.close_all()


@pytest.fixture(
    params=[
        pytest.param(_make_redis, id="redis", marks=pytest.mark.redis),
        pytest.param(_make_fakeredis, id="fakeredis"),
    ]
)
def redis_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderFactory]:
    """Like :func:`provider_factory`, for the redis provider only (real and fake)."""
    factory: ProviderFactory = request.param(request, tmp_path)
    try:
        yield factory
    finally:
        factory.close_all()


@pytest.fixture
def real_redis_factory() -> Iterator[ProviderFactory]:
    """The redis provider on the real server only (mark such tests ``redis``)."""
    factory = make_real_redis_factory()
    try:
        yield factory
    finally:
        factory.close_all()


@pytest.fixture
def conformance_env_names() -> tuple[str, str]:
    """The environment variables that name a third-party provider and its config."""
    return ENV_PROVIDER, ENV_CONFIG


@pytest.fixture
def provider(provider_factory: ProviderFactory) -> StateProvider:
    """One provider instance from :func:`provider_factory`."""
    return provider_factory()


@pytest.fixture
def namespace() -> str:
    """A namespace of this test's own, shaped like a task's (``<component>-<task>``)."""
    return f"bolt{uuid.uuid4().hex[:10]}-0"
