"""Windows larger than memory on every provider: a core that spills writes chunks
between checkpoints and reads them back when a window fires; a process that
opens the store afresh after a crash restores it and fires exactly the windows
of a core that kept every tuple in memory (tests/unit/test_window_spill.py has
the cases on the memory provider)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from window_spill import SPECS, events, plain_fires, run_spilling

if TYPE_CHECKING:
    # 'conftest' names a module in several test folders: importing it at run
    # time takes whichever folder's pytest loaded first.
    from conftest import ProviderFactory


@pytest.mark.parametrize("kind", ["sliding event time", "count", "tumbling processing time"])
def test_a_spilled_window_restored_by_a_new_process_fires_as_one_in_memory(
    provider_factory: ProviderFactory, namespace: str, kind: str
) -> None:
    evs = events(160)
    whole = plain_fires(SPECS[kind], evs)
    state = provider_factory().get_state(namespace)
    got = run_spilling(
        SPECS[kind], 4, evs, 90, state, reopen=lambda: provider_factory().get_state(namespace)
    )
    assert got == whole
