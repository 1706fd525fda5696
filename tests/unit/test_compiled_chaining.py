"""Both cores chain a wrapped exception the same way: the user's exception is the
``__cause__`` of ours ("The above exception was the direct cause").

mypyc drops the ``from`` clause of ``raise X from exc``, so the compiled core
lost the user's exception as ``__cause__`` where the pure-Python core kept it.
The compiled modules therefore raise ``caused_by(X, exc) from exc``; a
reading of their source checks that every ``from`` is doubled so, and a run
checks the chain (on the core this process has).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from statestream import Bolt, RuntimeFailure, TopologyBuilder, run
from statestream._core import COMPILED_MODULES, source_path
from statestream.testing import ListSpout


def _source(module: str) -> tuple[Path, str]:
    # The .py mypyc compiles, by the module's name: a compiled module's own spec
    # may name the group's library folder instead of its package's.
    path = source_path(module)
    return path, path.read_text(encoding="utf-8")


@pytest.mark.parametrize("module", COMPILED_MODULES)
def test_every_from_clause_of_a_compiled_module_is_kept_by_caused_by(module: str) -> None:
    path, source = _source(module)
    dropped = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Raise) or node.cause is None:
            continue
        exc = node.exc
        kept = (
            isinstance(exc, ast.Call)
            and isinstance(exc.func, ast.Name)
            and exc.func.id == "caused_by"
            and len(exc.args) == 2
            and ast.dump(exc.args[1]) == ast.dump(node.cause)
        )
        if not kept:
            dropped.append(f"{path.name}:{node.lineno}")
    assert not dropped, (
        f"mypyc drops these `from` clauses: raise caused_by(X(...), exc) from exc at {dropped}"
    )


class BrokenPrepare(Bolt):
    def prepare(self, conf, context, collector):  # type: ignore[no-untyped-def]
        raise KeyError("no table 'users'")

    def execute(self, tuple):  # type: ignore[no-untyped-def]
        pass


def test_a_failing_prepare_keeps_the_users_exception_as_its_cause() -> None:
    b = TopologyBuilder("broken_prepare")
    b.set_spout("numbers", ListSpout([[1]], fields=["n"]))
    b.set_bolt("broken", BrokenPrepare()).shuffle_grouping("numbers")
    with pytest.raises(RuntimeFailure, match="prepare\\(\\) raised KeyError") as caught:
        run(b.build(), until_idle=True)
    cause = caught.value.__cause__
    assert isinstance(cause, KeyError) and cause.args == ("no table 'users'",)
    assert caught.value.__suppress_context__  # "direct cause", not "during handling"
