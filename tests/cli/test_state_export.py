"""``statestream state export`` / ``import``: a topology's state moved between stores.

The word count is SIGKILLed mid-run on sqlite, exported there, imported into
Redis (under a changed topology: ``count`` renamed ``total``, 2 tasks -> 3,
or as it is) and finished on the local runtime or on Spark: the counts are
exact. An import killed half-way is refused by the next run, and imported
again with ``--force``. Every refusal is one line with the fix, exit 2.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from claims import Store, holding
from cli_process import statestream
from kill_loop import seeded_rng, sigkill_runs
from redis_server import REDIS_HOST, REDIS_PORT, delete_prefix, require_real_redis, unique_prefix

from statestream import load_topology
from statestream._registry import open_provider
from statestream.testing import committed_state, random_text

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = str(ROOT / "examples" / "wordcount.py")

# The word count with its counter renamed and on 3 tasks.
RENAMED = textwrap.dedent(
    f"""
    import sys
    sys.path.insert(0, {str(ROOT / "examples")!r})
    from wordcount import CORPUS, FileSpout, SplitSentence, TopologyBuilder, WordCount

    def topology():
        b = TopologyBuilder("wordcount")
        b.set_spout("sentences", FileSpout(path_key="wordcount.input", default_path=CORPUS))
        b.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
        b.set_bolt("total", WordCount(), {{tasks}}).{{grouping}}
        return b.build()
    """
)
FIELDS = 'fields_grouping("split", ["word"])'


def renamed(tmp_path: Path, tasks: int = 3, grouping: str = FIELDS) -> str:
    path = tmp_path / f"renamed_{tasks}_{abs(hash(grouping))}.py"
    path.write_text(RENAMED.format(tasks=tasks, grouping=grouping))
    return str(path)


def sqlite(db: Path, serializer: str = "json") -> list[str]:
    return [
        "--set", "topology.state.provider=sqlite",
        "--set", f"topology.state.provider.config={{path: {db}, serializer: {serializer}}}",
    ]  # fmt: skip


def redis(prefix: str) -> list[str]:
    return [
        "--set", "topology.state.provider=redis",
        "--set", "topology.state.provider.config="
        f"{{host: {REDIS_HOST}, port: {REDIS_PORT}, key_prefix: '{prefix}'}}",
    ]  # fmt: skip


def redis_config(prefix: str) -> dict[str, Any]:
    return {
        "topology.state.provider": "redis",
        "topology.state.provider.config": {
            "host": REDIS_HOST,
            "port": REDIS_PORT,
            "key_prefix": prefix,
        },
    }


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    require_real_redis()
    prefix = unique_prefix("sssavepoint")
    yield prefix
    delete_prefix(prefix)


def ok(*args: str) -> str:
    done = statestream(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def dumped(component: str, *settings: str) -> tuple[dict[str, int], set[int]]:
    """``state dump`` of ``component``: the counts, all tasks merged, and the tasks."""
    got: dict[str, int] = {}
    tasks = set()
    for line in ok("state", "dump", "--component", component, *settings).splitlines():
        entry = json.loads(line)
        assert entry["key"] not in got, f"{entry['key']!r} counted by two tasks"
        got[entry["key"]] = entry["value"]
        tasks.add(entry["task"])
    return got, tasks


def killed_mid_run(tmp_path: Path, settings: list[str]) -> tuple[list[str], dict[str, int]]:
    """The word count over a new corpus, SIGKILLed twice at random moments early in
    its work: the input settings and the exact counts."""
    corpus = tmp_path / "corpus.txt"
    expected = random_text(corpus, 30_000)
    common = [
        "--set", f"wordcount.input={corpus}",
        "--set", "topology.state.checkpoint.interval.ms=50",
    ]  # fmt: skip
    rng = seeded_rng()
    killed = sigkill_runs(
        [WORDCOUNT, "--until-idle", *common, *settings],
        kills=2,
        component="count",
        rng=rng,
        work=sum(expected.values()),
    )
    assert killed >= 1, "no run was killed before it ended"
    # On a loaded machine two early kills may both come before the first commit: kill
    # more runs, each later in its work, until one committed (the test needs state).
    for scale in (2, 4, 8):
        if exported(tmp_path / "probe.jsonl", settings) >= 0:
            break
        sigkill_runs(
            [WORDCOUNT, "--until-idle", *common, *settings],
            kills=1, component="count", rng=rng, work=scale * sum(expected.values()),
        )  # fmt: skip
    return common, dict(expected)


def exported(path: Path, settings: list[str]) -> int:
    """Export to ``path``; the txid of the checkpoint the savepoint holds."""
    line = ok("state", "export", "-o", str(path), *settings)
    assert line.startswith("exported topology 'wordcount' at checkpoint "), line
    return int(line.split("checkpoint ")[1].split(":")[0])


@pytest.mark.slow
@pytest.mark.redis
def test_killed_on_sqlite_moved_to_redis_renamed_and_rescaled_finishes_exactly(
    tmp_path: Path, redis_prefix: str
) -> None:
    db = tmp_path / "state.db"
    common, expected = killed_mid_run(tmp_path, sqlite(db))
    savepoint = tmp_path / "wordcount.jsonl.gz"
    txid = exported(savepoint, sqlite(db))
    assert txid >= 0, "the killed runs committed nothing: the test would prove nothing"
    target = renamed(tmp_path)
    out = ok(
        "state", "import", str(savepoint), "--topology", target, "--rename", "count=total",
        *redis(redis_prefix),
    )  # fmt: skip
    assert out.splitlines()[0].startswith(f"imported topology 'wordcount' at checkpoint {txid}:")
    assert "  renamed: 'count' -> 'total'" in out.splitlines()
    assert "  re-partitioned: 'total' from 2 to 3 tasks" in out
    imported, tasks = dumped("total", *redis(redis_prefix))
    assert tasks == {0, 1, 2}
    assert 0 < sum(imported.values()) < sum(expected.values()), "not mid-run"
    ok("run", target, "--until-idle", "--no-progress", *common, *redis(redis_prefix))
    assert dumped("total", *redis(redis_prefix))[0] == expected


@pytest.mark.slow
@pytest.mark.redis
@pytest.mark.spark
def test_killed_on_sqlite_moved_to_redis_finishes_exactly_on_spark(
    tmp_path: Path, redis_prefix: str, spark_session: Any
) -> None:
    from statestream.runtime.spark import SparkRuntime

    db = tmp_path / "state.db"
    common, expected = killed_mid_run(tmp_path, sqlite(db))
    savepoint = tmp_path / "wordcount.jsonl"
    assert exported(savepoint, sqlite(db)) >= 0
    ok("state", "import", str(savepoint), "--topology", WORDCOUNT, *redis(redis_prefix))
    topology = load_topology(WORDCOUNT)
    config = {**redis_config(redis_prefix), "wordcount.input": common[1].partition("=")[2]}
    assert 0 < sum(committed_state(topology, config, "count").values()) < sum(expected.values())
    result = SparkRuntime(topology, config, spark=spark_session).run(until_idle=True)
    assert result.errors == []
    assert committed_state(topology, config, "count") == expected


# An import SIGKILLed once it has written its first namespace.
KILLED_IMPORT = textwrap.dedent(
    """
    import os, signal, sys
    from statestream import _savepoint
    from statestream._cli import main

    finish = _savepoint._finish

    def killing_finish(kv, txid):
        finish(kv, txid)
        os.kill(os.getpid(), signal.SIGKILL)

    _savepoint._finish = killing_finish
    sys.argv = ["statestream", *sys.argv[1:]]
    main()
    """
)


def test_an_import_killed_half_way_is_refused_by_the_run_and_done_again_with_force(
    tmp_path: Path,
) -> None:
    corpus = tmp_path / "corpus.txt"
    expected = dict(random_text(corpus, 2_000))
    source, target = sqlite(tmp_path / "a.db"), sqlite(tmp_path / "b.db")
    common = ["--set", f"wordcount.input={corpus}"]
    ok("run", WORDCOUNT, "--until-idle", "--no-progress", *common, *source)
    savepoint = tmp_path / "wordcount.jsonl"
    exported(savepoint, source)
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_IMPORT, "state", "import", str(savepoint), *target],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    refused = statestream("run", WORDCOUNT, "--until-idle", *common, *target)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1] == (
        "statestream: error: the state of topology 'wordcount' in this store is an import of "
        f"{savepoint} that did not finish; import it again with `statestream state import "
        f"{savepoint} --force` (it starts over), or delete it: `statestream state clear "
        "--topology wordcount`"
    )
    again = statestream("state", "import", str(savepoint), *target)
    assert again.returncode == 2 and "--force" in again.stderr
    ok("state", "import", str(savepoint), "--force", *target)
    ok("run", WORDCOUNT, "--until-idle", "--no-progress", *common, *target)
    assert dumped("count", *target)[0] == expected


@pytest.fixture(scope="module")
def exported_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A finished word count on sqlite, its savepoint, and one of a pickle store."""
    tmp = tmp_path_factory.mktemp("savepoints")
    corpus = tmp / "corpus.txt"
    random_text(corpus, 300)
    common = ["--set", f"wordcount.input={corpus}"]
    found = {"db": tmp / "state.db", "file": tmp / "wordcount.jsonl"}
    found["pickled"] = tmp / "pickled.jsonl"
    ok("run", WORDCOUNT, "--until-idle", "--no-progress", *common, *sqlite(found["db"]))
    exported(found["file"], sqlite(found["db"]))
    pickle_db = tmp / "pickle.db"
    ok("run", WORDCOUNT, "--until-idle", "--no-progress", *common, *sqlite(pickle_db, "pickle"))
    exported(found["pickled"], sqlite(pickle_db, "pickle"))
    lines = found["file"].read_text().splitlines(keepends=True)
    (tmp / "cut.jsonl").write_text("".join(lines[:-1]))
    (tmp / "stranger.jsonl").write_text('{"hello": 1}\n')
    header = json.loads(lines[0])
    (tmp / "future.jsonl").write_text(
        json.dumps({**header, "statestream.savepoint": 99}) + "\n" + "".join(lines[1:])
    )
    return {**found, "tmp": tmp}


MEMORY = ["--set", "topology.state.provider=memory"]

REFUSALS: list[Any] = [
    pytest.param(
        lambda s, t: ["state", "export", "-o", str(t / "x.jsonl"), *MEMORY],
        "the memory state provider keeps state inside the process that ran the topology, so "
        "`statestream state export` (a process of its own) cannot reach it: call "
        "statestream.export_state() in that process, or run on a store that outlives it",
        id="export-memory",
    ),
    pytest.param(
        lambda s, t: ["state", "import", str(s["file"]), *MEMORY],
        "call statestream.import_state() in that process",
        id="import-memory",
    ),
    pytest.param(
        lambda s, t: ["state", "export", "-o", str(t / "x.jsonl"), *sqlite(t / "none.db")],
        "no state store at {t}/none.db; is it the config the topology ran with?",
        id="export-no-store",
    ),
    pytest.param(
        lambda s, t: ["state", "export", "-o", "x", "--topology", "other", *sqlite(s["db"])],
        "the store holds no state of topology 'other'; topologies with state: 'wordcount'",
        id="export-unknown-topology",
    ),
    pytest.param(
        lambda s, t: ["state", "import", str(t / "none.jsonl"), *sqlite(t / "b.db")],
        "cannot read the savepoint '{t}/none.jsonl': No such file or directory",
        id="no-file",
    ),
    pytest.param(
        lambda s, t: ["state", "import", str(s["tmp"] / "stranger.jsonl"), *sqlite(t / "b.db")],
        "is not a statestream savepoint (its first line has no 'statestream.savepoint'); give "
        "a file `statestream state export` wrote",
        id="not-a-savepoint",
    ),
    pytest.param(
        lambda s, t: ["state", "import", str(s["tmp"] / "cut.jsonl"), *sqlite(t / "b.db")],
        "the file ends before its end line (cut short?)",
        id="cut-short",
    ),
    pytest.param(
        lambda s, t: ["state", "import", str(s["tmp"] / "future.jsonl"), *sqlite(t / "b.db")],
        "is a savepoint of format 99; this statestream reads format 1: import it with the "
        "statestream that exported it, or a newer one",
        id="future-format",
    ),
    pytest.param(
        lambda s, t: ["state", "import", str(s["file"]), *sqlite(s["db"])],
        "the store already holds state of topology 'wordcount' (4 namespaces): delete it "
        "first (statestream state clear --topology wordcount), import into another store, "
        "or replace it with --force",
        id="store-holds-it",
    ),
    pytest.param(
        lambda s, t: [
            "state",
            "import",
            str(s["file"]),
            "--topology",
            renamed(t),
            *sqlite(t / "b.db"),
        ],
        "the savepoint holds state of stateful bolt 'count' (2 tasks), which topology "
        "'wordcount' does not have: give its new name with --rename count=NEW, or leave its "
        "state out with --drop",
        id="bolt-removed",
    ),
    pytest.param(
        lambda s, t: ["state", "import", str(s["file"]), "--rename", "count", *sqlite(t / "b.db")],
        "--rename 'count': give OLD=NEW, once per component",
        id="bad-rename",
    ),
    pytest.param(
        lambda s, t: ["state", "import", str(s["file"]), "--drop", *sqlite(t / "b.db")],
        "--drop needs the topology to import into",
        id="drop-without-topology",
    ),
    pytest.param(
        lambda s, t: ["state", "import", str(s["pickled"]), *sqlite(t / "b.db")],
        "are pickle-encoded and the target store encodes with json: set serializer: pickle "
        "in its topology.state.provider.config",
        id="serializer",
    ),
    pytest.param(
        lambda s, t: [
            "state",
            "import",
            str(s["file"]),
            "--rename",
            "count=total",
            "--topology",
            renamed(t, 3, 'shuffle_grouping("split")'),
            *sqlite(t / "b.db"),
        ],
        "stateful bolt 'total' changed parallelism, but its input is not only fields grouped",
        id="not-rescalable",
    ),
]


@pytest.mark.parametrize(("command", "message"), REFUSALS)
def test_each_refusal_is_one_line_with_the_fix_and_changes_nothing(
    exported_store: dict[str, Path], tmp_path: Path, command: Any, message: str
) -> None:
    store = exported_store
    done = statestream(*command(store, tmp_path))
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("statestream: error: ")
    assert message.format(t=tmp_path) in done.stderr
    # Nothing was written: the target store holds no state, the source the same.
    assert not (tmp_path / "x.jsonl").exists()
    info = ok("state", "info", *sqlite(store["db"]))
    assert info.count("namespace:") == 4
    if (tmp_path / "b.db").exists():
        assert "no committed state" in ok("state", "info", *sqlite(tmp_path / "b.db"))


def test_drop_leaves_out_a_removed_bolt_and_force_replaces_a_store(
    exported_store: dict[str, Path], tmp_path: Path
) -> None:
    store = exported_store
    # The counter gone from the topology: --drop imports the rest (the positions).
    target = renamed(tmp_path)
    db = sqlite(tmp_path / "b.db")
    out = ok("state", "import", str(store["file"]), "--topology", target, "--drop", *db)
    assert "  left out: the state of stateful bolt 'count' (--drop)" in out.splitlines()
    assert "  starts empty: stateful bolt 'total' (no state in the savepoint)" in out.splitlines()
    info = ok("state", "info", *db)
    assert "count-0" not in info and "$checkpointspout-0" in info
    # --force: the same store replaced by the savepoint as it is.
    ok("state", "import", str(store["file"]), "--force", *db)
    assert dumped("count", *db) == dumped("count", *sqlite(store["db"]))
    assert collections.Counter(dumped("count", *db)[0]).total() > 0


def test_export_and_import_wait_for_a_run_that_holds_the_topology(
    store: Store, tmp_path: Path
) -> None:
    with open_provider(store.spec, store.config, scope="wordcount") as provider:
        state = provider.get_state("count-0")
        state.put("the", 3)
        state.commit()
    settings = [
        "--set", f"topology.state.provider={store.spec}",
        "--set", f"topology.state.provider.config={json.dumps(dict(store.config))}",
        "--set", "topology.state.claim.wait.secs=0.3",
    ]  # fmt: skip
    savepoint = tmp_path / "wordcount.jsonl"
    with holding(store, "wordcount") as holder:
        for command in (["export", "-o", str(savepoint)], ["import", str(savepoint), "--force"]):
            if command[0] == "import":
                savepoint.write_text(_savepoint_of_store(tmp_path))
            refused = statestream("state", *command, *settings)
            assert refused.returncode == 1, refused.stderr
            assert len(refused.stderr.splitlines()) == 1, refused.stderr
            assert refused.stderr.startswith(
                "statestream: error: another `statestream run` or `state clear` of topology "
                f"'wordcount' holds {store.where('wordcount')} (pid {holder.pids[0]}"
            )
        assert not list(tmp_path.glob(".wordcount.jsonl.*"))  # no temporary file left
    ok("state", "export", "-o", str(savepoint), *settings)
    ok("state", "import", str(savepoint), "--force", *settings)
    assert dumped("count", *settings)[0] == {"the": 3}


def _savepoint_of_store(tmp_path: Path) -> str:
    """A savepoint of 'wordcount' written from another store (sqlite)."""
    db = tmp_path / "other.db"
    with open_provider("sqlite", {"path": str(db)}, scope="wordcount") as provider:
        state = provider.get_state("count-0")
        state.put("a", 1)
        state.commit()
    ok("state", "export", "-o", str(tmp_path / "other.jsonl"), *sqlite(db))
    return (tmp_path / "other.jsonl").read_text()
