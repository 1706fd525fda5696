"""The ``statestream`` command line.

Exit codes: 0 done, 1 runtime failure, 2 usage or configuration error (one
line, no traceback), 130 stopped by Ctrl-C (SIGINT), 143 by SIGTERM (the
first signal asks for a clean shutdown, a second aborts at once).
"""

from __future__ import annotations

import copy
import logging
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import click

from . import _core
from ._components import task_namespace
from ._config import Config, load_config, settings_of
from ._errors import ConfigError, StatestreamError, TopologyError
from ._progress import Progress, print_summary
from ._run import live_view, load_topology
from ._settings import schema
from ._text import count, cut_message, cut_value, error_line
from .runtime.contract import Runtime, make_runtime
from .runtime.plan import RuntimePlan

__all__ = ["main"]

# 0 clean; 1 the run failed; 2 a usage or config mistake; 3 the run finished
# but components reported errors or dead-lettered messages; 128 + the signal's number when a signal
# stopped the run (130 Ctrl-C, 143 SIGTERM), as a shell reports it: a run that
# was stopped did not finish, whatever its summary says.
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_WITH_ERRORS = 0, 1, 2, 3

_CONFIG_HELP = "A YAML or JSON config file; repeat to layer several (later wins)."
_SET_HELP = "Set one config key, e.g. --set topology.max.spout.pending=1000; repeatable, wins over files and STATESTREAM_* variables."


def _config_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--config FILE... and --set KEY=VALUE..., the same on every command that reads config."""
    f = click.option("--set", "-s", "sets", multiple=True, metavar="KEY=VALUE", help=_SET_HELP)(f)
    return click.option(
        "--config", "-c", "configs", multiple=True, metavar="FILE", help=_CONFIG_HELP
    )(f)


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"statestream: error: {message}", err=True)
    sys.exit(code)


# Client libraries that log their own ERROR lines, with tracebacks, for a lost
# connection that the connector rides out and reports in one line of its own
# (pika: about a dozen each time a RabbitMQ broker drops). Heard only with -v.
_CLIENT_LOGGERS = ("pika",)


def _setup_logging(verbose: bool) -> None:
    """statestream's log on stderr: WARNING and up, DEBUG with ``-v``; the clients'
    own connection chatter (``_CLIENT_LOGGERS``) only with ``-v``."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in _CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.CRITICAL + 1)
    # A run's steps (runtime.spark.status: a Spark run's first seconds), for people:
    # plain ``statestream: ...`` lines, as the CLI's own.
    status = logging.getLogger("statestream.status")
    status.setLevel(logging.INFO)
    status.propagate = False
    if not any(isinstance(h, _StatusLines) for h in status.handlers):
        status.addHandler(_StatusLines())


class _StatusLines(logging.Handler):
    """Each record as a line ``statestream: MESSAGE`` on the current stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"statestream: {record.getMessage()}", err=True)


@contextmanager
def _errors(verbose: bool = False) -> Iterator[None]:
    """Turn our errors into exit codes: config/usage problems are one line and exit 2."""
    try:
        yield
    except (ConfigError, TopologyError) as exc:
        if verbose and exc.__cause__ is not None:
            traceback.print_exc()  # the user's own traceback (a topology file that raised)
        _fail(cut_message(str(exc)), EXIT_USAGE)
    except StatestreamError as exc:
        if verbose:
            traceback.print_exc()
        _fail(cut_message(str(exc)), EXIT_FAILURE)


def _load_config(
    configs: Sequence[str], sets: Sequence[str], prefixes: Sequence[str] = ()
) -> Config:
    return load_config(files=configs, sets=sets, topology_prefixes=prefixes)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="statestream")
def main() -> None:
    """statestream: Storm's stateful-bolt model in Python.

    Configuration is layered: the shipped defaults < --config files < STATESTREAM_*
    environment variables (STATESTREAM_TOPOLOGY_MAX_SPOUT_PENDING=1000 sets
    topology.max.spout.pending) < --set KEY=VALUE.
    """


@main.command()
@click.argument("topology")
@_config_options
@click.option(
    "--until-idle",
    is_flag=True,
    help="Stop once every spout is exhausted and nothing is in flight.",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="Stop after this many seconds.",
)
@click.option(
    "--runner",
    metavar="NAME",
    # Any registered runner (local, spark, a third party's): topology.runner's
    # validation checks it against the registry, after the topology registered its own.
    help="Overrides topology.runner: local, spark or another registered runner.",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Live progress (default: on a terminal; otherwise a status line every statestream.progress.interval.secs).",
)
@click.option(
    "--ui",
    metavar="[HOST:]PORT",
    help="Serve a live view of the run (page, /metrics, /api/v1/topology) at PORT on "
    "127.0.0.1, or at HOST:PORT; 0 picks a free port. Overrides topology.ui.",
)
@click.option(
    "--verbose", "-v", is_flag=True, help="Tracebacks for runtime failures, debug logging."
)
def run(
    topology: str,
    configs: tuple[str, ...],
    sets: tuple[str, ...],
    until_idle: bool,
    duration: float | None,
    runner: str | None,
    progress: bool | None,
    ui: str | None,
    verbose: bool,
) -> None:
    """Run TOPOLOGY: a .py file or a module (its `topology` attribute), or
    FILE:attribute or module:attribute, naming a Topology or a function
    returning one. `statestream run statestream.examples.wordcount --until-idle`
    runs the word count that ships with the package.

    Exit codes: 0 finished cleanly; 1 the run failed; 2 a usage or config
    mistake; 3 finished, but components reported errors or messages were
    dead-lettered (the summary says how many and where; the log has the first
    tracebacks); 130 stopped by Ctrl-C,
    143 by SIGTERM (the first signal stops cleanly: what was processed is
    committed and the summary printed; a second one aborts at once).
    """
    if until_idle and duration is not None:
        _fail("--until-idle and --duration exclude each other; pick one", EXIT_USAGE)
    _setup_logging(verbose)
    with _errors(verbose):
        topo = load_topology(topology)
        overrides = [f"topology.runner={runner}"] if runner else []
        overrides += [f"topology.ui={ui}"] if ui else []
        conf = _load_config(configs, list(sets) + overrides, (topo.name,))
        rt = make_runtime(topo, conf)
        task_names = RuntimePlan(topo, conf).task_names
    show_live = sys.stderr.isatty() if progress is None else progress
    signals: list[int] = []  # those that asked the run to stop, in order

    def on_signal(signum: int, frame: Any) -> None:
        signals.append(signum)
        if len(signals) > 1:
            raise KeyboardInterrupt
        click.echo("statestream: stopping (Ctrl-C again to abort)", err=True)
        rt.stop()

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    reporter = Progress(rt, conf, task_names, live=show_live and (progress is not False))
    try:
        # Opened before the progress starts: a run refused at open (another run
        # holds the store, after waiting for it) shows its one error line only.
        with _errors(verbose):
            _start_line(rt, topo.name, conf)
            view = live_view(rt, topo, conf, lambda line: click.echo(line, err=True))
        with view, reporter, _errors(verbose):
            result = rt.run(until_idle=until_idle, duration=duration)
    except KeyboardInterrupt:
        click.echo("statestream: aborted", err=True)
        sys.exit(128 + (signals[0] if signals else signal.SIGINT))
    except Exception as exc:
        if verbose:
            traceback.print_exc()
        _fail(f"the run failed: {error_line(exc)} (run with -v for the traceback)", EXIT_FAILURE)
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
    print_summary(result, rt.deadletter_path)
    if signals:
        sys.exit(128 + signals[0])
    if result.errors or result.dead_lettered:
        # A message given up on is no clean run, even when nothing raised (a bolt
        # that called collector.fail()): a script must be able to tell.
        sys.exit(EXIT_WITH_ERRORS)


def _start_line(rt: Runtime, name: str, conf: Config) -> None:
    """Open the runtime's tasks, then say where the run's dead letters go (after the
    open, so that a run refused at open shows its one error line only)."""
    rt.open()  # as run() does: a failed open is reported, not cleaned up
    click.echo(
        f"statestream: running {name!r} on {settings_of(conf).topology_runner} with the "
        f"{_core.describe()}; "
        f"dead letters go to {rt.deadletter_path}",
        err=True,
    )


@main.group()
def state() -> None:
    """Inspect, clear, export or import committed state, with the config the
    topology ran with (export/import: savepoints that move it to another store).

    A store may hold several topologies; each one's state is kept apart under
    its name. --topology picks one (its name, or its .py file or
    module:attribute); without it, the store's only topology is used.
    """


def _used_prefixes(configs: Sequence[str], sets: Sequence[str]) -> set[str]:
    """The topology prefixes the config files and --set use (``clicks.input`` ->
    ``clicks``), so that the config a topology ran with reads here too."""
    from ._config import _file_settings

    keys = [s.key for path in configs for s in _file_settings(Path(path))]
    keys += [item.partition("=")[0].strip() for item in sets]
    return {k.split(".", 1)[0] for k in keys if "." in k} - schema().reserved


class _Store:
    """The store a `state` command reads: the provider (unscoped) and the topologies in it."""

    def __init__(self, configs: Sequence[str], sets: Sequence[str], topology: str | None) -> None:
        from ._registry import open_provider, stored_topologies

        name = topology
        prefixes = _used_prefixes(configs, sets)
        if topology is not None and (topology.endswith(".py") or ":" in topology):
            name = load_topology(topology).name
        if name:
            prefixes.add(name)
        conf = load_config(files=configs, sets=sets, topology_prefixes=sorted(prefixes))
        settings = settings_of(conf)
        spec = settings.topology_state_provider
        provider_conf = copy.deepcopy(settings.topology_state_provider_config)
        self.provider = open_provider(spec, provider_conf)
        missing = getattr(self.provider, "missing_store", None)
        where = missing() if missing is not None else None
        if where:
            self.provider.close()
            _fail(
                f"no state store at {where} (topology.state.provider {spec!r}); nothing was "
                "ever checkpointed there. Is it the config the topology ran with?",
                EXIT_USAGE,
            )
        self.conf = conf
        self.topologies = stored_topologies(self.provider.namespaces())
        self.name = name

    def pick(self) -> str:
        """The topology to act on: --topology, or the only one in the store."""
        found = self.topologies
        if self.name is not None:
            if self.name not in found:
                _fail(
                    f"the store holds no state of topology {self.name!r}; {self._listing()}",
                    EXIT_USAGE,
                )
            return self.name
        if len(found) == 1:
            return next(iter(found))
        if not found:
            _fail(
                "the store holds no committed state (is it the config the topology ran with?)",
                EXIT_USAGE,
            )
        _fail(
            f"the store holds several topologies; pick one with --topology: {self._listing()}",
            EXIT_USAGE,
        )

    def _listing(self) -> str:
        names = [
            repr(t) if t else "(unscoped: written before state was kept by topology)"
            for t in self.topologies
        ]
        return "topologies with state: " + (", ".join(names) or "none")

    @contextmanager
    def claim(self, topology: str) -> Iterator[list[str]]:
        """Hold ``topology``'s scope of the store as a run does, for a command that
        writes its state; yields its namespaces, read again under the claim.

        Raises StateLockedError if a run (or another command) holds it past
        ``topology.state.claim.wait.secs``; a run started meanwhile waits for
        it likewise. The unscoped namespaces of old stores (topology ``""``)
        belong to no run: nothing to claim for them.
        """
        from ._registry import RunClaim, stored_topologies

        claim = RunClaim()
        if topology:
            claim.take(self.provider, topology, self.conf)
        try:
            self.topologies = stored_topologies(self.provider.namespaces())
            yield self.topologies.get(topology, [])
        finally:
            claim.release()

    def namespace(self, topology: str, namespace: str) -> str:
        from ._registry import SCOPE_SEPARATOR

        return f"{topology}{SCOPE_SEPARATOR}{namespace}" if topology else namespace

    def __enter__(self) -> _Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.provider.close()


_topology_option = click.option(
    "--topology",
    help="The topology: its name in the store, or its .py file or module:attribute "
    "(default: the only topology the store holds).",
)


def _tasks_with_state(namespaces: Sequence[str]) -> dict[str, list[int]]:
    """``{component: sorted task ids}`` of the namespaces (``"<component>-<task>"``)."""
    tasks: dict[str, list[int]] = {}
    for ns in namespaces:
        component, _, task = ns.rpartition("-")
        if component and task.isdigit():
            tasks.setdefault(component, []).append(int(task))
    return {component: sorted(ids) for component, ids in sorted(tasks.items())}


def _no_state(stored: dict[str, list[int]]) -> str:
    """The rest of "component X ...": it has no state, and which components do."""
    # $checkpointspout and friends are the runtime's, not bolts one would dump.
    bolts = [name for name in stored if not name.startswith("$")]
    if not bolts:
        return "has no committed state, and no component of this topology has any"
    return "has no committed state; components with state: " + ", ".join(map(repr, bolts))


@state.command("dump")
@_config_options
@click.option("--component", required=True, help="The stateful bolt whose state to print.")
@click.option("--task", type=click.IntRange(min=0), help="Only this task (default: every task).")
@_topology_option
def state_dump(
    configs: tuple[str, ...],
    sets: tuple[str, ...],
    component: str,
    task: int | None,
    topology: str | None,
) -> None:
    """Print the committed entries of COMPONENT as JSON lines
    {"topology", "component", "task", "key", "value"}.

    Read-only: it takes no claim of the store, so it also reads a topology
    while it runs (what its last checkpoint committed).
    """
    import orjson

    with _errors(), _Store(configs, sets, topology) as store:
        name = store.pick()
        stored = _tasks_with_state(store.topologies[name])
        have = stored.get(component)
        if not have:
            # Printing nothing would read as "an empty state": say what is there.
            _fail(f"component {component!r} of {name!r} {_no_state(stored)}", EXIT_USAGE)
        if task is not None and task not in have:
            _fail(
                f"task {task} of component {component!r} has no committed state; "
                f"tasks with state: {', '.join(map(str, have))}",
                EXIT_USAGE,
            )
        out = sys.stdout.buffer
        for t in have if task is None else [task]:
            kv = store.provider.get_state(store.namespace(name, task_namespace(component, t)))
            for key, value in kv.items():
                entry = {"topology": name, "component": component, "task": t}
                out.write(orjson.dumps({**entry, "key": key, "value": value}) + b"\n")
        out.flush()


@state.command("info")
@_config_options
@_topology_option
def state_info(configs: tuple[str, ...], sets: tuple[str, ...], topology: str | None) -> None:
    """Print, per topology in the store, the checkpoint's txid and phase and the
    namespaces that hold state.

    Read-only: it takes no claim of the store, so it also reads a topology
    while it runs (what its last checkpoint committed).
    """
    from ._checkpoint import CheckpointState
    from ._exactly_once import CHECKPOINT_KEY as CHECKPOINT_STATE_KEY
    from ._stateful import CHECKPOINT_SPOUT

    with _errors(), _Store(configs, sets, topology) as store:
        names = [store.pick()] if topology is not None else list(store.topologies)
        if not names:
            click.echo("no committed state in this store (is it the config the topology ran with?)")
        for name in names:
            click.echo(
                f"topology: {name}"
                if name
                else "topology: (unscoped: written before state was kept by topology)"
            )
            kv = store.provider.get_state(
                store.namespace(name, task_namespace(CHECKPOINT_SPOUT, 0))
            )
            raw = kv.get(CHECKPOINT_STATE_KEY)
            if raw is None:
                click.echo("  checkpoint: none")
            else:
                cs = CheckpointState.from_json(raw)
                click.echo(f"  checkpoint: txid {cs.txid} phase {cs.phase.value}")
            for ns in store.topologies[name]:
                click.echo(f"  namespace: {ns}")


@state.command("clear")
@_config_options
@click.option(
    "--topology",
    required=True,
    help="The topology whose state to delete (its name, or its .py file).",
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def state_clear(configs: tuple[str, ...], sets: tuple[str, ...], topology: str, yes: bool) -> None:
    """Delete everything one topology keeps in the store: its bolts' state, its
    spouts' positions, its checkpoint and their txids; the next run starts from
    the beginning, as on a new store. Other topologies in the store are untouched.
    Not cleared: the sinks' targets (empty them yourself if the next run should
    start them anew; their guards belong to the cleared state's lineage and are
    never taken for the next one's) and the dead-letter file.

    It claims the topology's part of the store as a run does: while a run of
    the topology holds it, it waits topology.state.claim.wait.secs, then
    exits 1 naming that run; a run started meanwhile waits for it (the
    confirmation included) likewise.
    """
    from ._registry import clear_topology

    with _errors(), _Store(configs, sets, topology) as store:
        name = store.pick()
        with store.claim(name) as namespaces:
            if not yes:
                click.confirm(
                    f"delete the state of topology {name!r} ({len(namespaces)} namespaces: "
                    f"{', '.join(namespaces[:5])}{', ...' if len(namespaces) > 5 else ''})?",
                    abort=True,
                )
            dropped = clear_topology(store.provider, name)
        click.echo(f"cleared {len(dropped)} namespaces of topology {name!r}")
        # What it leaves, so that nobody mistakes a clear for a reset of everything.
        click.echo(
            "not cleared: the sinks' targets and their guards (rows written before stay; "
            "the next run's sinks write every checkpoint again, under a new lineage of the "
            "state), and the dead-letter file"
        )


def _savepoint_target(
    configs: Sequence[str], sets: Sequence[str], topology: str | None, command: str
) -> tuple[Config, Any]:
    """The config of a ``state export``/``import`` and its --topology: a Topology when
    it names a file or module, else the name (or None); exit 2 for a store that
    lives in one process (memory)."""
    from ._savepoint import in_process_refusal

    target: Any = topology
    if topology is not None and (topology.endswith(".py") or ":" in topology):
        target = load_topology(topology)
    name = getattr(target, "name", target)
    prefixes = _used_prefixes(configs, sets) | ({name} if name else set())
    conf = load_config(files=configs, sets=sets, topology_prefixes=sorted(prefixes))
    refusal = in_process_refusal(conf, command)
    if refusal:
        _fail(refusal, EXIT_USAGE)
    return conf, target


@state.command("export")
@_config_options
@_topology_option
@click.option(
    "--output",
    "-o",
    required=True,
    metavar="FILE",
    help="The savepoint to write (JSON lines; gzip if FILE ends in .gz).",
)
def state_export(
    configs: tuple[str, ...], sets: tuple[str, ...], topology: str | None, output: str
) -> None:
    """Write one topology's committed state, its spouts' positions and its
    checkpoint record to FILE, a savepoint that `statestream state import`
    loads into any store.

    It claims the topology's part of the store as a run does (waiting
    topology.state.claim.wait.secs for a run that holds it) and settles what
    a killed run left prepared, as the next start would.
    """
    from ._savepoint import export_state

    with _errors():
        conf, target = _savepoint_target(configs, sets, topology, "export")
        done = export_state(output, target, conf)
    click.echo(
        f"exported topology {done.topology!r} at checkpoint {done.txid}: "
        f"{count(done.namespaces, 'namespace')}, {count(done.entries, 'entry', 'entries')} "
        f"to {output}"
    )


@state.command("import")
@click.argument("file")
@_config_options
@click.option(
    "--topology",
    help="The topology to import into: its .py file or module:attribute (checked against "
    "the savepoint), or a name (imported as it is). Default: the savepoint's topology.",
)
@click.option(
    "--rename",
    "renames",
    multiple=True,
    metavar="OLD=NEW",
    help="Give the state of component OLD to component NEW; repeatable.",
)
@click.option(
    "--drop",
    is_flag=True,
    help="Leave out the state of components the topology no longer has (default: refuse).",
)
@click.option("--force", is_flag=True, help="Replace the state the store holds of the topology.")
def state_import(
    file: str,
    configs: tuple[str, ...],
    sets: tuple[str, ...],
    topology: str | None,
    renames: tuple[str, ...],
    drop: bool,
    force: bool,
) -> None:
    """Load the savepoint FILE (from `statestream state export`) into the store
    the config names; the next run of the topology goes on from its checkpoint.

    With --topology FILE.py the savepoint is checked against that topology: a
    component renamed needs --rename OLD=NEW, a stateful bolt the savepoint
    has no state of starts empty, one the topology no longer has is refused
    unless --drop, and a stateful bolt whose parallelism changed is
    re-partitioned. A store that holds state of the topology is refused
    unless --force.
    """
    from ._savepoint import import_state
    from ._savepoint_plan import parse_renames

    with _errors():
        conf, target = _savepoint_target(configs, sets, topology, "import")
        mapping = parse_renames(renames)
        done = import_state(file, target, conf, rename=mapping, drop=drop, force=force)
    click.echo(
        f"imported topology {done.topology!r} at checkpoint {done.txid}: "
        f"{count(done.namespaces, 'namespace')}, {count(done.entries, 'entry', 'entries')} "
        f"from {file}"
    )
    for note in done.notes:
        click.echo(f"  {note}")


@main.command()
def providers() -> None:
    """List the installed state providers (entry point group statestream.providers)."""
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group="statestream.providers"), key=lambda e: e.name):
        click.echo(f"{ep.name}\t{ep.value}")


@main.command("topology")
@click.argument("topology")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "dot", "mermaid"]),
    default="text",
    show_default=True,
    help="text: components and wiring; dot (Graphviz) or mermaid: the graph the live view draws.",
)
def show_topology(topology: str, fmt: str) -> None:
    """Validate TOPOLOGY and print its components and wiring, or its graph."""
    with _errors():
        topo = load_topology(topology)
    if fmt != "text":
        from ._ui.graph import to_dot, to_mermaid, topology_graph

        click.echo((to_dot if fmt == "dot" else to_mermaid)(topology_graph(topo)), nl=False)
        return
    click.echo(f"topology {topo.name!r}")
    for spec in topo.components.values():
        kind = "spout" if spec.is_spout else ("stateful bolt" if spec.is_stateful else "bolt")
        tasks = count(spec.parallelism, "task")
        click.echo(f"  {spec.id} ({kind} {type(spec.user_obj).__name__}, {tasks})")
        for stream, (fields, direct) in spec.outputs.items():
            click.echo(f"    emits {stream}{' (direct)' if direct else ''}: {list(fields)}")
        for sub in spec.inputs:
            click.echo(f"    <- {sub.source}:{sub.stream} {sub.grouping.describe()}")


# --------------------------------------------------------------------------- deadletter


@main.group()
def deadletter() -> None:
    """Show the dead-letter file, or feed its messages back into the next run.

    The file is statestream.deadletter.path, or deadletter.jsonl beside the
    state of the run (the start-up line of `statestream run` names it): give
    the same --config/--set as the run, or --path.
    """


def _deadletter_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--topology", "topology", metavar="NAME", help="Only this topology's dead letters."
    )(f)
    f = click.option(
        "--path",
        "path",
        metavar="FILE",
        help="The dead-letter file (default: from the config, as the run finds it).",
    )(f)
    return _config_options(f)


def _config_prefixes(configs: Sequence[str]) -> list[str]:
    """First segments of the keys in the config files that may be a topology's own."""
    import yaml

    found = set()
    for path in configs:
        try:
            data = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue  # load_config names the problem
        if isinstance(data, dict):
            for key in data:
                head = str(key).split(".", 1)[0]
                if head not in schema().reserved:
                    found.add(head)
    return sorted(found)


def _deadletter_file(
    configs: Sequence[str], sets: Sequence[str], path: str | None, topology: str | None
) -> Any:
    """The dead-letter file the options name; exit 2 naming it if there is none."""
    from ._deadletter import DEFAULT_NAME, DeadLetterFile, configured_path, missing_file

    if path is None:
        prefixes = _config_prefixes(configs) + ([topology] if topology else [])
        conf = load_config(files=configs, sets=sets, topology_prefixes=prefixes)
        where = configured_path(conf)
        settings = settings_of(conf)
        provider = settings.topology_state_provider
        how = (
            "statestream.deadletter.path"
            if settings.statestream_deadletter_path
            else f"where a run with topology.state.provider {provider!r} writes it"
        )
    else:
        where, how = Path(path), "--path"
    if not where.exists():
        # The folders of the working directory: sqlite's default store folder among them.
        _fail(missing_file(where, how, sorted(Path().glob(f"*/{DEFAULT_NAME}"))), EXIT_USAGE)
    return DeadLetterFile(where)


@deadletter.command("show")
@_deadletter_options
@click.option("--json", "as_json", is_flag=True, help="JSON lines, as in the file.")
def deadletter_show(
    configs: tuple[str, ...],
    sets: tuple[str, ...],
    path: str | None,
    topology: str | None,
    as_json: bool,
) -> None:
    """Print the dead-letter file: a table, or JSON lines with --json."""
    with _errors():
        dl = _deadletter_file(configs, sets, path, topology)
        records = [r for r in dl.records() if topology is None or r.topology == topology]
    if as_json:
        out = sys.stdout.buffer
        for r in records:
            out.write(r.to_json() + b"\n")
        out.flush()
        return
    headers = ("topology", "spout", "msg id", "status", "attempts", "failed in", "error", "values")
    rows = [
        (
            r.topology,
            r.namespace,
            cut_value(str(r.msg_id), 20),
            r.status,
            str(r.attempts),
            r.component,
            cut_value(f"{r.error_type}: {r.error}", 60),
            cut_value(", ".join(map(str, r.values)), 60),
        )
        for r in records
    ]
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    click.echo("\n".join(lines))
    click.echo(f"{count(len(records), 'dead letter')} in {dl.path}", err=True)


@deadletter.command("replay")
@_deadletter_options
@click.option("--spout", metavar="COMPONENT", help="Only this spout's dead letters.")
def deadletter_replay(
    configs: tuple[str, ...],
    sets: tuple[str, ...],
    path: str | None,
    topology: str | None,
    spout: str | None,
) -> None:
    """Mark the dead letters for replay: the next `statestream run` of their topology
    emits them again (once you fixed the bolt), through the spout that emitted them,
    and marks them replayed when they went through; one that fails to its last
    attempt again is dead again. Run it while the topology is not running."""
    from ._deadletter import DEAD, REPLAY, DeadLetter

    def mark(r: DeadLetter) -> bool:
        if r.status != DEAD or (topology is not None and r.topology != topology):
            return False
        if (spout is not None and r.spout != spout) or not r.exact:
            return False
        r.status = REPLAY
        return True

    with _errors():
        dl = _deadletter_file(configs, sets, path, topology)
        inexact = sum(1 for r in dl.records() if r.status == DEAD and not r.exact)
        n = dl.update(mark)
    click.echo(
        f"statestream: {count(n, 'dead letter')} marked for replay in {dl.path}; the next run of "
        "their topology feeds them back"
    )
    if inexact:
        click.echo(
            f"statestream: {count(inexact, 'dead letter')} hold values written as their repr and "
            "cannot be replayed",
            err=True,
        )
