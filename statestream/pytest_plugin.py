"""A pytest plugin for users' tests: ``pytest_plugins = ["statestream.pytest_plugin"]``
in the top ``conftest.py``.

It adds one fixture, ``statestream_reset``: a test that asks for it starts
and ends with :func:`statestream.testing.reset` (no sinks, queues, spout
records or memory-provider state left by another test). Put
``pytestmark = pytest.mark.usefixtures("statestream_reset")`` in a module, or
an autouse fixture in your ``conftest.py`` that requests it, to apply it
everywhere. (Not loaded through a ``pytest11`` entry point: pytest would then
rewrite the asserts of the whole installed package in every project's tests.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import testing


@pytest.fixture
def statestream_reset() -> Iterator[None]:
    """Reset statestream's test registries and the memory provider around a test."""
    testing.reset()
    yield
    testing.reset()
