"""Run ``python -m statestream ...`` counting what the bolts' states ask their stores.

    PYTHONPATH=TREE python bench/state_probe.py run examples/wordcount.py ...

Each state a provider hands out gets its backend wrapped in a counter (the same
way in any tree, whether its state has batched reads or not): ``load`` calls
(a tuple's miss: one key, one round trip) and ``get_many`` calls and their keys
(a drain's read-ahead). At exit one line on stderr::

    state-probe: loads=N get_many=N keys=N

bench_state_corpora.py ``--probe`` runs the word count through it (the
wrapper's own cost, a Python call a read, is in those runs' times: they are
not the timed ones).
"""

from __future__ import annotations

import atexit
import runpy
import sys
from typing import Any

from statestream import _state

COUNTS = {"loads": 0, "get_many": 0, "keys": 0}


class CountingBackend:
    def __init__(self, inner: Any) -> None:
        self._inner = inner
        if getattr(inner, "get_many", None) is None:
            self.get_many = None

    def load(self, key: bytes) -> Any:
        COUNTS["loads"] += 1
        return self._inner.load(key)

    def get_many(self, keys: Any) -> Any:
        COUNTS["get_many"] += 1
        COUNTS["keys"] += len(keys)
        return self._inner.get_many(keys)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


_get_state = _state.BackendStateProvider.get_state


def get_state(self: Any, namespace: str) -> Any:
    new = namespace not in self._states
    state = _get_state(self, namespace)
    if new and not _state.runtime_namespace(namespace):
        state._backend = CountingBackend(state._backend)
    return state


_state.BackendStateProvider.get_state = get_state  # type: ignore[method-assign]


@atexit.register
def _report() -> None:
    print(
        f"state-probe: loads={COUNTS['loads']} get_many={COUNTS['get_many']} keys={COUNTS['keys']}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    sys.argv = ["statestream", *sys.argv[1:]]
    runpy.run_module("statestream", run_name="__main__")
