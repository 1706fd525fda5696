"""Savepoints: one topology's state exported to a provider-neutral file, and imported
into any store (``statestream state export`` / ``import``, :func:`export_state` /
:func:`import_state`), as Flink's savepoints move a job's state.

The file
========

JSON lines, gzip-compressed when its name ends in ``.gz``::

    {"statestream.savepoint": 1, "topology": "wordcount", "txid": 12,
     "phase": "COMMITTED", "serializer": "json",
     "components": {"count": {"kind": "stateful bolt", "tasks": 2}, ...}}
    {"namespace": "count-0", "txid": 12}          one line per namespace, then
    {"k": "the", "v": 42}                         its committed entries
    ...
    {"namespace": "$checkpointspout-0", "txid": -1}   the checkpoint record, last
    ...
    {"end": {"namespaces": 5, "entries": 1234}}

Every namespace of the topology is in it: each task's committed state (with
its committed txid), the checkpoint record (phase and the spouts' positions),
``$layout`` (the stateful bolts' parallelism), a sink's stage and lineage, a
transactional topology's records. Keys are JSON (tuples as arrays). Values
are JSON (``"v"``) when the store's serializer is ``json``, the default:
readable, and importable into a store with any serializer. With another
serializer (``pickle``) they are the serializer's bytes, base64 (``"b"``), and
import needs a store with the same serializer. Not in it: the sinks' targets
and the dead-letter file, which live outside the store.

Export
======

Export claims the topology's scope of the store, as a run does (it waits for
a run that holds it, ``topology.state.claim.wait.secs``), then settles what
a killed run left prepared exactly as the next start would (a delta the
checkpoint record counts as committed is committed, any other rolled back:
:func:`~statestream._rescale.settle`), so the file holds the state of the
checkpoint a recovery restores, and the record unchanged: an import resumes
there, re-sending a decided commit as a recovery would. It is written to a
temporary file renamed over ``path`` at the end.

Import
======

Import reads the file once to check it whole (a cut file changes nothing),
decides where each component's state goes (:mod:`statestream._savepoint_plan`:
renames, bolts added or removed, parallelism), refuses a store that already
holds state of the topology unless ``force`` (which deletes it first), and
writes under the topology's claim: first a mark in ``$layout`` that an import
is under way, then every namespace (its entries, then its committed txid),
then ``$layout``, then the checkpoint record, and last the mark is deleted. A
run of a stateful topology refuses a store that still has the mark
(:func:`~statestream._rescale.check_import`), so a killed import never passes
for a checkpoint; a failed one deletes what it wrote. With the target
topology known, a stateful bolt whose parallelism changed is then
re-partitioned (:func:`~statestream._rescale.rescale_state`).

The ``memory`` provider keeps state in the process that ran the topology: the
Python API exports and imports it within that process; the CLI, a process
of its own, refuses it (:func:`in_process_refusal`).
"""

from __future__ import annotations

import base64
import gzip
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

import orjson

from ._components import task_namespace
from ._config import Config, settings_of
from ._errors import ConfigError
from ._exactly_once import ACKED_KEY, POSITIONS_KEY, CheckpointRecord
from ._registry import (
    RunClaim,
    ScopedProvider,
    clear_topology,
    open_provider,
    provider_sharing,
    stored_topologies,
)
from ._rescale import (
    IMPORTING_KEY,
    JOURNAL_KEY,
    LAYOUT_NAMESPACE,
    PARALLELISM_KEY,
    check_partitioned,
    rescale_state,
    settle,
)
from ._savepoint_plan import (
    BOLT,
    SPOUT,
    STATEFUL,
    ImportPlan,
    Part,
    exported_parts,
    plan_import,
)
from ._serde import get_serializer
from ._state import SHARING_PROCESS
from ._stateful import CHECKPOINT_SPOUT
from ._text import count
from ._topology import Topology
from .runtime.plan import as_config

__all__ = [
    "FORMAT",
    "VERSION",
    "SavepointReport",
    "export_state",
    "import_state",
    "in_process_refusal",
]

FORMAT: Final = "statestream.savepoint"
"""The header's key: its value is the format's :data:`VERSION`."""
VERSION: Final = 1
_RECORD: Final = task_namespace(CHECKPOINT_SPOUT, 0)
_CHUNK: Final = 20_000  # entries per direct commit on import: bounds the memory held
_BATCH: Final = 4096  # lines per write on export


@dataclass(frozen=True)
class SavepointReport:
    """What :func:`export_state` wrote or :func:`import_state` loaded.

    ``txid`` is the checkpoint a recovery from the savepoint restores (-1:
    none was committed); ``notes`` say, one line each, what an import
    changed on the way (components renamed, left out, started empty,
    re-partitioned).
    """

    topology: str
    txid: int
    namespaces: int
    entries: int
    path: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Header:
    topology: str
    txid: int
    serializer: str
    parts: dict[str, Part]


# --------------------------------------------------------------------------- the store


def in_process_refusal(config: Config, command: str) -> str | None:
    """Why ``statestream state COMMAND`` (a process of its own) cannot reach the store
    ``config`` names: a provider whose state lives in one process (``memory``)."""
    spec = settings_of(config).topology_state_provider
    if provider_sharing(spec) != SHARING_PROCESS:
        return None
    return (
        f"the {spec} state provider keeps state inside the process that ran the topology, "
        f"so `statestream state {command}` (a process of its own) cannot reach it: call "
        f"statestream.{command}_state() in that process, or run on a store that outlives "
        "it (topology.state.provider: sqlite or redis)"
    )


def _config(config: Mapping[str, Any] | None, name: str | None) -> Config:
    return as_config(config, (name,) if name else ())


def _open(conf: Config) -> Any:
    settings = settings_of(conf)
    return open_provider(settings.topology_state_provider, settings.topology_state_provider_config)


def _held(provider: Any) -> dict[str, list[str]]:
    """``{topology: namespaces}``: every namespace the store holds anything of where
    the provider can tell (txids without entries too), else those with entries."""
    stored = getattr(provider, "stored_namespaces", None)
    return stored_topologies(stored() if stored is not None else provider.namespaces())


def _pick(found: Mapping[str, list[str]], name: str | None) -> str:
    named = sorted(t for t in found if t)
    listing = ", ".join(map(repr, named)) or "none"
    if name is None:
        if len(named) == 1:
            return named[0]
        if not named:
            raise ConfigError(
                "the store holds no state of any topology (is it the config the topology ran with?)"
            )
        raise ConfigError(f"the store holds several topologies; pick one: {listing}")
    if name not in found:
        raise ConfigError(
            f"the store holds no state of topology {name!r}; topologies with state: {listing}"
        )
    return name


@contextmanager
def _claimed(provider: Any, name: str, conf: Config) -> Iterator[ScopedProvider]:
    """``name``'s scope of ``provider``, held as a run holds it."""
    claim = RunClaim()
    claim.take(provider, name, conf)
    try:
        yield ScopedProvider(provider, name)
    finally:
        claim.release()


# --------------------------------------------------------------------------- export


def _name_of(topology: Topology | str | None) -> str | None:
    return topology.name if isinstance(topology, Topology) else topology


def export_state(
    path: str | os.PathLike[str],
    topology: Topology | str | None = None,
    config: Mapping[str, Any] | None = None,
) -> SavepointReport:
    """Write the committed state of ``topology`` (a Topology or its name; None: the
    store's only one) in the store ``config`` names to the savepoint ``path``.

    Claims the topology's scope of the store as a run does and settles what a
    killed run left prepared, as its next start would; the file holds the
    checkpoint a recovery restores. Raises ConfigError (no such store or
    topology, a store an import did not finish), StateLockedError (a run
    holds the topology past ``topology.state.claim.wait.secs``).
    """
    name = _name_of(topology)
    conf = _config(config, name)
    with _open(conf) as provider:
        missing = getattr(provider, "missing_store", None)
        where = missing() if missing is not None else None
        if where:
            raise ConfigError(f"no state store at {where}; is it the config the topology ran with?")
        name = _pick(_held(provider), name)
        with _claimed(provider, name, conf) as scoped:
            namespaces = _held(provider).get(name, [])
            if scoped.get_state(LAYOUT_NAMESPACE).get(IMPORTING_KEY) is not None:
                raise ConfigError(
                    f"the state of topology {name!r} is an import that did not finish: "
                    "import it again (--force) before exporting it"
                )
            settle(scoped, [ns for ns in namespaces if ns != _RECORD])
            return _write(Path(path), scoped, name, namespaces)


def _write(path: Path, scoped: ScopedProvider, name: str, namespaces: list[str]) -> SavepointReport:
    record = CheckpointRecord.load(scoped.get_state(_RECORD))
    txid, _ = record.restore_point()
    layout = scoped.get_state(LAYOUT_NAMESPACE).get(PARALLELISM_KEY) or {}
    spouts = {ns for where in (*record.positions.values(), *record.acked.values()) for ns in where}
    serializer = getattr(scoped, "serializer", None)
    kind = "json" if serializer is None else serializer.name
    header = {
        FORMAT: VERSION,
        "topology": name,
        "txid": txid,
        "phase": record.state.phase.value,
        "serializer": kind,
        "components": {
            cid: {"kind": p.kind, "tasks": p.tasks}
            for cid, p in exported_parts(namespaces, layout, spouts).items()
        },
    }
    # The record last: the importer writes it last too.
    ordered = [ns for ns in namespaces if ns != _RECORD] + [_RECORD]
    entries = 0
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with _opened(tmp, "wb", _gz(path)) as out:
            out.write(orjson.dumps(header) + b"\n")
            for ns in ordered:
                kv = scoped.get_state(ns)
                out.write(orjson.dumps({"namespace": ns, "txid": kv.committed_txid}) + b"\n")
                # Written a batch of lines at a time: a gzip file compresses each write.
                batch: list[bytes] = []
                for key, value in kv.items():
                    if serializer is None or kind == "json":
                        line = {"k": key, "v": value}
                    else:
                        line = {"k": key, "b": base64.b64encode(serializer.encode(value)).decode()}
                    batch.append(orjson.dumps(line))
                    if len(batch) >= _BATCH:
                        entries += _flush(out, batch)
                entries += _flush(out, batch)
            end = {"end": {"namespaces": len(ordered), "entries": entries}}
            out.write(orjson.dumps(end) + b"\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"cannot write the savepoint {str(path)!r}: {exc.strerror}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return SavepointReport(name, txid, len(ordered), entries, str(path))


def _flush(out: IO[bytes], batch: list[bytes]) -> int:
    """Write ``batch``'s lines to ``out`` and empty it; how many there were."""
    n = len(batch)
    if n:
        out.write(b"\n".join(batch) + b"\n")
        batch.clear()
    return n


@contextmanager
def _opened(path: Path, mode: str, gz: bool) -> Iterator[IO[bytes]]:
    """``path`` opened in binary ``mode``, through gzip if ``gz``."""
    with gzip.open(path, mode) if gz else open(path, mode) as f:
        yield f  # type: ignore[misc]


# --------------------------------------------------------------------------- the file


def _gz(path: Path) -> bool:
    return path.name.endswith(".gz")


def _bad(path: Path, line: int, why: str) -> ConfigError:
    return ConfigError(
        f"{str(path)!r} line {line:,}: {why}; give a file `statestream state export` wrote"
    )


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The file's lines, numbered from 1, each a JSON object."""
    try:
        with _opened(path, "rb", _gz(path)) as f:
            for n, raw in enumerate(f, 1):
                try:
                    item = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    raise _bad(path, n, "not JSON") from None
                if not isinstance(item, dict):
                    raise _bad(path, n, "not a JSON object")
                yield n, item
    except (OSError, EOFError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"cannot read the savepoint {str(path)!r}: {why}") from exc


def _header(path: Path, n: int, item: dict[str, Any]) -> _Header:
    version = item.get(FORMAT)
    if n != 1 or version is None:
        raise ConfigError(
            f"{str(path)!r} is not a statestream savepoint (its first line has no "
            f"{FORMAT!r}); give a file `statestream state export` wrote"
        )
    if version != VERSION:
        raise ConfigError(
            f"{str(path)!r} is a savepoint of format {version!r}; this statestream reads "
            f"format {VERSION}: import it with the statestream that exported it, or a newer one"
        )
    try:
        parts = {
            str(cid): Part(str(p["kind"]), int(p["tasks"]))
            for cid, p in dict(item["components"]).items()
        }
        return _Header(str(item["topology"]), int(item["txid"]), str(item["serializer"]), parts)
    except (KeyError, TypeError, ValueError) as exc:
        raise _bad(path, 1, f"its header lacks or mangles {exc}") from None


def _check_file(path: Path) -> _Header:
    """Read the whole file once: a header, sections of entries, the end line whose
    counts match. ConfigError naming the line otherwise (a file cut short too)."""
    header: _Header | None = None
    namespaces = entries = 0
    last = 0
    for n, item in _lines(path):
        last = n
        if header is None:
            header = _header(path, n, item)
        elif "end" in item:
            end = item["end"]
            if end != {"namespaces": namespaces, "entries": entries}:
                raise _bad(
                    path,
                    n,
                    f"its end counts {end}, the file holds {namespaces} "
                    f"namespaces and {entries} entries",
                )
            return header
        elif "namespace" in item:
            if not isinstance(item["namespace"], str) or type(item.get("txid")) is not int:
                raise _bad(path, n, "a namespace line needs a str namespace and an int txid")
            namespaces += 1
        elif "k" in item and ("v" in item or "b" in item) and namespaces:
            entries += 1
        else:
            raise _bad(path, n, "neither a namespace, an entry nor the end")
    if header is None:
        raise ConfigError(f"{str(path)!r} is empty; give a file `statestream state export` wrote")
    raise _bad(path, last, "the file ends before its end line (cut short?)")


def _key(plain: Any) -> Any:
    """A key read from JSON as the state wants it: arrays as tuples."""
    return tuple(map(_key, plain)) if isinstance(plain, list) else plain


# --------------------------------------------------------------------------- import


def _target_parts(topology: Topology) -> dict[str, Part]:
    parts = {}
    for cid, spec in topology.components.items():
        if cid.startswith("$"):
            continue  # the runtime's own: no user name to rename to
        kind = STATEFUL if spec.is_stateful else SPOUT if spec.is_spout else BOLT
        parts[cid] = Part(kind, spec.parallelism)
    return parts


def _check_serializer(header: _Header, provider: Any, path: Path) -> None:
    serializer = getattr(provider, "serializer", None)
    have = "json" if serializer is None else serializer.name
    if header.serializer != "json" and header.serializer != have:
        raise ConfigError(
            f"the values in {str(path)!r} are {header.serializer}-encoded and the target store "
            f"encodes with {have}: set serializer: {header.serializer} in its "
            "topology.state.provider.config"
        )


def import_state(
    path: str | os.PathLike[str],
    topology: Topology | str | None = None,
    config: Mapping[str, Any] | None = None,
    *,
    rename: Mapping[str, str] | None = None,
    drop: bool = False,
    force: bool = False,
) -> SavepointReport:
    """Load the savepoint ``path`` into the store ``config`` names, for ``topology``.

    ``topology``: the Topology the state goes into (checked against the
    savepoint: ``rename`` maps an exported component to its new name, a
    stateful bolt without state in it starts empty, a component it lacks is
    refused unless ``drop`` leaves its state out, a parallelism change is
    re-partitioned); or a name (imported as it is under that name); or None
    (under the savepoint's own name). A store that holds state of the
    topology already is refused unless ``force``, which deletes that state
    first. Raises ConfigError with one line naming the problem and the fix.
    """
    src = Path(path)
    header = _check_file(src)
    target = topology if isinstance(topology, Topology) else None
    name = _name_of(topology) or header.topology
    plan = plan_import(
        header.topology,
        header.parts,
        _target_parts(target) if target is not None else None,
        topology=name,
        renames=rename,
        drop=drop,
    )
    if target is not None:
        for cid, _, _ in plan.rescaled:
            check_partitioned(target.components[cid])
    conf = _config(config, name)
    with _open(conf) as provider:
        _check_serializer(header, provider, src)
        with _claimed(provider, name, conf) as scoped:
            held = _held(provider).get(name, [])
            if held and not force:
                raise ConfigError(
                    f"the store already holds state of topology {name!r} "
                    f"({count(len(held), 'namespace')}): delete it first (statestream state "
                    f"clear --topology {name}), import into another store, or replace it "
                    "with --force"
                )
            if held:
                clear_topology(provider, name)
            try:
                namespaces, entries = _load(src, header, plan, scoped)
            except BaseException:
                clear_topology(provider, name)  # no half-imported store left behind
                raise
            notes = list(plan.notes)
            if target is not None and target.has_stateful_bolts:
                notes += [
                    f"re-partitioned: {r.component!r} from {r.old} to {count(r.new, 'task')} "
                    f"({count(r.moved, 'key')} moved)"
                    for r in rescale_state(scoped, target)
                ]
    return SavepointReport(name, header.txid, namespaces, entries, str(src), tuple(notes))


def _load(src: Path, header: _Header, plan: ImportPlan, scoped: Any) -> tuple[int, int]:
    """Write the savepoint's namespaces (see the module docstring for the order)."""
    layout = scoped.get_state(LAYOUT_NAMESPACE)
    layout.put(IMPORTING_KEY, {"file": str(src), "txid": header.txid})
    layout.commit()
    decode = None if header.serializer == "json" else get_serializer(header.serializer).decode
    held: dict[str, dict[Any, Any]] = {}  # $layout's and the record's entries, written last
    into: Any = None  # a namespace's state, or a dict of held entries; None: left out
    txid = -1
    namespaces = entries = pending = 0
    for n, item in _lines(src):
        if n == 1:
            continue  # the header, read by _check_file
        if "k" in item:
            if into is None:
                continue
            value = item["v"] if decode is None else decode(base64.b64decode(item["b"]))
            entries += 1
            if isinstance(into, dict):
                into[_key(item["k"])] = value
                continue
            into.put(_key(item["k"]), value)
            pending += 1
            if pending >= _CHUNK:
                into.commit()
                pending = 0
            continue
        if into is not None and not isinstance(into, dict):
            _finish(into, txid)
        into, pending = None, 0
        if "end" in item:
            break
        ns, txid = plan.namespace(item["namespace"]), item["txid"]
        if ns is not None:
            namespaces += 1
            into = held.setdefault(ns, {}) if ns in (LAYOUT_NAMESPACE, _RECORD) else None
            if into is None:
                into = scoped.get_state(ns)
    _write_layout(layout, held.get(LAYOUT_NAMESPACE, {}), plan)
    record = scoped.get_state(_RECORD)
    for key, value in held.get(_RECORD, {}).items():
        if key in (POSITIONS_KEY, ACKED_KEY) and isinstance(value, dict):
            value = {t: plan.by_namespace(where) for t, where in value.items()}
        record.put(key, value)
    record.commit()
    layout.delete(IMPORTING_KEY)
    layout.commit()
    return namespaces, entries


def _finish(kv: Any, txid: int) -> None:
    """Commit what was put, then give the namespace its committed txid: a prepare of
    nothing at ``txid`` (a state with nothing prepared may join at any txid), committed."""
    kv.commit()
    if txid >= 0:
        kv.prepare_commit(txid)
        kv.commit(txid)


def _write_layout(layout: Any, entries: Mapping[Any, Any], plan: ImportPlan) -> None:
    for key, value in entries.items():
        if key == IMPORTING_KEY:
            continue
        if key == PARALLELISM_KEY and isinstance(value, dict):
            value = plan.by_component(value)
        elif key == JOURNAL_KEY and isinstance(value, list):
            value = [c for c in map(plan.component, value) if c is not None]
        layout.put(key, value)
    layout.commit()
