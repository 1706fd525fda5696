"""statestream.provider, the provider SDK: complete, public, and all our providers need."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import statestream.provider as sdk
from statestream_providers.memory import MemoryStateProvider
from statestream_providers.redis import RedisStateProvider
from statestream_providers.sqlite import SQLiteStateProvider

PROVIDERS = Path(__file__).resolve().parents[2] / "providers"
PROVIDER_FILES = sorted(PROVIDERS.rglob("*.py"))  # a provider may be a package


def _statestream_imports(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, module)`` of every import of a statestream module (lazy ones too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from statestream import _state` reaches a private module too.
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "statestream"]


def test_the_provider_files_are_found() -> None:
    names = {str(path.relative_to(PROVIDERS)) for path in PROVIDER_FILES}
    assert names >= {"memory.py", "sqlite/backend.py", "redis/backend.py", "redis/lease.py"}


@pytest.mark.parametrize("path", PROVIDER_FILES, ids=lambda path: str(path.relative_to(PROVIDERS)))
def test_providers_import_no_private_statestream_module(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    private = [
        f"{path.name}:{line}: {name}"
        for line, name in _statestream_imports(tree)
        if any(part.startswith("_") for part in name.split(".")[1:])
    ]
    assert not private, (
        "providers import only from statestream and statestream.provider, as a third "
        f"party's would; add what they need to statestream.provider instead: {private}"
    )


def test_the_check_sees_a_private_import() -> None:
    source = (
        "from statestream._state import StoredKeyValueState\n"
        "from statestream import _serde\n"
        "import statestream._errors\n"
        "from statestream.provider import Delta\n"
    )
    names = [name for _, name in _statestream_imports(ast.parse(source))]
    assert "statestream._state" in names
    assert "statestream._serde" in names
    assert "statestream._errors" in names


def test_every_name_in_all_exists() -> None:
    missing = [name for name in sdk.__all__ if not hasattr(sdk, name)]
    assert not missing
    assert len(set(sdk.__all__)) == len(sdk.__all__)


def test_all_covers_what_a_provider_needs() -> None:
    needed = {
        "BackendStateProvider",
        "StateBackend",
        "StoredKeyValueState",
        "CommitOutcome",
        "Delta",
        "Serializer",
        "get_serializer",
        "check_config_keys",
        "config_option",
        "ConfigError",
        "StateError",
        "ProviderUnavailableError",
        "StateCorruptError",
        "SerializationError",
        "KeyValueState",
        "StateProvider",
        "SHARING_PROCESS",
        "SHARING_MACHINE",
        "SHARING_NETWORK",
        "ScopeClaim",
        "StateLockedError",
    }
    assert needed <= set(sdk.__all__)


def test_all_is_everything_public_the_module_defines() -> None:
    public = {name for name in vars(sdk) if not name.startswith("_")} - {"annotations"}
    assert public == set(sdk.__all__)


def test_sharing_constants() -> None:
    assert (sdk.SHARING_PROCESS, sdk.SHARING_MACHINE, sdk.SHARING_NETWORK) == (
        "process",
        "machine",
        "network",
    )
    assert sdk.SHARING_SCOPES == ("process", "machine", "network")


@pytest.mark.parametrize(
    ("cls", "sharing"),
    [
        (MemoryStateProvider, sdk.SHARING_PROCESS),
        (SQLiteStateProvider, sdk.SHARING_MACHINE),
        (RedisStateProvider, sdk.SHARING_NETWORK),
    ],
)
def test_the_builtin_providers_declare_their_sharing(cls: type, sharing: str) -> None:
    assert issubclass(cls, sdk.BackendStateProvider)
    assert cls.sharing == sharing  # type: ignore[attr-defined]
