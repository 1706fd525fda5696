"""Which implementation of the per-tuple core runs: compiled (mypyc) or pure Python.

The modules in :data:`COMPILED_MODULES` are plain, typed Python that every
build of the package (``pip install -e .``, ``python -m build``, ``pip
install`` of a sdist or a folder) also compiles with mypyc into C extensions
beside them (``setup.py``), with ``_build_info.json``, the digests of the
sources they were built from. Python prefers an extension to a ``.py`` of
the same name, so the compiled core is used whenever it was built and
imports. The pure Python source runs instead, for every one of these
modules at once, when:

* ``STATESTREAM_CORE=python`` is set (CI runs the behaviour tests this way);
* the extensions were not built (no compiler, or the build failed: the
  install goes on without them);
* the sources differ from those the extensions were built from (the digests
  in ``_build_info.json``, next to the installed ``.py`` files: a wheel
  carries it), so an edited checkout never runs stale machine code; ``pip
  install -e .`` rebuilds them.

What :func:`describe` says to do about it depends on where the package is:
a checkout (``setup.py`` beside the package) rebuilds with ``pip install -e
.``; an installed package is reinstalled.

This module must be imported before any of those modules (the package's
``__init__`` does it first). :func:`describe` is the one line the runtimes
and the CLI print at start.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

#: Modules compiled by setup.py, as import names. The order is the build order.
COMPILED_MODULES: Final = (
    "statestream._tuple",
    "statestream._acker",
    "statestream._rotating",
    "statestream._kvfilter",
    "statestream._kventry",
    "statestream._kvjournal",
    "statestream._kvprepared",
    "statestream._kvstate",
    "statestream._kvwalk",
    "statestream._executors",
    # A windowed bolt's per-tuple path: the window model (its tuples released in
    # time order, its triggers) and its incremental store.
    "statestream._window_spec",
    "statestream._window_marks",
    "statestream._windowing",
    "statestream._window_kinds",
    "statestream._window_store",
    "statestream._window_spill",
    "statestream._window_intake",
    # FileSpout: its next_tuple and ack run once per line of every file read.
    "statestream._spouts",
    # The local runtime's per-tuple path, one module per concern; compiled
    # as one group with the rest, so calls and attribute reads between them
    # stay native (the package's __init__ only re-exports, and runs as Python).
    "statestream.runtime.local.acking",
    "statestream.runtime.local.tasks",
    "statestream.runtime.local.spout",
    "statestream.runtime.local.bolt",
    "statestream.runtime.local.support",
    "statestream.runtime.local.host",
    "statestream.runtime.local.base",
    "statestream.runtime.local.runtime",
)

#: The environment variable that selects the implementation: ``python`` or
#: ``compiled`` (an error at import if the compiled core cannot be used).
ENV_VAR: Final = "STATESTREAM_CORE"

#: mypy flags for the mypyc build, on top of the project's strict settings.
#: A first install builds before the dependencies are installed, so every
#: third-party module is missing and typed ``Any`` there; strict mode would
#: then reject code that mypy proper (run in CI with the dependencies) accepts,
#: and the build would fall back to the pure-Python core. These flags relax
#: only the checks that an ``Any`` from a missing module trips; the types
#: mypyc compiles with are the same.
MYPYC_FLAGS: Final = (
    "--ignore-missing-imports",
    "--no-warn-return-any",
    "--allow-subclassing-any",
    "--allow-untyped-decorators",
    "--allow-untyped-calls",
    "--no-warn-unused-ignores",
)
BUILD_INFO: Final = "_build_info.json"

_PACKAGE_DIR: Final = Path(__file__).resolve().parent


def source_path(module: str) -> Path:
    """The ``.py`` file of one of :data:`COMPILED_MODULES`."""
    parts = module.split(".")[1:]
    return _PACKAGE_DIR.joinpath(*parts).with_suffix(".py")


def source_digests(modules: Sequence[str] = COMPILED_MODULES) -> dict[str, str]:
    """SHA-256 of each module's source: what setup.py records and this module compares."""
    return {m: hashlib.sha256(source_path(m).read_bytes()).hexdigest() for m in modules}


def in_checkout() -> bool:
    """Whether the package is a source checkout's (``setup.py`` beside it: an editable
    install or a PYTHONPATH), not an installed copy (a wheel's, a sdist's)."""
    return (_PACKAGE_DIR.parent / "setup.py").is_file()


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Imports the listed modules from their ``.py`` source, never from an extension."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = frozenset(modules)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        src = str(source_path(fullname))
        return importlib.util.spec_from_file_location(
            fullname, src, loader=importlib.machinery.SourceFileLoader(fullname, src)
        )


def _extension_built(module: str) -> bool:
    src = source_path(module)
    return any(
        src.with_name(src.stem + suffix).exists()
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


def _build_record() -> dict[str, object] | None:
    """The build record beside the package (``_build_info.json``), if it reads."""
    try:
        record = json.loads((_PACKAGE_DIR / BUILD_INFO).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _why_not_built(checkout: bool, record: dict[str, object] | None) -> str:
    """Why the compiled core is missing, and what to do, for a checkout or an install
    (the pure-Python wheel records ``"core": "python"``: a choice, not a failure)."""
    if checkout:
        return "the compiled core is not built (pip install -e . builds it with gcc)"
    if record is not None and record.get("core") == "python":
        return (
            "this install is the pure-Python wheel (py3-none-any; no compiled wheel fits "
            "this platform): pip install --no-binary statestream statestream builds the "
            "compiled core where gcc is installed"
        )
    return (
        "the compiled core is not built in this install (it was built without a C "
        "compiler: reinstall it where gcc is installed, or from a wheel that carries it)"
    )


def _why_pure() -> str | None:
    """None if the compiled core can be used, else why not (one phrase)."""
    choice = os.environ.get(ENV_VAR, "").strip().lower()
    if choice not in ("", "python", "compiled"):
        raise ImportError(
            f"{ENV_VAR}={os.environ[ENV_VAR]!r} is not a choice: use 'python' "
            "(the pure-Python core) or 'compiled', or leave it unset"
        )
    if choice == "python":
        return f"{ENV_VAR}=python"
    why: str | None = None
    checkout = in_checkout()
    missing = [m for m in COMPILED_MODULES if not _extension_built(m)]
    record = _build_record()
    if missing:
        why = _why_not_built(checkout, record)
    else:
        recorded = record.get("sources") if record is not None else None
        if recorded is None and not checkout:
            why = (
                f"this install has the compiled core but no {BUILD_INFO} to check it against "
                "(a wheel of an older statestream): reinstall the package"
            )
        elif recorded != source_digests():
            why = (
                "the sources changed since it was built (pip install -e . rebuilds it)"
                if checkout
                else f"the sources changed since it was built (the installed .py files differ "
                f"from those {BUILD_INFO} records): reinstall the package"
            )
    if why is not None and choice == "compiled":
        raise ImportError(f"{ENV_VAR}=compiled, but {why}")
    return why


REASON: Final = _why_pure()
PURE: Final = REASON is not None

if PURE:
    already = [m for m in COMPILED_MODULES if m in sys.modules]
    if already:  # imported before the package: too late to choose
        raise ImportError(f"import statestream before {', '.join(already)}")
    sys.meta_path.insert(0, _SourceFirst(COMPILED_MODULES))


def compiled() -> bool:
    """True if the per-tuple core runs as compiled code."""
    return not PURE


def describe() -> str:
    """One line saying which core is in use, and why when it is not the compiled one."""
    if PURE:
        return f"pure-Python core, because {REASON}"
    return "compiled core (mypyc)"
