"""The read cache's budget is shared by the bolts' states only (issue 34): the runtime's
own namespaces (the checkpoint spout's record, the layout) hold a few keys and take no
share, in a topology's scope as well as without one."""

from __future__ import annotations

import pytest

from statestream._registry import SCOPE_SEPARATOR, ScopedProvider, open_provider
from statestream._state import runtime_namespace

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("namespace", "runtimes"),
    [
        ("$checkpointspout-0", True),
        ("$layout", True),
        (f"wordcount{SCOPE_SEPARATOR}$checkpointspout-0", True),
        (f"wordcount{SCOPE_SEPARATOR}$layout", True),
        ("count-0", False),
        (f"wordcount{SCOPE_SEPARATOR}count-0", False),
        (f"a$b{SCOPE_SEPARATOR}count-0", False),  # a '$' in the topology's name only
    ],
)
def test_runtime_namespace(namespace: str, runtimes: bool) -> None:
    assert runtime_namespace(namespace) is runtimes


def test_a_scoped_topologys_own_namespaces_take_no_share() -> None:
    provider = open_provider("memory", {})
    provider.cache_mb = 8
    scoped = ScopedProvider(provider, "wordcount")
    for namespace in ("$layout", "$checkpointspout-0", "count-0", "count-1"):
        scoped.get_state(namespace)
    # The two bolts' states share the 8 MiB: 4 each, not 2 (as when the scoped
    # runtime namespaces, 'wordcount/$layout', were counted as bolts).
    assert scoped.get_state("count-0").cache_bytes == 4 * MIB
    assert scoped.get_state("count-1").cache_bytes == 4 * MIB
